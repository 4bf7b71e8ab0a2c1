"""The command's entry point (`selfbench-runner`, `python -m runner`): start-up with Python's
cyclic garbage collector paused.

Importing the CLI, the executor, pydantic's models and docker-py makes hundreds of thousands of
objects and no garbage, yet each few hundred allocations start a collection that walks them all
again. Measured on the 2-core machine (15 interleaved runs of the imports a verify needs):
median 693 ms with the collector, 601 ms without. The collector comes back, with the start-up's
objects frozen out of its way, as soon as a command has what it needs (`startup_finished`):
every command before it does any work, `verify` after its heavy imports.
"""

from __future__ import annotations

import gc
import sys


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


def main() -> None:
    pause_collector()
    try:
        from runner.cli import run_cli
    except BaseException:
        startup_finished()
        raise
    sys.exit(run_cli())
