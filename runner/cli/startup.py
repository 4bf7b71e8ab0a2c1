"""Python's cyclic garbage collector, paused while the command starts (see runner.cli.launch) and
resumed as soon as a command has what it needs."""

from __future__ import annotations

import gc


class _Collector:
    paused = False  # by pause_collector, not yet resumed


def pause_collector() -> None:
    if gc.isenabled():
        gc.disable()
        _Collector.paused = True


def startup_finished() -> None:
    """Resume the collector this module paused (idempotent; a no-op when it paused nothing,
    e.g. when the CLI runs inside a test or another program)."""
    if _Collector.paused:
        _Collector.paused = False
        gc.freeze()  # the start-up's objects live as long as the process: never walk them again
        gc.enable()
