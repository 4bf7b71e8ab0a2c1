"""The stage-event file `verify --events FILE` appends to and a supervisor (the sidecar) tails:
one JSON object per line, written whole and flushed, so a reader that stops at the last
newline never sees half an event.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from runner.base.errors import UsageError
from runner.run.state import StageEvent

MAX_LINE_BYTES = 64 * 1024  # a detail is one line of a report; longer lines are cut


@dataclass(frozen=True, kw_only=True)
class LoggedEvent:
    seq: int
    at: str
    stage: str
    status: str
    detail: str
    seconds: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "stage": self.stage,
            "status": self.status,
            "detail": self.detail,
            "seconds": self.seconds,
        }


class EventLog:
    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._lock = threading.Lock()
        self._seq = 0

    @classmethod
    @contextlib.contextmanager
    def open(cls, path: Path | None) -> Iterator[EventLog | None]:
        if path is None:
            yield None
            return
        try:
            handle = path.open("ab")
        except OSError as exc:
            raise UsageError(
                f"cannot open: {exc.strerror or exc}", path=str(path), field="--events"
            ) from None
        with handle:
            yield cls(handle)

    def write(self, event: StageEvent) -> None:
        with self._lock:
            self._seq += 1
            line = json.dumps(
                LoggedEvent(
                    seq=self._seq,
                    at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                    stage=event.stage,
                    status=event.status,
                    detail=event.detail[:4096],
                    seconds=event.seconds,
                ).as_json(),
                ensure_ascii=True,
            )
            # An event is advisory: a full disk must not turn into a failed verification.
            with contextlib.suppress(OSError):
                self._handle.write(line.encode() + b"\n")
                self._handle.flush()


def read_events(path: Path, offset: int) -> tuple[list[LoggedEvent], int]:
    """The whole events written after byte `offset`, and the offset after the last one."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(4 * 1024 * 1024)
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    events: list[LoggedEvent] = []
    for raw in data[: end + 1].splitlines():
        if len(raw) > MAX_LINE_BYTES:
            continue
        try:
            item = json.loads(raw)
            events.append(
                LoggedEvent(
                    seq=int(item["seq"]),
                    at=str(item["at"]),
                    stage=str(item["stage"]),
                    status=str(item["status"]),
                    detail=str(item.get("detail") or ""),
                    seconds=float(item["seconds"]) if item.get("seconds") is not None else None,
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return events, offset + end + 1
