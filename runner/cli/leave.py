"""How the command's process ends: an interrupted run does not wait on its worker threads.

By the time an interrupted command returns its exit code, the run has removed its containers and
written its report. A gate's worker thread can still be blocked in an engine call then (an exec
whose stream the engine has not closed yet), and the interpreter's exit joins every pool thread
(concurrent.futures joins its workers at exit): seen in CI, a verify that printed its
interrupted report and did not exit 120 s after SIGTERM. Such threads get a few seconds, then
the process ends without them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import NoReturn

from runner.base.errors import ExitCode

# How long an interrupted command waits for its worker threads before it ends without them.
EXIT_GRACE_SECONDS = 5.0


def _workers() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def leave(code: int) -> NoReturn:
    """Exit with `code`; after an interrupt, without waiting more than EXIT_GRACE_SECONDS for
    worker threads that are still running."""
    if code == int(ExitCode.INTERRUPTED):
        deadline = time.monotonic() + EXIT_GRACE_SECONDS
        for thread in _workers():
            thread.join(max(0.0, deadline - time.monotonic()))
        if _workers():
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    sys.exit(code)
