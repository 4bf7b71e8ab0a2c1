"""`logs`: a run directory's stage logs, red stages first, and `--follow` for a run in progress.

Everything is read from the run directory, so it works the same for runs started by a person,
the sidecar or a batch. Nothing here prints: the CLI does.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.errors import InvalidTaskError
from runner.base.treeread import open_below, read_below, read_json_below, within
from runner.model.layout import MAX_REPORT_BYTES, BundleLayout, RunLayout
from runner.model.report import Report
from runner.model.stages import STAGE_NAMES, Stage
from runner.present.html import BuildSource, Excerpt, ReportView, dockerfile_line, step_source

STAGE_DIRS = (Stage.BUILD, Stage.SMOKE, Stage.NOP, Stage.ORACLE)
FOLLOWED_STAGES = (*STAGE_DIRS, Stage.DETERMINISM, Stage.HACK)
ORDER = STAGE_NAMES
RED = ("failed", "error")
SHOWN = (".log", ".json")
MAX_FOLLOW_FILES = 1000
# The most read of a log of a run directory another user or host may have written (the runner
# caps the logs it writes far below this: --max-log-bytes).
MAX_LOG_READ = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class StageLogs:
    stage: str
    status: str
    detail: str
    files: list[Path] = field(default_factory=list)


def run_report(run_dir: Path) -> dict[str, object] | None:
    """A run directory's report.json as a JSON object, read as input (a regular file below the
    run directory, bounded); None when there is none or it is not one."""
    try:
        data = read_json_below(run_dir, RunLayout(run_dir).report.name, limit=MAX_REPORT_BYTES)
    except (OSError, InvalidTaskError):
        return None
    return data if isinstance(data, dict) else None


def _files_under(directory: Path) -> list[Path]:
    """The regular files below `directory` that `logs` shows (no link, FIFO or device: what a
    forged run directory could put there to lead a reader out or make it wait)."""
    found: list[Path] = []
    for root, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(filenames):
            with_mode = Path(root) / name
            try:
                regular = stat.S_ISREG(os.lstat(with_mode).st_mode)
            except OSError:
                regular = False
            if regular and name.endswith(SHOWN):
                found.append(Path(root) / name)
    return found


def stage_logs(run_dir: Path, *, stage: str | None = None) -> list[StageLogs]:
    """Each stage's log files (the report's list, or what is on disk for a run without a
    report yet), red stages first, then the pipeline's order."""
    report = run_report(run_dir)
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


def tail_lines(root: Path, path: Path, lines: int) -> tuple[list[str], int]:
    """The last `lines` lines (all when 0) of a file below `root` (a run directory: read as
    input, through no link, bounded) and how many were left out; one bracketed line saying why
    for a file that cannot or may not be read (outside `root`, a link, a FIFO, too large)."""
    relative = within(root, path)
    if relative is None:
        return [f"[not read: {path} is not in {root}]"], 0
    try:
        text = read_below(root, relative, limit=MAX_LOG_READ).decode(errors="replace")
    except InvalidTaskError as exc:
        return [f"[not read: {exc.one_line()}]"], 0
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
                backlog = [*backlog, *_new_lines(run_dir, path, offsets, partial)][-lines:]
            for line in backlog:
                emit(path.relative_to(run_dir).as_posix(), line)
    while True:
        done = RunLayout(run_dir).report.is_file()
        for path in _followed(run_dir, stage):
            for line in _new_lines(run_dir, path, offsets, partial):
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


def _new_lines(
    run_dir: Path, path: Path, offsets: dict[Path, int], partial: dict[Path, bytes]
) -> list[str]:
    relative = within(run_dir, path)
    if relative is None:
        return []
    try:
        fd = open_below(run_dir, relative)  # a regular file, through no link
    except (OSError, InvalidTaskError):
        return []
    try:
        size = os.fstat(fd).st_size
        start = offsets.get(path, 0)
        if size < start:  # capped or rewritten: start over
            start, partial[path] = 0, b""
        if size == start:
            return []
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, min(size - start, 4 * 1024 * 1024))
    except OSError:
        return []
    finally:
        os.close(fd)
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
            if run_dir is None:
                continue
            lines, cut = tail_lines(run_dir, path, EXCERPT_LINES)
            if not any(line.strip() for line in lines):
                continue  # an empty box says nothing and pushes the rest down
            shown = str(path)
            if run_dir is not None and path.is_relative_to(run_dir):
                shown = path.relative_to(run_dir).as_posix()
            excerpts.setdefault(name, []).append(Excerpt(path=shown, lines=lines, cut=cut))
    source = None
    data = report.stages.build.data
    bundle = _bundle_in(run_dir, report)
    if data.failed_step and bundle is not None and run_dir is not None:
        context = "environment" if data.failed_image == "agent" else "tests"
        dockerfile = within(run_dir, BundleLayout(bundle).dockerfile(context))
        try:
            text = read_below(run_dir, dockerfile or "", limit=MAX_LOG_READ).decode()
        except (OSError, InvalidTaskError, UnicodeDecodeError):
            text = ""
        source = BuildSource(
            dockerfile=f"{context}/Dockerfile",
            line=dockerfile_line(text, data.failed_step) if text else None,
            field=step_source(data.failed_step),
        )
    smoke_script: list[str] = []
    if report.stages.smoke.status.value in RED and bundle is not None and run_dir is not None:
        smoke_script, _ = tail_lines(run_dir, BundleLayout(bundle).smoke_script, 200)
    from runner.present.failure import failure_view

    return ReportView(
        report=report,
        excerpts=excerpts,
        build_source=source,
        smoke_script=smoke_script,
        failure=failure_view(report, run_dir),
    )


def _bundle_in(run_dir: Path | None, report: Report) -> Path | None:
    """The report's bundle where it is in this run directory (a run moved since names it under
    the directory it ran in); None for one elsewhere: report.html reads only the run's own."""
    if run_dir is None or not report.bundle:
        return None
    path = RunLayout(run_dir).here(report.bundle, report.run_dir)
    return path if within(run_dir, path) is not None else None
