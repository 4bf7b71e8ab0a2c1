"""What report.html opens on for a red run: the stage that went red, its failing tests, the part
of their output that says why, and links to its logs. Read from the run directory, whose files
a verifier wrote: each is read within a bound, and evidence that does not validate is left out.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from runner.base.errors import RunnerError
from runner.base.treeread import read_below
from runner.model.evidence import RunEvidence
from runner.model.layout import RunLayout
from runner.model.report import Report, Status, Verdict
from runner.model.stages import Stage
from runner.present.html import Failure

# The runs whose failure makes each gate red, in the order they are looked at (nop wants its
# fail-to-pass run to fail: only its pass-to-pass run can be its failure).
RED_RUNS = {
    Stage.NOP.value: ("pass_to_pass",),
    Stage.ORACLE.value: ("fail_to_pass", "pass_to_pass"),
    Stage.DETERMINISM.value: ("fail_to_pass_repeat", "fail_to_pass"),
}
MAX_TESTS = 20
BEFORE, AFTER = 1, 29  # lines of the failing run's output shown around where it says why
MAX_READ = 8 * 1024 * 1024
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A line that says why, where no failing test's name is found: an assertion, an error, a panic.
_WHY = re.compile(r"assert|expect|error|fail|panic|exception|traceback|not ok", re.IGNORECASE)
# A runner's heading of one test's failure: pytest's ____ name ____, jest's \u25cf name.
_HEADER = re.compile(r"_{3,}|={3,}|\u25cf")
# How runners join an id's parts: pytest's ::, vitest's >, jest's \u203a, paths and packages.
_ID_PARTS = re.compile(r"::| > | \u203a |/|\.")


def _read(run_dir: Path, relative: str) -> bytes | None:
    """A file below the run directory, through the one reader of files others wrote there."""
    try:
        return read_below(run_dir, relative, limit=MAX_READ)
    except (RunnerError, OSError):
        return None


def _evidence(run_dir: Path, logs: str, run: str) -> RunEvidence | None:
    data = _read(run_dir, f"{logs}/evidence/{run}.json")
    if data is None:
        return None
    try:
        return RunEvidence.model_validate_json(data)
    except ValidationError:
        return None


def excerpt(lines: list[str], tests: list[str]) -> list[str]:
    """The lines around where the output first names a failing test (its whole id, else its
    last part as a word), else its first assertion- or error-like line; [] when neither."""
    plain = [_ANSI.sub("", line).rstrip() for line in lines]
    start = None
    for test in tests:
        start = next((i for i, line in enumerate(plain) if line.endswith(test)), None)
        if start is None:
            name = _ID_PARTS.split(test)[-1].strip()
            word = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])") if name else None
            if word is not None:
                start = next(
                    (
                        i
                        for i, line in enumerate(plain)
                        if word.search(line) and (_WHY.search(line) or _HEADER.search(line))
                    ),
                    None,
                )
        if start is not None:
            break
    if start is None:
        start = next(
            (
                i
                for i, line in enumerate(plain)
                if _WHY.search(line) and not line.startswith("selfbench:")
            ),
            None,
        )
    if start is None:
        return []
    return lines[max(0, start - BEFORE) : start + AFTER]


def failure_view(report: Report, run_dir: Path | None) -> Failure | None:
    """The first red stage of a run that was not accepted, as report.html's first section."""
    if report.verdict is Verdict.ACCEPTED:
        return None
    red = next(
        (
            (name, stage)
            for name, stage in report.stages.items()
            if stage.status in (Status.FAILED, Status.ERROR)
        ),
        None,
    )
    if red is None:
        return None
    name, stage = red
    links = [
        Path(raw).relative_to(run_dir).as_posix()
        for raw in stage.logs
        if run_dir is not None and Path(raw).is_relative_to(run_dir) and Path(raw).is_file()
    ]
    failure = Failure(stage=name, detail=stage.detail, links=links)
    if run_dir is None or name not in RED_RUNS:
        return failure
    logs = RunLayout(run_dir).verifier_logs(name).relative_to(run_dir).as_posix()
    for run in RED_RUNS[name]:
        evidence = _evidence(run_dir, logs, run)
        if evidence is not None and evidence.passed:
            continue
        log_link = f"{logs}/{run}.log"
        data = _read(run_dir, log_link)
        if evidence is None and data is None:
            continue
        tests = [] if evidence is None else evidence.ids("failed", "error")[:MAX_TESTS]
        lines = (data or b"").decode("utf-8", "replace").splitlines()
        if log_link not in links and data is not None:
            links.insert(0, log_link)
        return Failure(
            stage=name,
            detail=stage.detail,
            run=run,
            tests=tests,
            excerpt=excerpt(lines, tests),
            excerpt_path=log_link if data is not None else None,
            links=links,
        )
    return failure
