"""Child processes that die with their parent: the sidecar's and the batch's verifications.

The kernel sends SIGTERM to such a child when the thread that started it dies, even by
SIGKILL, so a verification never runs on unsupervised (and its own handler removes its
containers).
"""

from __future__ import annotations

import ctypes
import shutil
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1

SETPRIV = shutil.which("setpriv")


def _libc_prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = None if SETPRIV else _libc_prctl()  # resolved before any fork


def _die_with_parent() -> None:
    """Between fork and exec, where util-linux's setpriv is missing: SIGTERM the child when
    the thread that forked it dies. Only a resolved C function is called here, so the usual
    hazard of preexec_fn in a threaded parent (a lock held at fork) does not apply."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def with_parent_death_signal(command: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """The command (and preexec function) that makes the kernel send SIGTERM to the child
    when the sidecar dies, even by SIGKILL: a verification never runs on unsupervised."""
    if SETPRIV:
        return [SETPRIV, "--pdeathsig", "TERM", "--", *command], None
    return command, _die_with_parent
