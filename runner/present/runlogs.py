"""`logs`: a run directory's stage logs, red stages first, and `--follow` for a run in progress.

Everything is read from the run directory, so it works the same for runs started by a person,
the sidecar or a batch. Nothing here prints: the CLI does.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runner.model.layout import BundleLayout, RunLayout
from runner.model.report import Report
from runner.model.stages import STAGE_NAMES, Stage
from runner.present.html import BuildSource, Excerpt, ReportView, dockerfile_line, step_source

STAGE_DIRS = (Stage.BUILD, Stage.SMOKE, Stage.NOP, Stage.ORACLE)
FOLLOWED_STAGES = (*STAGE_DIRS, Stage.DETERMINISM, Stage.HACK)
ORDER = STAGE_NAMES
RED = ("failed", "error")
SHOWN = (".log", ".json")
MAX_FOLLOW_FILES = 1000


@dataclass(frozen=True, kw_only=True)
class StageLogs:
    stage: str
    status: str
    detail: str
    files: list[Path] = field(default_factory=list)


def _report(run_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads(RunLayout(run_dir).report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _files_under(directory: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SHOWN):
                found.append(Path(root) / name)
    return found


def stage_logs(run_dir: Path, *, stage: str | None = None) -> list[StageLogs]:
    """Each stage's log files (the report's list, or what is on disk for a run without a
    report yet), red stages first, then the pipeline's order."""
    report = _report(run_dir)
    stages: list[StageLogs] = []
    recorded = report.get("stages") if report is not None else None
    if isinstance(recorded, dict):
        layout, root = RunLayout(run_dir), (report or {}).get("runDir")
        for name, data in recorded.items():
            if not isinstance(data, dict):
                continue
            files = [
                layout.here(str(p), root) for p in data.get("logs") or [] if str(p).endswith(SHOWN)
            ]
            stages.append(
                StageLogs(
                    stage=str(name),
                    status=str(data.get("status", "")),
                    detail=str(data.get("detail", "")),
                    files=files,
                )
            )
    else:
        for name in STAGE_DIRS:
            directory = run_dir / name
            if directory.is_dir():
                stages.append(
                    StageLogs(
                        stage=name, status="running", detail="", files=_files_under(directory)
                    )
                )
    runner_log = RunLayout(run_dir).runner_log
    if runner_log.is_file():
        stages.append(StageLogs(stage="runner", status="", detail="", files=[runner_log]))
    if stage is not None:
        stages = [s for s in stages if s.stage == stage]
    rank = {name: index for index, name in enumerate(ORDER)}
    return sorted(stages, key=lambda s: (s.status not in RED, rank.get(s.stage, len(ORDER))))


def tail_lines(path: Path, lines: int) -> tuple[list[str], int]:
    """The last `lines` lines of a file (all when 0) and how many were left out."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return [f"[cannot read {path}: {exc.strerror or exc}]"], 0
    all_lines = text.splitlines()
    if lines <= 0 or len(all_lines) <= lines:
        return all_lines, 0
    return all_lines[-lines:], len(all_lines) - lines


def follow(
    run_dir: Path,
    emit: Callable[[str, str], None],
    *,
    lines: int = 0,
    stage: str | None = None,
    poll_seconds: float = 0.2,
    timeout: float | None = None,
) -> bool:
    """Tail the stages' logs of a run in progress (new files too; `stage`: one stage's only)
    until its report.json appears; `emit(relative_path, line)` per new line. A log already
    there starts with its last `lines` lines (0: all of it), as `tail -n N -f` does. The
    runner's own log (runner.log, its debug lines) is not followed: `logs` shows what the
    stages ran. Returns True when the run ended."""
    offsets: dict[Path, int] = {}
    partial: dict[Path, bytes] = {}
    deadline = None if timeout is None else time.monotonic() + timeout
    if lines > 0:
        for path in _followed(run_dir, stage):
            backlog: list[str] = []
            read = -1
            while offsets.get(path, 0) != read:  # to its end; an unfinished line comes whole
                read = offsets.get(path, 0)
                backlog = [*backlog, *_new_lines(path, offsets, partial)][-lines:]
            for line in backlog:
                emit(path.relative_to(run_dir).as_posix(), line)
    while True:
        done = RunLayout(run_dir).report.is_file()
        for path in _followed(run_dir, stage):
            for line in _new_lines(path, offsets, partial):
                emit(path.relative_to(run_dir).as_posix(), line)
        if done:
            for path, unfinished in partial.items():
                if unfinished:
                    emit(path.relative_to(run_dir).as_posix(), unfinished.decode(errors="replace"))
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(poll_seconds)


def _followed(run_dir: Path, stage: str | None) -> Iterator[Path]:
    count = 0
    for name in FOLLOWED_STAGES:
        if stage is not None and name != stage:
            continue
        target = run_dir / name
        for path in _files_under(target) if target.is_dir() else []:
            if path.suffix == ".log":
                count += 1
                if count > MAX_FOLLOW_FILES:
                    return
                yield path


def _new_lines(path: Path, offsets: dict[Path, int], partial: dict[Path, bytes]) -> list[str]:
    try:
        size = path.stat().st_size
        start = offsets.get(path, 0)
        if size < start:  # capped or rewritten: start over
            start, partial[path] = 0, b""
        if size == start:
            return []
        with path.open("rb") as handle:
            handle.seek(start)
            data = handle.read(min(size - start, 4 * 1024 * 1024))
    except OSError:
        return []
    offsets[path] = start + len(data)
    data = partial.get(path, b"") + data
    *complete, rest = data.split(b"\n")
    partial[path] = rest
    return [line.decode(errors="replace") for line in complete]


EXCERPT_LINES = 80


def report_view(report: Report) -> ReportView:
    """What report.html shows beyond the report: log excerpts and where a failing build step
    comes from (read from the run directory and the bundle)."""
    run_dir = Path(report.run_dir) if report.run_dir else None
    excerpts: dict[str, list[Excerpt]] = {}
    for name, stage in report.stages.items():
        for raw in stage.logs:
            path = Path(raw)
            if path.suffix != ".log":
                continue
            lines, cut = tail_lines(path, EXCERPT_LINES)
            if not any(line.strip() for line in lines):
                continue  # an empty box says nothing and pushes the rest down
            shown = str(path)
            if run_dir is not None and path.is_relative_to(run_dir):
                shown = path.relative_to(run_dir).as_posix()
            excerpts.setdefault(name, []).append(Excerpt(path=shown, lines=lines, cut=cut))
    source = None
    data = report.stages.build.data
    if data.failed_step and report.bundle:
        context = "environment" if data.failed_image == "agent" else "tests"
        dockerfile = BundleLayout(Path(report.bundle)).dockerfile(context)
        try:
            text = dockerfile.read_text(encoding="utf-8")
        except OSError:
            text = ""
        source = BuildSource(
            dockerfile=f"{context}/Dockerfile",
            line=dockerfile_line(text, data.failed_step) if text else None,
            field=step_source(data.failed_step),
        )
    smoke_script: list[str] = []
    if report.stages.smoke.status.value in RED and report.bundle:
        smoke_script, _ = tail_lines(BundleLayout(Path(report.bundle)).smoke_script, 200)
    from runner.present.failure import failure_view

    return ReportView(
        report=report,
        excerpts=excerpts,
        build_source=source,
        smoke_script=smoke_script,
        failure=failure_view(report, run_dir),
    )
