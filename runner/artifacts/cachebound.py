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
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
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

        def remove(path: Path) -> bool:
            with self._lock:
                if self._in_use[path.name] > 0:
                    return False
                path.unlink(missing_ok=True)
                return True

        return _least_recent_first(_files(self.directory), self.budget_bytes, remove)


def prune_fetched(cache: Path, budget_bytes: int, *, dry_run: bool = False) -> Pruned:
    """`gc --store-cache-budget`: a host's copies of the store (`<cache>/store/blobs`, blobs its
    `logs`, `export`, `grade` and `batch --temporal` fetched, and `<cache>/runs`, the runs they
    unpacked) kept under a size together, the least recently used first."""
    entries = _files(cache / "store" / "blobs")
    with contextlib.suppress(FileNotFoundError), os.scandir(cache / "runs") as listing:
        for entry in listing:
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(FileNotFoundError):
                stamp = entry.stat(follow_symlinks=False).st_mtime
                entries.append((stamp, _tree_size(Path(entry.path)), Path(entry.path)))

    def remove(path: Path) -> bool:
        if dry_run:
            return True
        if path.is_dir() and not path.is_symlink():
            # Unmarked first: a reader that finds it half-removed fetches it again.
            (path / ".complete").unlink(missing_ok=True)
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        return True

    return _least_recent_first(entries, budget_bytes, remove)


def _files(directory: Path) -> list[tuple[float, int, Path]]:
    entries: list[tuple[float, int, Path]] = []
    with contextlib.suppress(FileNotFoundError), os.scandir(directory) as listing:
        for entry in listing:
            if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                continue
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat(follow_symlinks=False)
                entries.append((info.st_mtime, info.st_size, Path(entry.path)))
    return entries


def _tree_size(root: Path) -> int:
    total = 0
    for base, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def _least_recent_first(
    entries: list[tuple[float, int, Path]], budget_bytes: int, remove: Callable[[Path], bool]
) -> Pruned:
    total = sum(size for _, size, _ in entries)
    removed = freed = 0
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total - freed <= budget_bytes:
            break
        if remove(path):
            removed += 1
            freed += size
    return Pruned(removed=removed, freed_bytes=freed, kept_bytes=total - freed)
