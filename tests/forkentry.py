"""A stand-in for the CLI that the fork server's tests run in each child (`--entry
tests.forkentry:main`): small commands whose effects a test can see."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "env":
        print(os.environ.get(args[0], "<unset>"))
    elif command == "cwd":
        print(os.getcwd())
    elif command == "argv":
        print(" ".join(sys.argv[1:]))
    elif command == "stderr":
        print("first line", file=sys.stderr)
        print(args[0], file=sys.stderr)
    elif command == "exit":
        return int(args[0])
    elif command == "crash":
        raise RuntimeError("a bug in the child")
    elif command == "sleep":
        # As verify does: SIGTERM is its cancel button, answered by cleaning up and 130.
        marker = Path(args[1]) if len(args) > 1 else None

        def stop(signum: int, frame: object) -> None:
            if marker is not None:
                # Whole or not at all: a test waits for the file and reads it at once (CI read
                # it empty between its creation and its write).
                partial = marker.with_name(f".{marker.name}.tmp")
                partial.write_text(f"terminated {signal.Signals(signum).name}")
                os.replace(partial, marker)
            os._exit(130)

        signal.signal(signal.SIGTERM, stop)
        print("sleeping", flush=True)
        time.sleep(float(args[0]))
    return 0
