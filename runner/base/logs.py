"""Log files with a size cap: the head and the tail are kept, the middle is replaced by a marker
saying how much was cut (a test printing 200 MB must not make a gigabyte run directory). Also
the safe, capped extraction of archives copied out of containers.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

MARKER = "\n[selfbench: {cut} bytes cut from the middle of this log (limit {limit} bytes)]\n"
MAX_ARCHIVE_MEMBERS = 10_000


@dataclass(frozen=True)
class Truncation:
    path: str
    original_bytes: int
    kept_bytes: int


class CappedLog:
    """A binary log file that keeps at most `limit` bytes: the first half as written, the last
    half at close."""

    def __init__(self, path: Path, limit: int, *, append: bool = False) -> None:
        self.path = path
        self.limit = max(2, limit)
        self._head_limit = self.limit // 2
        self._tail_limit = self.limit - self._head_limit
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = path.open("ab" if append else "wb")
        self._head = self._file.tell() if append else 0
        self._tail = bytearray()
        self.total = self._head
        self.closed = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        room = self._head_limit - self._head
        if room > 0:
            self._file.write(data[:room])
            self._file.flush()
            self._head += min(room, len(data))
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def cut(self) -> int:
        return max(0, self.total - self._head - min(len(self._tail), self._tail_limit))

    def close(self) -> Truncation | None:
        if self.closed:
            return None
        self.closed = True
        tail = bytes(self._tail[-self._tail_limit :]) if self._tail else b""
        cut = self.cut
        if cut:
            self._file.write(MARKER.format(cut=cut, limit=self.limit).encode())
        self._file.write(tail)
        self._file.close()
        if cut:
            return Truncation(str(self.path), self.total, self.total - cut)
        return None

    def __enter__(self) -> CappedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _safe_member_path(name: str) -> str | None:
    normalized = posixpath.normpath("/" + name).lstrip("/")
    if not normalized or normalized == "." or "\0" in normalized:
        return None
    return normalized


def extract_capped(
    archive: BinaryIO, destination: Path, *, limit: int, strip: str | None = None
) -> list[Truncation]:
    """Extract regular files and directories from a tar stream into `destination`, each file
    capped like a log. Links, devices and names that would leave `destination` are skipped."""
    truncations: list[Truncation] = []
    destination.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=archive, mode="r|") as tar:
        for count, member in enumerate(tar):
            if count >= MAX_ARCHIVE_MEMBERS:
                break
            relative = _safe_member_path(member.name)
            if relative is None:
                continue
            if strip:
                if relative == strip:
                    relative = ""
                elif relative.startswith(strip + "/"):
                    relative = relative[len(strip) + 1 :]
            target = destination / relative if relative else destination
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile() or not relative:
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            log = CappedLog(target, limit)
            for block in iter(lambda: source.read(1 << 20), b""):  # noqa: B023
                log.write(block)
            truncation = log.close()
            os.chmod(target, 0o644)
            if truncation:
                truncations.append(truncation)
    return truncations
