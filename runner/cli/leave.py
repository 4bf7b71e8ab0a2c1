"""How the command's process ends: an interrupted run does not wait on its worker threads, and
a command that used Temporal's client does not finalize the interpreter.

By the time an interrupted command returns its exit code, the run has removed its containers and
written its report. A gate's worker thread can still be blocked in an engine call then (an exec
whose stream the engine has not closed yet), and the interpreter's exit joins every pool thread
(concurrent.futures joins its workers at exit): seen in CI, a verify that printed its
interrupted report and did not exit 120 s after SIGTERM. Such threads get a few seconds, then
the process ends without them.

Temporal's Python SDK runs its client on Rust threads that can call into Python while the
interpreter finalizes (temporalio/sdk-python#300, open): seen in CI, a `worker` that could not
reach its frontend printed its error and then died of SIGABRT ("Fatal Python error:
PyGILState_Release ... Python runtime state: finalizing") instead of exiting 3. Once that
bridge is loaded, the command has done all its work (its service stopped, its store closed,
its files written) when it returns, so the process ends without finalizing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import NoReturn

from runner.base.errors import ExitCode

# How long an interrupted command waits for its worker threads before it ends without them.
EXIT_GRACE_SECONDS = 5.0
# The native module of Temporal's SDK (its Rust client and worker).
TEMPORAL_BRIDGE = "temporalio.bridge.temporal_sdk_bridge"


def _workers() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def leave(code: int) -> NoReturn:
    """Exit with `code`; after an interrupt, without waiting more than EXIT_GRACE_SECONDS for
    worker threads that are still running; after Temporal's client was loaded, without
    finalizing the interpreter."""
    if code == int(ExitCode.INTERRUPTED):
        deadline = time.monotonic() + EXIT_GRACE_SECONDS
        for thread in _workers():
            thread.join(max(0.0, deadline - time.monotonic()))
        if _workers():
            _end_now(code)
    if TEMPORAL_BRIDGE in sys.modules:
        _end_now(code)
    sys.exit(code)


def _end_now(code: int) -> NoReturn:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
