"""Child processes that die with their parent: the sidecar's and the batch's verifications.

The kernel sends SIGTERM to such a child when the thread that started it dies, even by
SIGKILL, so a verification never runs on unsupervised (and its own handler removes its
containers).
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PROCESS_NAME_BYTES = 15  # /proc/PID/comm holds 16 bytes with the terminating NUL

SETPRIV = shutil.which("setpriv")


def _libc_prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # resolved before any fork


def die_with_parent() -> None:
    """In a child (between fork and exec, or a fork that runs on): SIGTERM it when the thread
    that forked it dies. Only a resolved C function is called here, so the usual hazard of
    preexec_fn in a threaded parent (a lock held at fork) does not apply."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def with_parent_death_signal(command: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """The command (and preexec function) that makes the kernel send SIGTERM to the child
    when the sidecar dies, even by SIGKILL: a verification never runs on unsupervised."""
    if SETPRIV:
        return [SETPRIV, "--pdeathsig", "TERM", "--", *command], None
    return command, die_with_parent


def process_name(run_id: str) -> str:
    """The kernel name a forked verification of `run_id` carries (15 bytes)."""
    return "sb-" + hashlib.sha256(run_id.encode()).hexdigest()[: PROCESS_NAME_BYTES - 3]


def set_process_name(name: str) -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_NAME, ctypes.c_char_p(name.encode()[:PROCESS_NAME_BYTES]), 0, 0, 0)


def process_is(pid: int, run_id: str) -> bool:
    """Is `pid` still the verification of `run_id` (pids are reused)? An exec'd child names the
    run id on its command line, a forked one in its kernel name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if run_id.encode() in handle.read().split(b"\0"):
                return True
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read().strip() == process_name(run_id).encode()
    except OSError:
        return False


def process_start(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/PID/stat's 22nd field): with the pid,
    a name for one process that a reused pid does not match. None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (2nd field) is in parentheses and may hold spaces: count after it.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None
