"""The build-step cache's keys and its index: a task step's committed image is found by the hash
of what it ran on, and this cache remembers which image that was (one file per key), so a
lookup is one inspect, not a label filter over every image of the engine."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from datetime import datetime
from pathlib import Path

from runner.base.safeio import write_atomic
from runner.model.settings import cache_root
from runner.plan.dockerfile import STEP_RECIPE

STEP_INDEX = "build-steps"  # under the cache: a step key's committed image id, one file each


def step_key(
    parent: str, argv: tuple[str, ...], env: dict[str, str], user: str, workdir: str
) -> str:
    text = json.dumps(
        [STEP_RECIPE, parent, list(argv), sorted(env.items()), user, workdir], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _step_file(key: str) -> Path:
    return cache_root() / STEP_INDEX / key


def remembered_step(key: str) -> str | None:
    """The image id this cache last committed or found for a step key (None: not known)."""
    try:
        text = _step_file(key).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.startswith("sha256:") and len(text) == 71 else None


def remember_step(key: str, image_id: str) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs a lookup
        write_atomic(_step_file(key), image_id + "\n")


_CREATED = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def made_since(created: str, since: float) -> bool:
    """Whether an image the engine says was created at `created` (RFC 3339, to the nanosecond)
    was made at or after `since` (seconds since the epoch). Unreadable: False (not known to
    be new). An engine whose clock runs ahead of this host's can only make an old image look
    new, which costs a step's rerun, never a wrong cache hit."""
    match = _CREATED.fullmatch(created.strip())
    if match is None:
        return False
    zone = "+00:00" if match[3] == "Z" else match[3]
    whole = datetime.fromisoformat(match[1] + zone).timestamp()
    return whole + float(f"0.{match[2] or 0}") >= since
