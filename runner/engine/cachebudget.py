"""The image cache's budget: the runner's task images are its build cache; `gc --cache-budget`
(and `batch`, `serve` and `worker` with --cache-budget, after each task) removes the least
recently used ones until their bytes fit. Docker records no last use, so every verify records
when it uses its images (`<cache>/image-use.json`), once before its first build and again when
it ends; an image never recorded counts from its creation.

Never removed: an image a container uses; an image used since the oldest verification still
running on this host began (between two containers of a gate, or before its first one, its
images hold no container): each verify holds its images from its first build to its end
(`<cache>/image-holds.json`, by process: a killed one holds nothing); and any image the runner
did not create (the label decides). The record is checked again under the lock `record_use`
takes, one image at a time, right before its removal: a verification that starts meanwhile
either records its image first (and it stays) or finds it gone when it builds (and builds it
again).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from filelock import FileLock

from runner.base.children import process_start
from runner.model.settings import cache_root

USE_FILE = "image-use.json"
HOLDS_FILE = "image-holds.json"  # the verifications using their images now, by process
MAX_RECORDS = 10_000


class _Image(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def layers(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def created(self) -> float: ...
    @property
    def in_use(self) -> bool: ...


@dataclass(frozen=True, kw_only=True)
class Collection:
    removed: list[str]  # tags (or ids) removed
    freed_bytes: int
    kept_bytes: int
    skipped_in_use: int


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.parent / f".{path.name}.lock"):
        yield


def _use_file(root: Path | None) -> Path:
    return (root or cache_root()) / USE_FILE


def load_use(root: Path | None = None) -> dict[str, float]:
    path = _use_file(root)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def record_use(tags: Iterable[str], root: Path | None = None, *, hold: str | None = None) -> None:
    """Note that these image tags are used now (a verify's agent and verifier images). With
    `hold`, this process also holds them from now until `release(hold)` (or its end): no
    collection, in any process of this host, removes an image used since then."""
    path = _use_file(root)
    now = time.time()
    with _locked(path):
        records = load_use(root)
        for tag in tags:
            records[tag] = now
        if len(records) > MAX_RECORDS:
            records = dict(sorted(records.items(), key=lambda kv: kv[1])[-MAX_RECORDS:])
        _write(path, records)
        if hold is not None:
            holds = _live_holds(root)
            holds[hold] = {"pid": os.getpid(), "start": process_start(os.getpid()), "since": now}
            _write(_holds_file(root), holds)


def release(hold: str, root: Path | None = None) -> None:
    """This process no longer holds what it recorded under `hold`."""
    path = _use_file(root)
    with _locked(path):
        holds = _live_holds(root)
        if holds.pop(hold, None) is not None:
            _write(_holds_file(root), holds)


def held_since(root: Path | None = None) -> float | None:
    """When the oldest hold of a process still running began (None: nothing held)."""
    stamps = [float(h["since"]) for h in _live_holds(root).values()]
    return min(stamps) if stamps else None


def _holds_file(root: Path | None) -> Path:
    return (root or cache_root()) / HOLDS_FILE


def _live_holds(root: Path | None) -> dict[str, dict[str, Any]]:
    """The holds whose process still runs (a verification killed with SIGKILL holds nothing)."""
    try:
        data = json.loads(_holds_file(root).read_text())
    except (OSError, ValueError):
        return {}
    live: dict[str, dict[str, Any]] = {}
    for name, hold in (data if isinstance(data, dict) else {}).items():
        if not isinstance(hold, dict) or not isinstance(hold.get("since"), int | float):
            continue
        pid = hold.get("pid")
        if isinstance(pid, int) and pid > 0 and process_start(pid) == hold.get("start"):
            live[str(name)] = hold
    return live


def _write(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, sort_keys=True))
    os.replace(tmp, path)


def last_use(image: _Image, records: dict[str, float]) -> float:
    used = [records[t] for t in image.tags if t in records]
    return max(used) if used else image.created


def footprint(images: Iterable[_Image]) -> int:
    """The bytes these images hold above their bases, each shared layer counted once (an
    agent and a verifier image share everything up to the setup step)."""
    layers: dict[str, int] = {}
    for image in images:
        layers.update(image.layers)
    return sum(layers.values())


def choose_removals(
    images: Sequence[_Image],
    budget_bytes: int,
    records: dict[str, float],
    *,
    protect_since: float | None = None,
) -> tuple[list[Any], int, int]:
    """The images to remove, least recently used first, until the rest fit the budget; the
    bytes that removal frees; and the bytes that stay. Images in use, or used since
    `protect_since`, are never chosen."""
    remaining = list(images)
    before = footprint(remaining)
    chosen: list[Any] = []
    for image in sorted(images, key=lambda i: last_use(i, records)):
        if footprint(remaining) <= budget_bytes:
            break
        if image.in_use or _protected(image, records, protect_since):
            continue
        chosen.append(image)
        remaining.remove(image)
    after = footprint(remaining)
    return chosen, before - after, after


def _protected(image: _Image, records: dict[str, float], since: float | None) -> bool:
    return since is not None and last_use(image, records) >= since


def collect(
    engine: Any,
    budget_bytes: int,
    *,
    dry_run: bool = False,
    protect_since: float | None = None,
    root: Path | None = None,
) -> Collection:
    """Apply the budget on `engine` (a runner.engine.docker.DockerEngine)."""
    # What was used since the oldest verification still running on this host began (by its
    # hold, whatever process runs it), since `protect_since`, or since this pass began stays.
    stamps = [time.time(), held_since(root), protect_since]
    protect_since = min(s for s in stamps if s is not None)
    images = engine.task_images()
    chosen, _, _ = choose_removals(
        images, budget_bytes, load_use(root), protect_since=protect_since
    )
    removed: list[str] = []
    kept = list(images)
    for image in chosen:
        if dry_run:
            removed.append(_name(image))
            kept.remove(image)
            continue
        with _locked(_use_file(root)):
            # Recorded since the listing: a verification started using it; it stays.
            if _protected(image, load_use(root), protect_since):
                continue
            if engine.remove_task_image(image):
                removed.append(_name(image))
                kept.remove(image)
    return Collection(
        removed=removed,
        freed_bytes=footprint(images) - footprint(kept),
        kept_bytes=footprint(kept),
        skipped_in_use=sum(1 for i in images if i.in_use),
    )


def _name(image: _Image) -> str:
    return image.tags[0] if image.tags else image.id[:19]
