"""A host's cache of store blobs, kept under a size: the least recently used blobs go first.

A worker fetches every task's files and every repository bundle it verifies into its cache
(`<state>/cache/blobs/<hex>`); over weeks of pools that is every repository the fleet ever saw.
A cached blob is only a copy (the store holds it by digest, and a later fetch downloads and
checks it again), so removing one is always safe for the store; it is not safe for a
verification reading it now. So a verification names the digests it uses before it fetches
them (`using`), and a pass checks each blob against those under the same lock right before it
removes it: a blob is either removed before its fetch (which then downloads it again) or kept.

"Recently used" is the file's mtime: a fetch that finds a blob cached touches it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Pruned:
    removed: int
    freed_bytes: int
    kept_bytes: int


class BoundedBlobs:
    """The blobs directory of one host's cache, with the digests its running work uses."""

    def __init__(self, directory: Path, budget_bytes: int) -> None:
        self.directory = directory
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._in_use: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def using(self, digests: Iterable[str]) -> Iterator[None]:
        """Hold these blobs (`sha256:<hex>`) for the block: no pass removes them meanwhile."""
        names = [d.removeprefix("sha256:") for d in digests]
        with self._lock:
            self._in_use.update(names)
        try:
            yield
        finally:
            with self._lock:
                self._in_use.subtract(names)
                self._in_use += collections.Counter()  # drops the names at zero

    def prune(self) -> Pruned:
        """Remove the least recently used blobs until the rest fit the budget; never one in
        use, nor a download still being written (a dot-file)."""
        entries: list[tuple[float, int, Path]] = []
        with contextlib.suppress(FileNotFoundError), os.scandir(self.directory) as listing:
            for entry in listing:
                if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    info = entry.stat(follow_symlinks=False)
                    entries.append((info.st_mtime, info.st_size, Path(entry.path)))
        total = sum(size for _, size, _ in entries)
        removed = freed = 0
        for _, size, path in sorted(entries, key=lambda e: e[0]):
            if total - freed <= self.budget_bytes:
                break
            with self._lock:
                if self._in_use[path.name] > 0:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
                    freed += size
        return Pruned(removed=removed, freed_bytes=freed, kept_bytes=total - freed)
