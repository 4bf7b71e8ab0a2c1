"""Progress inside the gates while they run: each running stage's current log is read as it grows,
and what it shows (the selection under test and its tests so far, the exploit the hack gate's
driver is on) is said as a progress line whenever it changes (runner.runners.progress).

A new phase (another log, another selection, another exploit) is said at once; a change of the
counts alone at most every QUIET_SECONDS per stage, so that a suite of thousands of tests gives
a line every few seconds, not one per test. A phase that shows nothing new is said again every
STILL_SECONDS with how long it has run and how long its log has been quiet: a piped verify was
silent for 101 s, and a board that does not change looks stuck.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from runner.model.stages import Stage
from runner.run.state import RunState
from runner.runners.progress import Tally

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
QUIET_SECONDS = 2.0
STILL_SECONDS = 15.0
MAX_DEPTH = 2  # <stage>/<exploit or run>/<its logs>
READ_BYTES = 1 << 20  # per stage and poll: a log that grows faster is caught up over polls
# What a stage is doing, from the name of the log it writes, until that log says more.
PHASES = {
    "agent": "the agent side",
    "collect": "collecting the agent's patch",
    "verifier": "the verifier: applying the patches",
    "policy-check": "the patch policy check of the exploits' patches",
    Stage.SMOKE.value: "smoke checks",
    # The exploits' own logs arrive once the agent side ends: the policy check comes next.
    "exploit": "the patch policy check of the exploits' patches",
}
WATCHED = (Stage.SMOKE, Stage.NOP, Stage.ORACLE, Stage.DETERMINISM, Stage.HACK)


@dataclass
class _Followed:
    path: Path
    offset: int = 0
    tally: Tally = field(default_factory=Tally)
    said: str = ""
    phase: str = ""
    said_at: float = 0.0
    since: float = 0.0  # when its phase began
    grew_at: float = 0.0  # when its log last grew


class ProgressWatcher:
    """A thread that follows the running stages' logs from start() to stop()."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self._stop = threading.Event()
        self._followed: dict[Stage, _Followed] = {}
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop following (a watcher never started stops at once)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.poll()
            except Exception:  # the display must never stop a run
                log.exception("following the stages' logs")

    def poll(self, now: float | None = None) -> None:
        """Read what each running stage's log added since the last poll; say what changed."""
        now = time.monotonic() if now is None else now
        with self.state.lock:
            running = [name for name in WATCHED if name in self.state.running]
        for name in running:
            path = _current_log(self.state.layout.stage(name))
            if path is None:
                continue
            followed = self._followed.get(name)
            if followed is None or followed.path != path:
                followed = self._followed[name] = _Followed(path=path, since=now, grew_at=now)
            if self._read(followed):
                followed.grew_at = now
            phase, words = _words(followed)
            quiet = now - followed.said_at < QUIET_SECONDS
            if words != followed.said and (phase != followed.phase or not quiet):
                if phase != followed.phase:
                    followed.since = now
                followed.said, followed.phase, followed.said_at = words, phase, now
                self.state.progress(name, words)
            elif followed.said and now - followed.said_at >= STILL_SECONDS:
                followed.said_at = now
                self.state.progress(name, _still(followed, now))

    @staticmethod
    def _read(followed: _Followed) -> bool:
        """Whether the log grew."""
        try:
            with followed.path.open("rb") as handle:
                handle.seek(followed.offset)
                data = handle.read(READ_BYTES)
        except OSError:
            return False
        followed.offset += len(data)
        followed.tally.feed(data.decode("utf-8", errors="replace"))
        return bool(data)


def _still(followed: _Followed, now: float) -> str:
    """The phase said again: it goes on, for how long, and whether its log still grows."""
    quiet = now - followed.grew_at
    silence = f", no new output for {quiet:.0f} s" if quiet >= STILL_SECONDS else ""
    return f"{followed.said} (still at it: {now - followed.since:.0f} s{silence})"


def _current_log(directory: Path) -> Path | None:
    """The log the stage writes now: the newest under its directory (its verifier's, or a run
    made for it: a predicted run, an exploit's verifier), None before it wrote any."""
    newest: tuple[float, str] | None = None
    pending = [(directory, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    # Not the verifiers' logs copied out at their end, nor a staging directory.
                    if depth < MAX_DEPTH and entry.name != "logs" and entry.name[:1] != ".":
                        pending.append((Path(entry.path), depth + 1))
                elif entry.name.endswith(".log") and entry.is_file(follow_symlinks=False):
                    stamp = (entry.stat(follow_symlinks=False).st_mtime, entry.path)
                    newest = stamp if newest is None or stamp > newest else newest
            except OSError:
                continue
    return Path(newest[1]) if newest is not None else None


def _words(followed: _Followed) -> tuple[str, str]:
    """(phase, line): what the log shows, and the part of it whose change is said at once."""
    tally = followed.tally
    said = tally.describe()
    phase = f"{followed.path}|{tally.selection}|{tally.exploit}"
    if said:
        return phase, said
    return phase, PHASES.get(followed.path.stem, followed.path.stem)
