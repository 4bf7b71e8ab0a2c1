"""A run's directory (`<logs root>/<taskId>/<runId>/` or an exact `--run-dir`, never inside the
task directory) and its log, runner.log."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from runner.base.errors import UsageError
from runner.base.logs import CappedLog
from runner.base.safeio import is_within, private_dir
from runner.base.validation import safe_dir_name
from runner.model.layout import RUN_LOG_FILE
from runner.model.settings import DEFAULT_MAX_LOG_BYTES, VerifySettings

Progress = Callable[[str, str], None]

RUN_LOG = RUN_LOG_FILE


def check_run_location(target: Path, settings: VerifySettings) -> None:
    """Refuse, before anything runs, a run directory inside the task directory."""
    where = settings.run_dir if settings.run_dir is not None else settings.logs_root
    option = "--run-dir" if settings.run_dir is not None else "--logs"
    if is_within(where, target):
        raise UsageError(
            f"the run directory would be inside the task directory {target}; pass {option} "
            "with a directory outside it",
            path=str(where),
            field=option,
        )
    if settings.run_dir is not None and settings.run_dir.exists():
        if settings.run_dir.is_symlink() or not settings.run_dir.is_dir():
            raise UsageError("exists and is not a directory", path=str(where), field=option)
        if any(settings.run_dir.iterdir()):
            raise UsageError(
                "is not empty: a run directory holds one run; use --logs DIR for a root that "
                "keeps every run apart",
                path=str(where),
                field=option,
            )


def make_run_dir(settings: VerifySettings, task_name: str, run_id: str, target: Path) -> Path:
    run_dir = settings.run_dir or settings.logs_root / safe_dir_name(task_name) / run_id
    if is_within(run_dir, target):
        raise UsageError(
            f"the run directory {run_dir} would be inside the task directory {target}; pass "
            "--logs with a directory outside it",
            path=str(run_dir),
            field="--logs",
        )
    try:
        private_dir(run_dir, exist_ok=settings.run_dir is not None)
    except OSError as exc:
        raise UsageError(
            f"cannot create the run directory: {exc.strerror or exc}",
            path=str(run_dir),
            field="--run-dir" if settings.run_dir else "--logs",
        ) from None
    return run_dir


class CappedHandler(logging.Handler):
    """A logging handler into a CappedLog: its head as written, its tail at the end (a build
    that printed 1 GB made a 3.68 GB runner.log when this was a plain file handler)."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(logging.DEBUG)
        self.sink = CappedLog(path, limit)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.sink.write((self.format(record) + "\n").encode("utf-8", "replace"))
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sink.close()
        super().close()


@contextlib.contextmanager
def run_log(run_dir: Path, *, limit: int = DEFAULT_MAX_LOG_BYTES) -> Iterator[None]:
    """Everything the runner logs during the run, tracebacks included, in runner.log, capped
    at `limit` bytes (--max-log-size)."""
    handler = CappedHandler(run_dir / RUN_LOG, limit)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s")
    )
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        handler.close()
