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

from runner.cli.leave import leave
from runner.cli.startup import pause_collector, startup_finished


def main() -> None:
    pause_collector()
    try:
        from runner.cli.main import run_cli
    except BaseException:
        startup_finished()
        raise
    leave(run_cli())
