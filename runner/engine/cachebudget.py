"""The image cache's budget: the runner's task images are its build cache; `gc --cache-budget`
(and `batch`, `serve` and `worker` with --cache-budget, after each task) removes the least
recently used ones until their bytes fit. Docker records no last use, so every verify records
when it uses its images (`<cache>/image-use.json`), once before its first build and again when
it ends; an image never recorded counts from its creation.

Never removed: an image a container uses, an image used since `protect_since` (the start of the
oldest verification still running beside the collection: between two containers of a gate, or
before its first one, its images hold no container), and any image the runner did not create
(the label decides). The last two are checked under the lock `record_use` takes, one image at a
time, right before its removal: a verification that records an image either records it first
(and the image stays) or finds it gone when it builds (and builds it again).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.model.settings import cache_root

USE_FILE = "image-use.json"
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
    with (path.parent / f".{path.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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


def record_use(tags: Iterable[str], root: Path | None = None) -> None:
    """Note that these image tags are used now (a verify's agent and verifier images)."""
    path = _use_file(root)
    now = time.time()
    with _locked(path):
        records = load_use(root)
        for tag in tags:
            records[tag] = now
        if len(records) > MAX_RECORDS:
            records = dict(sorted(records.items(), key=lambda kv: kv[1])[-MAX_RECORDS:])
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(records, sort_keys=True))
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
