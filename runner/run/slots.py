"""How many verifiers run their tests at once, and who goes first."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class VerifierSlots:
    """A counting semaphore that lets a verifier deciding the verdict (nop's, the oracle's) in
    before a background one (the probe's, an exploit's) waiting beside it: a background run
    started early to fill an idle core must never delay the run the verdict waits for."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"at least one slot, not {count}")
        self._free = count
        self._foreground_waiting = 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def slot(self, *, background: bool = False) -> Iterator[None]:
        with self._changed:
            if not background:
                self._foreground_waiting += 1
            try:
                while self._free == 0 or (background and self._foreground_waiting):
                    self._changed.wait()
            finally:
                if not background:
                    self._foreground_waiting -= 1
                    # A background run waiting only for this one may go once it has a slot.
                    self._changed.notify_all()
            self._free -= 1
        try:
            yield
        finally:
            with self._changed:
                self._free += 1
                self._changed.notify_all()
