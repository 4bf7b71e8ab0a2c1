"""The fork server's process (see runner.supervise.forkserver): import what a verification
needs once, say `ready`, then fork one child per request, each running the CLI.

`python -m runner.cli.forkserver FD [--entry MODULE:FUNCTION]`: FD is the control socket the
supervisor passed; --entry replaces the CLI with another `f(argv) -> int` (the tests' probes).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from runner.cli.startup import pause_collector, startup_finished

# What `verify` imports on its way, beyond the CLI itself: in the server once, so no child
# imports it again.
PRELOAD = (
    "runner.run.pipeline",
    "runner.run.executor",
    "runner.engine.docker",
    "runner.compile.compiler",
    "runner.compile.repository",
    "runner.compile.audit",
    "runner.compile.codetokens",
    "runner.present.html",
    "docker",
    "docker.api",
    "requests",
    "jinja2",
    "unidiff",
)


def _entry(spec: str | None) -> Callable[[list[str]], int]:
    if spec is None:
        from runner.cli.main import run_cli

        return run_cli
    module, _, name = spec.partition(":")
    function: Callable[[list[str]], int] = getattr(importlib.import_module(module), name)
    return function


def main(argv: list[str]) -> int:
    import socket

    from runner.supervise.forkserver import serve

    pause_collector()  # as a one-shot command starts (runner.cli.launch)
    fd = int(argv[0])
    entry = _entry(argv[2] if argv[1:2] == ["--entry"] else None)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # a module renamed: the child imports what it needs anyway
            continue
    startup_finished()  # what was imported is frozen out of every collection's way
    control = socket.socket(fileno=fd)
    control.set_inheritable(False)
    try:
        control.sendall(b"ready")
    except OSError:
        return 0  # the supervisor went away while this server started (Ctrl-C at once)
    return serve(control, entry)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
