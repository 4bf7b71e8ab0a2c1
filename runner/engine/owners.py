"""Which runner process owns what it created: `host:pid:start`, the stale-run reaper's key
(pids are reused; a pid with another start time is another process)."""

from __future__ import annotations

import os
import socket


def _start_time(pid: int | str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def owner_id() -> str:
    """host:pid:start of this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid()) or '0'}"


def owner_alive(owner: str) -> bool:
    """Is the owning process still running? Another machine's run is not ours to judge."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    current = _start_time(pid_text)
    return current is not None and current == start
