"""How the CLI shows progress and results: rich colour on a terminal, plain timestamped lines
in logs and CI, GitHub Actions groups, one annotation and a step summary when running there.
Part of the CLI layer: the only other module that prints."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.base.errors import Problem
from runner.model.stages import STAGE_NAMES

if TYPE_CHECKING:  # the report's models and rich load only when a run has something to show
    from runner.model.evidence import EvidenceSummary
    from runner.model.report import Report
    from runner.run.grading import GradeReport

STATUS_STYLE = {"passed": "green", "failed": "red", "error": "yellow", "skipped": "dim"}
VERDICT_STYLE = {
    "accepted": "bold green",
    "rejected": "bold red",
    "infrastructure_failed": "bold yellow",
    "invalid": "bold red",
}
SUMMARY_LIMIT = 1_000_000  # GitHub caps a step summary at 1 MiB


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def print_problems(
    problems: Iterable[Problem], *, prefix: str = "selfbench-runner: error: "
) -> None:
    """Every input problem on its own line, on stderr."""
    for problem in problems:
        print(f"{prefix}{problem.one_line()}", file=sys.stderr)


@dataclass
class _Row:
    message: str
    started: float
    ended: float | None = None
    status: str = "running"


_STAGE_ORDER = {name: index for index, name in enumerate(STAGE_NAMES)}


class _Board:
    """The live view of a run on a terminal: one row per stage (its status, its elapsed time,
    what it is doing now), redrawn twice a second, so a stage whose tests take minutes still
    shows its clock and its counts."""

    def __init__(self) -> None:
        self.rows: dict[str, _Row] = {}

    def said(self, stage: str, message: str) -> None:
        row = self.rows.get(stage)
        if row is None:
            self.rows[stage] = _Row(message=message, started=time.monotonic())
        elif row.ended is None:
            row.message = message

    def event(self, stage: str, status: str, detail: str) -> None:
        row = self.rows.setdefault(stage, _Row(message="", started=time.monotonic()))
        if status == "running":
            row.ended, row.status = None, "running"
        else:
            row.ended, row.status, row.message = time.monotonic(), status, detail

    def __rich__(self) -> Any:
        from rich.markup import escape
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        now = time.monotonic()
        # In the pipeline's order, as the final table: gates start beside each other, and a
        # row that moved when another started was hard to follow.
        rows = sorted(self.rows.items(), key=lambda item: _STAGE_ORDER.get(item[0], 99))
        for name, row in rows:
            style = STATUS_STYLE.get(row.status, "cyan")
            elapsed = (row.ended or now) - row.started
            table.add_row(
                f"[bold]{name:<11}[/]",
                f"[{style}]{row.status:<8}[/]",
                f"{elapsed:6.0f} s",
                escape(row.message[:200]),
            )
        return table


class Output:
    """Progress on stderr, and the summary (on stdout when it is the command's result). Called
    from several threads while gates run concurrently, so each line is written whole. `live`: on
    a terminal, a board redrawn in place (_Board) instead of a line per change."""

    def __init__(self, *, quiet: bool = False, live: bool = False) -> None:
        self.quiet = quiet
        self.github = in_github_actions()
        self.terminal = sys.stderr.isatty()
        self._group: str | None = None
        self._lock = threading.Lock()
        self._board = _Board() if live and self.terminal and not quiet else None
        self._live: Any = None

    @cached_property
    def console(self) -> Any:
        from rich.console import Console

        return Console(stderr=True, highlight=False, soft_wrap=True)

    @property
    def file(self) -> Any:
        return sys.stderr

    def progress(self, stage: str, message: str) -> None:
        if self.quiet:
            return
        with self._lock:
            if self._board is not None:
                self._board.said(stage, message)
                self._start_live()
                return
            if self.github and stage != self._group:
                self._end_group()
                print(f"::group::selfbench {stage}", file=self.file, flush=True)
                self._group = stage
            stamp = time.strftime("%H:%M:%S")
            if self.terminal:
                from rich.markup import escape

                self.console.print(f"[dim]{stamp}[/] [bold]{stage}[/]: {escape(message)}")
            else:
                print(f"[{stamp}] {stage}: {message}", file=self.file, flush=True)

    def stage_event(self, stage: str, status: str, detail: str) -> None:
        """A stage started (`running`) or ended: the board's row follows it."""
        if self._board is None:
            return
        with self._lock:
            self._board.event(stage, status, detail)
            self._start_live()

    def _start_live(self) -> None:
        if self._live is None and self._board is not None:
            from rich.live import Live

            # Transient: the summary that follows says how each stage ended.
            self._live = Live(
                self._board, console=self.console, refresh_per_second=2, transient=True
            )
            self._live.start()

    def close(self) -> None:
        """Stop the live board (the terminal is as it was); idempotent."""
        with self._lock:
            live, self._live, self._board = self._live, None, None
        if live is not None:
            live.stop()

    def _end_group(self) -> None:
        if self._group is not None:
            print("::endgroup::", file=self.file, flush=True)
            self._group = None

    def summary(self, report: Report, *, result: bool = False) -> None:
        """The run's summary: on stdout when it is the command's result (no --json there), else
        on stderr with the progress."""
        self.close()
        with self._lock:
            self._end_group()
        out = sys.stdout if result else self.file
        if out.isatty():
            self._rich_summary(report, out)
        else:
            for line in summary_lines(report):
                print(line, file=out)
        if self.github:
            self._github(report)

    def grade_summary(self, report: GradeReport, *, result: bool = False) -> None:
        with self._lock:
            self._end_group()
        for line in grade_lines(report):
            print(line, file=sys.stdout if result else self.file)

    def _rich_summary(self, report: Report, out: Any) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        console = self.console if out is self.file else Console(file=out, highlight=False)

        table = Table(
            title=f"{report.task_id or '?'}: {report.verdict.value}",
            title_style=VERDICT_STYLE[report.verdict.value],
            show_edge=False,
            pad_edge=False,
        )
        for column in ("stage", "status", "seconds", "detail"):
            table.add_column(column, justify="right" if column == "seconds" else "left")
        for name, stage in report.stages.items():
            table.add_row(
                name,
                f"[{STATUS_STYLE[stage.status.value]}]{stage.status.value}[/]",
                f"{stage.seconds:.1f}",
                escape(stage.detail),
            )
        console.print(table)
        for error in report.errors:
            console.print(f"[red]error[/]: {escape(_problem_line(error))}")
        if report.run_dir:
            console.print(f"logs and report: {report.run_dir}")

    def _github(self, report: Report) -> None:
        if report.verdict.value != "accepted":
            message = report.reason.replace("%", "%25").replace("\n", "%0A")
            print(
                f"::error title=selfbench {report.task_id} {report.verdict.value}::{message}",
                file=self.file,
            )
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if path:
            text = step_summary(report)
            with Path(path).open("a", encoding="utf-8") as handle:
                handle.write(text[:SUMMARY_LIMIT])

    def line(self, text: str) -> None:
        print(text, file=self.file)


def _problem_line(error: object) -> str:
    file, field, message = (getattr(error, k) for k in ("file", "field", "message"))
    return Problem(file=file, field=field, message=message).one_line()


def summary_lines(report: Report) -> list[str]:
    head = f"{report.task_id or '?'}: {report.verdict.value}"
    lines = [head + (f" ({report.reason})" if report.reason else "")]
    for name, stage in report.stages.items():
        lines.append(f"  {name:<12} {stage.status.value:<8} {stage.seconds:>8.1f}s  {stage.detail}")
    for error in report.errors:
        lines.append(f"  error: {_problem_line(error)}")
    if report.run_dir:
        lines.append(f"  logs and report: {report.run_dir}")
    return lines


def evidence_lines(evidence: EvidenceSummary | None, indent: str = "  ") -> list[str]:
    """The per-test evidence of a verifier run, a line per selector."""
    if evidence is None:
        return []
    if evidence.mode == "exit-code":
        return [f"{indent}evidence: exit-code evidence only (no per-test reporter for this runner)"]
    lines = [
        f"{indent}evidence: per test, from {', '.join(evidence.runners) or 'the runner'}"
        + (" (graded by the sealed census)" if evidence.sealed else "")
    ]
    for selector in evidence.selectors:
        kind = "fail-to-pass" if selector.kind == "failToPass" else "pass-to-pass"
        if selector.attributed:
            counts = (
                f"ran {selector.ran}, passed {selector.passed}, failed "
                f"{(selector.failed or 0) + (selector.error or 0)}, skipped {selector.skipped}"
            )
        else:
            counts = "judged with its selection (its tests are not told apart)"
        lines.append(f"{indent}  {kind} {selector.selector}: {counts}")
    for run in evidence.runs:
        if run.canaries is not None:
            lines.append(
                f"{indent}  {run.name}: canaries ran {run.canaries.ran}, failed "
                f"{run.canaries.failed}, passed {run.canaries.passed}"
            )
        for problem in run.problems[:3]:
            lines.append(f"{indent}  {run.name}: {problem}")
    return lines


def grade_lines(report: GradeReport) -> list[str]:
    lines = [f"{report.task_id or '?'}: {report.verdict} ({report.detail})"]
    if report.census == "unsealed":
        lines.append("  census: none sealed in this bundle (graded by the evidence rules alone)")
    lines += evidence_lines(report.evidence)
    for change in report.undone[:20]:
        lines.append(f"  undone: {change.path} ({change.reason})")
    if len(report.undone) > 20:
        lines.append(f"  undone: ... {len(report.undone) - 20} more")
    if report.run_dir:
        lines.append(f"  logs: {report.run_dir}")
    return lines


def step_summary(report: Report) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    rows = [
        f"### selfbench `{report.task_id}`: **{report.verdict.value}**",
        "",
        "| stage | status | seconds | detail |",
        "| --- | --- | ---: | --- |",
    ]
    for name, stage in report.stages.items():
        rows.append(
            f"| {name} | {stage.status.value} | {stage.seconds:.1f} | {cell(stage.detail)} |"
        )
    if report.run_dir:
        rows += ["", f"Logs: `{report.run_dir}`"]
    return "\n".join(rows) + "\n\n"
