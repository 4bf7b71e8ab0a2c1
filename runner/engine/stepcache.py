"""The build-step cache's keys and its index: a task step's committed image is found by the hash
of what it ran on, and this cache remembers which image that was (one file per key), so a
lookup is one inspect, not a label filter over every image of the engine.

The index learns what another cache root (another user, host or a wiped cache) committed on the
same engine by reading the engine's step images into it: at the first lookup it cannot answer,
then at most once per SCAN_INTERVAL_SECONDS per engine. A listing reads every image (7.5 s at
11,612 images on Docker 20.10 here), and a pool of new tasks misses once per task; a step
committed elsewhere since the last reading is run again (one step's time), never a wrong hit:
a remembered image is inspected before use."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from runner.base.safeio import write_atomic
from runner.model.settings import cache_root
from runner.plan.dockerfile import STEP_RECIPE
from runner.plan.labels import LABEL_STEP

STEP_INDEX = "build-steps"  # under the cache: a step key's committed image id, one file each
SCAN_INTERVAL_SECONDS = 600.0
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


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
    return text if _IMAGE_ID.fullmatch(text) else None


def remember_step(key: str, image_id: str) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs a lookup
        write_atomic(_step_file(key), image_id + "\n")


def claim_scan(engine: str, *, now: float | None = None) -> bool:
    """Whether this lookup should read `engine`'s step images into the index: true for the
    first caller since SCAN_INTERVAL_SECONDS (it is claimed then, so callers at once do not
    all list the engine); false while the last reading is recent. `engine` names the engine
    (its address): another engine's reading says nothing of this one's images."""
    now = time.time() if now is None else now
    name = hashlib.sha256(engine.encode()).hexdigest()[:16]
    marker = cache_root() / STEP_INDEX / f".scanned-{name}"
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(marker.parent / ".scan.lock"):
            with contextlib.suppress(FileNotFoundError):
                if 0 <= now - marker.stat().st_mtime < SCAN_INTERVAL_SECONDS:
                    return False
            marker.touch()
            os.utime(marker, (now, now))
            return True
    except OSError:
        return False  # an index that cannot be written cannot remember a reading either


def index_steps(images: Iterable[Mapping[str, Any]]) -> int:
    """Remember every step image of an engine's listing (`images(all=True)` items filtered by
    the step label); how many keys were new or changed. An image built on a step image
    inherits its label: the step's own image is the one whose parent carries another key."""
    items = [i for i in images if _IMAGE_ID.fullmatch(str(i.get("Id") or ""))]
    keys = {str(i["Id"]): str((i.get("Labels") or {}).get(LABEL_STEP) or "") for i in items}
    learned = 0
    for item in items:
        image_id = str(item["Id"])
        key = keys[image_id]
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            continue
        if keys.get(str(item.get("ParentId") or "")) == key:
            continue  # inherited from the step image below it
        if remembered_step(key) == image_id:
            continue
        with contextlib.suppress(OSError):
            # No fsync: a reading writes thousands of entries, and an entry a crash tears
            # is ignored (remembered_step checks its form) and costs one step's run.
            path = _step_file(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{key}.{os.getpid()}.tmp")
            tmp.write_text(image_id + "\n")
            os.replace(tmp, path)
            learned += 1
    return learned


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
