"""A batch's documents (pure): engine specs, each task's outcome, totals, the exit code, and the
JUnit XML, Markdown and HTML views of it."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from runner.base.errors import ExitCode, UsageError
from runner.model.stages import STAGE_NAMES

_URL = re.compile(r"^(unix|tcp|ssh|npipe|http|https)://\S+$")
_CONTEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
GATES = STAGE_NAMES
MAX_SUMMARY_BYTES = 1024 * 1024  # GitHub's step summary limit


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """`URL[=N]` or `CONTEXT[=N]`: where tasks may run, and how many at once there."""

    name: str
    url: str | None  # None: a Docker context of this name
    capacity: int
    inherit: bool = False  # the engine the environment names (DOCKER_HOST, the context)

    @classmethod
    def from_environment(cls, capacity: int) -> EngineSpec:
        return cls(
            name="default (DOCKER_HOST or the current context)",
            url=None,
            capacity=capacity,
            inherit=True,
        )

    @classmethod
    def parse(cls, text: str, *, default_capacity: int) -> EngineSpec:
        target, _, capacity_text = text.rpartition("=") if "=" in text else (text, "", "")
        if not capacity_text:
            target, capacity = text, default_capacity
        else:
            if not capacity_text.isdigit() or not 1 <= int(capacity_text) <= 64:
                raise UsageError(
                    f"{text!r}: the capacity after '=' is a number from 1 to 64",
                    field="--engine",
                )
            capacity = int(capacity_text)
        if _URL.match(target):
            return cls(name=target, url=target, capacity=capacity)
        if _CONTEXT.match(target):
            return cls(name=target, url=None, capacity=capacity)
        raise UsageError(
            f"{text!r} is neither an engine URL (unix://, tcp://, ssh://) nor a Docker "
            "context name",
            field="--engine",
        )


@dataclass(kw_only=True)
class TaskOutcome:
    target: str
    task_id: str | None = None
    verdict: str = "infrastructure_failed"
    reason: str = ""
    seconds: float = 0.0
    engine: str | None = None
    attempts: int = 0
    moved: int = 0  # times its engine was lost under it
    run_dir: str | None = None
    report: dict[str, Any] | None = None

    def first_red(self) -> str | None:
        stages = (self.report or {}).get("stages") or {}
        for name in GATES:
            if (stages.get(name) or {}).get("status") in ("failed", "error"):
                return name
        return None

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "taskId": self.task_id,
            "verdict": self.verdict,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "engine": self.engine,
            "attempts": self.attempts,
            "moved": self.moved,
            "runDir": self.run_dir,
            "firstRed": self.first_red(),
            "report": self.report,
        }


@dataclass(kw_only=True)
class BatchResult:
    tasks: list[TaskOutcome] = field(default_factory=list)
    seconds: float = 0.0
    engines: list[dict[str, Any]] = field(default_factory=list)
    freed_bytes: int = 0

    def totals(self) -> dict[str, int]:
        counts = {"accepted": 0, "rejected": 0, "invalid": 0, "infrastructure_failed": 0}
        for task in self.tasks:
            counts[task.verdict] = counts.get(task.verdict, 0) + 1
        return counts

    @property
    def exit_code(self) -> ExitCode:
        totals = self.totals()
        if totals["rejected"] or totals["invalid"]:
            return ExitCode.REJECTED
        if totals["infrastructure_failed"]:
            return ExitCode.INFRASTRUCTURE
        return ExitCode.ACCEPTED

    def to_json(self) -> str:
        document = {
            "schemaVersion": 1,
            "totals": self.totals(),
            "exitCode": int(self.exit_code),
            "seconds": round(self.seconds, 3),
            "secondsByVerdict": self._seconds_by_verdict(),
            "retried": sum(max(0, t.attempts - 1 - t.moved) for t in self.tasks),
            "moved": sum(t.moved for t in self.tasks),
            "engines": self.engines,
            "cacheFreedBytes": self.freed_bytes,
            "tasks": [t.as_json() for t in self.tasks],
        }
        return json.dumps(document, indent=2) + "\n"

    def _seconds_by_verdict(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for task in self.tasks:
            out[task.verdict] = round(out.get(task.verdict, 0.0) + task.seconds, 3)
        return out


def junit_xml(result: BatchResult) -> bytes:
    """One testcase per task and one per gate; a red gate is a failure with its reason, an
    infrastructure error an error, a stage that did not run skipped."""
    suites = ET.Element("testsuites", name="selfbench")
    tasks = ET.SubElement(suites, "testsuite", name="selfbench.tasks")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    gate_suites: list[tuple[ET.Element, dict[str, int]]] = []
    for task in result.tasks:
        name = task.task_id or task.target
        case = ET.SubElement(
            tasks, "testcase", classname="selfbench.tasks", name=name, time=f"{task.seconds:.3f}"
        )
        counts["tests"] += 1
        if task.verdict in ("rejected", "invalid"):
            ET.SubElement(case, "failure", message=task.reason[:2000], type=task.verdict)
            counts["failures"] += 1
        elif task.verdict == "infrastructure_failed":
            ET.SubElement(case, "error", message=task.reason[:2000], type=task.verdict)
            counts["errors"] += 1
        if task.run_dir:
            ET.SubElement(case, "system-out").text = f"run directory: {task.run_dir}"
        stages = (task.report or {}).get("stages") or {}
        suite = ET.Element("testsuite", name=f"selfbench.{name}")
        suite_counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for gate in GATES:
            stage = stages.get(gate) or {}
            if not stage:
                continue
            gate_case = ET.SubElement(
                suite,
                "testcase",
                classname=f"selfbench.{name}",
                name=gate,
                time=f"{float(stage.get('seconds') or 0):.3f}",
            )
            suite_counts["tests"] += 1
            status, detail = stage.get("status"), str(stage.get("detail") or "")
            if status == "failed":
                ET.SubElement(gate_case, "failure", message=detail[:2000], type="failed")
                suite_counts["failures"] += 1
            elif status == "error":
                ET.SubElement(gate_case, "error", message=detail[:2000], type="error")
                suite_counts["errors"] += 1
            elif status == "skipped":
                ET.SubElement(gate_case, "skipped", message=detail[:2000])
                suite_counts["skipped"] += 1
        if suite_counts["tests"]:
            gate_suites.append((suite, suite_counts))
    for key, value in counts.items():
        tasks.set(key, str(value))
    tasks.set("time", f"{sum(t.seconds for t in result.tasks):.3f}")
    for suite, suite_counts in gate_suites:
        for key, value in suite_counts.items():
            suite.set(key, str(value))
        suites.append(suite)
    total = {k: counts[k] + sum(c[k] for _, c in gate_suites) for k in counts}
    for key in ("tests", "failures", "errors"):
        suites.set(key, str(total[key]))
    suites.set("time", f"{result.seconds:.3f}")
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:300]


def markdown(result: BatchResult, *, limit: int = MAX_SUMMARY_BYTES) -> str:
    """The batch as Markdown (a GitHub step summary), cut to `limit` bytes with a note."""
    totals = result.totals()
    lines = [
        "## selfbench batch",
        "",
        " · ".join(f"**{count}** {verdict}" for verdict, count in totals.items() if count)
        + f" · {result.seconds:.1f} s",
        "",
        "| task | verdict | first red stage | time | reason |",
        "| --- | --- | --- | --- | --- |",
    ]
    ordered = sorted(result.tasks, key=lambda t: (t.verdict == "accepted", t.task_id or ""))
    rows = [
        f"| {_cell(t.task_id or t.target)} | {t.verdict} | {t.first_red() or ''} | "
        f"{t.seconds:.1f} s | {_cell(t.reason)} |"
        for t in ordered
    ]
    text = "\n".join(lines) + "\n"
    whole = text + "".join(row + "\n" for row in rows)
    if len(whole.encode()) <= limit:
        return whole
    reserve = 200  # room for the note below
    for index, row in enumerate(rows):
        if len((text + row + "\n").encode()) > limit - reserve:
            note = (
                f"\n_{len(rows) - index} more task(s) not shown: the summary is limited to "
                f"{limit} bytes; batch.json has them all._\n"
            )
            return text + note
        text += row + "\n"
    return text


def batch_html(result: BatchResult) -> str:
    """One row per task: verdict, time, first red stage, a link to its report.html."""
    rows = []
    for task in sorted(result.tasks, key=lambda t: (t.verdict == "accepted", t.task_id or "")):
        link = ""
        if task.run_dir:
            target = html.escape(f"{task.run_dir}/report.html", quote=True)
            link = f'<a href="{target}">report</a>'
        rows.append(
            f'<tr class="task" data-verdict="{html.escape(task.verdict)}">'
            f"<td>{html.escape(task.task_id or task.target)}</td>"
            f'<td class="v-{html.escape(task.verdict)}">{html.escape(task.verdict)}</td>'
            f"<td>{task.seconds:.1f} s</td><td>{html.escape(task.first_red() or '')}</td>"
            f"<td>{html.escape(task.reason[:300])}</td><td>{link}</td></tr>"
        )
    totals = " · ".join(f"{count} {verdict}" for verdict, count in result.totals().items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>selfbench batch</title><style>"
        "body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em}"
        "td,th{padding:.25em .7em;border-bottom:1px solid #eee;text-align:left;"
        "vertical-align:top}.v-accepted{color:#1e8449;font-weight:600}"
        ".v-rejected,.v-invalid{color:#c0392b;font-weight:600}"
        ".v-infrastructure_failed{color:#6c3483;font-weight:600}</style></head><body>"
        f'<h1>selfbench batch</h1><p id="totals">{html.escape(totals)} · '
        f"{result.seconds:.1f} s</p><table><tr><th>task</th><th>verdict</th><th>time</th>"
        "<th>first red stage</th><th>reason</th><th></th></tr>"
        + "".join(rows)
        + "</table></body></html>\n"
    )
