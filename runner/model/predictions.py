"""Predicted agent patches: the oracle's verifier need not wait for its agent side.

The oracle's agent side (the gold solution applied in the agent image, then collected) makes the
same patch every time its inputs are the same: the agent image, the solution's files and the
solve and collect steps. The patch it made last time is kept under a key of those inputs, and a
verify that finds one starts the oracle's verifier on it at once, beside the agent side,
instead of after it.

The prediction never decides anything: the verifier's result counts only when the patch this
run's agent side collected is byte-for-byte the predicted one (the verifier then ran exactly
what it would have run). Any other patch is verified again in a fresh verifier, and the
mismatched result is set aside. So a stale, wrong or planted prediction costs time, never a
verdict. A key whose patch changed from one run to the next (a solution that writes a time or
a random name) is marked unstable and not predicted until two runs in a row agree again.

Entries live in `<cache>/predicted-patches/`, at most MAX_ENTRIES (the oldest go first), each
at most MAX_PATCH_BYTES (a larger patch is not predicted).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.base.safeio import write_atomic

PREDICTIONS_DIR = "predicted-patches"
MAX_ENTRIES = 256
MAX_PATCH_BYTES = 1024 * 1024
_UNSTABLE = ".unstable"


def tree_digest(directory: Path) -> str:
    """The files under `directory` (relative paths, executable bits, contents; symlinks by
    their targets), as one sha256."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory).as_posix()
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            digest.update(f"L {relative} {os.readlink(path)}\0".encode())
        elif stat.S_ISREG(info.st_mode):
            executable = "x" if info.st_mode & 0o111 else "-"
            digest.update(f"F {relative} {executable} {info.st_size}\0".encode())
            digest.update(path.read_bytes())
        elif stat.S_ISDIR(info.st_mode):
            digest.update(f"D {relative}\0".encode())
    return digest.hexdigest()


def prediction_key(parts: Mapping[str, object]) -> str:
    """A key of what makes the patch: any JSON-able description of the agent side's inputs."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class PatchPredictions:
    """The store (one directory; safe for concurrent runners: every write is atomic)."""

    root: Path

    @property
    def directory(self) -> Path:
        return self.root / PREDICTIONS_DIR

    def _entry(self, key: str) -> Path:
        return self.directory / f"{key}.patch"

    def predict(self, key: str) -> bytes | None:
        """The patch last collected under `key`, unless its key is unstable."""
        entry = self._entry(key)
        if entry.with_name(entry.name + _UNSTABLE).exists():
            return None
        try:
            with entry.open("rb") as handle:
                data = handle.read(MAX_PATCH_BYTES + 1)
        except OSError:
            return None
        return data if len(data) <= MAX_PATCH_BYTES else None

    def record(self, key: str, patch: bytes, *, predicted: bytes | None) -> None:
        """This run's agent side collected `patch` (after predicting `predicted`, or nothing).
        A cache that cannot be written only costs the next run its prediction."""
        with contextlib.suppress(OSError):
            self._record(key, patch, predicted)

    def _record(self, key: str, patch: bytes, predicted: bytes | None) -> None:
        entry = self._entry(key)
        unstable = entry.with_name(entry.name + _UNSTABLE)
        if len(patch) > MAX_PATCH_BYTES:
            entry.unlink(missing_ok=True)
            unstable.unlink(missing_ok=True)
            return
        if predicted is not None and predicted != patch:
            write_atomic(unstable, b"", mode=0o600, durable=False)
        elif predicted is None and unstable.exists():
            try:
                before = entry.read_bytes()
            except OSError:
                before = None
            if before == patch:
                unstable.unlink(missing_ok=True)  # two runs in a row agree again
        if predicted != patch:
            write_atomic(entry, patch, mode=0o600, durable=False)
            self._prune()
        else:
            os.utime(entry)  # recently used: the last to be pruned

    def _prune(self) -> None:
        entries = []
        for path in self.directory.glob("*.patch"):
            with contextlib.suppress(OSError):
                entries.append((path.stat().st_mtime, path))
        for _, path in sorted(entries)[: max(0, len(entries) - MAX_ENTRIES)]:
            with contextlib.suppress(OSError):
                path.unlink()
                path.with_name(path.name + _UNSTABLE).unlink(missing_ok=True)
