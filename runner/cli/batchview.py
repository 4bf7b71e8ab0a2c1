"""The live view of `batch` (local or on Temporal): one line per running task and a bar for
the batch on a terminal, plain timestamped lines otherwise."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any


class BatchView:
    """A live view on a terminal (one line per running task, a bar for the batch); plain lines
    otherwise."""

    def __init__(self, total: int, *, quiet: bool) -> None:
        self.total = total
        self.quiet = quiet
        self.terminal = sys.stderr.isatty() and not quiet
        self._lock = threading.Lock()
        self._rich: Any = None
        self._bar: Any = None
        self._lines: dict[int, Any] = {}
        if self.terminal:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._bar = self._rich.add_task("batch", total=total)
            self._rich.start()

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()

    def started(self, outcome: Any, engine: str) -> None:
        with self._lock:
            if self._rich is not None:
                key = id(outcome)
                if key in self._lines:
                    self._rich.remove_task(self._lines.pop(key))
                self._lines[key] = self._rich.add_task(
                    f"  {Path(outcome.target).name} on {engine}: starting", total=None
                )
            elif not self.quiet:
                print(f"start {outcome.target} on {engine}", file=sys.stderr, flush=True)

    def stage(self, outcome: Any, stage: str) -> None:
        with self._lock:
            if self._rich is not None:
                if id(outcome) in self._lines:
                    self._rich.update(
                        self._lines[id(outcome)],
                        description=f"  {Path(outcome.target).name} on {outcome.engine}: {stage}",
                    )
            elif not self.quiet:
                # Piped or in CI: one line per change (verify's watcher spaces them already).
                line = f"[{time.strftime('%H:%M:%S')}] {Path(outcome.target).name}: {stage}"
                print(line, file=sys.stderr, flush=True)

    def finished(self, outcome: Any, done: int, total: int) -> None:
        line = (
            f"[{done}/{total}] {outcome.task_id or outcome.target}: {outcome.verdict} "
            f"({outcome.seconds:.1f} s{', ' + outcome.engine if outcome.engine else ''})"
        )
        if outcome.verdict != "accepted" and outcome.reason:
            line += f": {outcome.reason[:300]}"
        with self._lock:
            if self._rich is not None:
                if id(outcome) in self._lines:
                    self._rich.remove_task(self._lines.pop(id(outcome)))
                self._rich.advance(self._bar)
                self._rich.console.print(line, markup=False, highlight=False)
            elif not self.quiet:
                print(line, file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        with self._lock:
            if self._rich is not None:
                self._rich.console.print(f"  {text}", markup=False, highlight=False)
            else:
                print(text, file=sys.stderr, flush=True)
