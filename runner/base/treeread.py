"""Reading one file below a root that others may have written (a run directory: its logs came
out of containers): every component is opened relative to the one above it and never through
a link, so no name below the root leads out of it, and the file must be regular and within a
size limit before a byte of it is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO

from runner.base.errors import InvalidTaskError
from runner.base.safeio import file_kind, os_error_text, read_opened

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file below a root: never through a link, never waiting on a FIFO.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# How deep walk_below goes: a rendered bundle is a few levels deep (environment/<image>/...).
MAX_WALK_DEPTH = 32


def relative_parts(relative: str) -> list[str]:
    """The components of a relative path as a URL or a report names it; InvalidTaskError for
    one that is absolute, climbs (`..`), or is empty."""
    path = PurePosixPath(relative)
    parts = [p for p in path.parts if p not in ("", ".")]
    if path.is_absolute() or not parts or ".." in parts or "\0" in relative:
        raise InvalidTaskError("is not a path below the run directory", path=relative)
    return parts


def read_below(root: Path, relative: str, *, limit: int) -> bytes:
    """The bytes of the regular file `relative` below `root` (the root itself may be reached
    through links: it is the runner's choice). FileNotFoundError when nothing is there;
    InvalidTaskError for a link, a FIFO, a device, a directory or a file over `limit`."""
    return read_opened(open_below(root, relative), relative, limit)


def read_json_below(root: Path, relative: str, *, limit: int) -> Any:
    """The JSON document in the regular file `relative` below `root` (read_below's rules);
    InvalidTaskError for one that does not parse, naming the file."""
    data = read_below(root, relative, limit=limit)
    try:
        return json.loads(data)
    except RecursionError:
        raise InvalidTaskError("is not JSON (nested too deeply)", path=relative) from None
    except ValueError as exc:
        raise InvalidTaskError(f"is not JSON ({exc})", path=relative) from None


def within(root: Path, path: Path) -> str | None:
    """`path` as a path below `root` (for read_below), or None when it is not below it: a
    path a report recorded is read only where it is inside the run directory. Both are taken
    from the current directory as they are spelled (a run directory given relative, its logs
    joined to it), `..` folded as text, never through a link: what is read is then opened
    below `root` component by component (read_below), so it is inside whatever the text said."""
    try:
        relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        return None
    try:
        return "/".join(relative_parts(relative.as_posix()))
    except InvalidTaskError:
        return None


def open_below(root: Path, relative: str) -> int:
    """A descriptor of the regular file `relative` below `root`, opened through no link (the
    caller closes it). FileNotFoundError when nothing is there; InvalidTaskError for a link, a
    FIFO, a device or a directory."""
    parts = relative_parts(relative)
    fd = os.open(root, _DIRECTORY & ~os.O_NOFOLLOW)
    try:
        for name in parts[:-1]:
            try:
                inner = os.open(name, _DIRECTORY, dir_fd=fd)
            except OSError as exc:
                _refuse(fd, name, relative, exc)
                raise
            os.close(fd)
            fd = inner
        try:
            file_fd = os.open(parts[-1], FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            _refuse(fd, parts[-1], relative, exc)
            raise
    finally:
        os.close(fd)
    mode = os.fstat(file_fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(file_fd)
        raise InvalidTaskError(f"is {file_kind(mode)}; expected a regular file", path=relative)
    return file_fd


def _refuse(fd: int, name: str, relative: str, exc: OSError) -> None:
    """A name that is there but may not be followed is refused by what it is (a link says so);
    an entry that is not there stays FileNotFoundError."""
    if isinstance(exc, FileNotFoundError):
        return
    mode = None
    with contextlib.suppress(OSError):
        mode = os.lstat(name, dir_fd=fd).st_mode
    if mode is not None and stat.S_ISLNK(mode):
        raise InvalidTaskError(f"{name} is a symbolic link; it is not followed", path=relative)
    what = file_kind(mode) if mode is not None else "not readable"
    raise InvalidTaskError(f"{name} is {what}", path=relative) from None


@dataclass(frozen=True)
class Below:
    """One entry under a walked root: its path below it, what it is (lstat's mode: a link is a
    link, never what it points to) and, for a regular file, its size and the file, open for
    reading until the walk moves on."""

    relative: str
    mode: int
    size: int
    file: BinaryIO | None

    @property
    def regular(self) -> bool:
        return self.file is not None


@contextlib.contextmanager
def held_directory(root: Path) -> Iterator[int]:
    """A descriptor of the directory `root`, held while the caller reads below it: its last
    component is opened through no link (a run's `bundle` swapped for a link to another task's
    is refused), the directories above it are the caller's choice. FileNotFoundError when
    nothing is there; InvalidTaskError for a link or anything but a directory."""
    if root.name in ("", ".", ".."):
        fd = os.open(root, _DIRECTORY & ~os.O_NOFOLLOW)
    else:
        parent = os.open(root.parent, _DIRECTORY & ~os.O_NOFOLLOW)
        try:
            try:
                fd = os.open(root.name, _DIRECTORY, dir_fd=parent)
            except OSError as exc:
                _refuse(parent, root.name, str(root), exc)
                raise
        finally:
            os.close(parent)
    try:
        yield fd
    finally:
        os.close(fd)


def walk_below(root: Path, *, max_entries: int) -> Iterator[Below]:
    """Every entry below the directory `root` but directories (held_directory: `root` itself
    is no link), in the order of their paths' components, each directory read through its
    descriptor and never through a link: a link (to a file or a directory), a FIFO, a device or
    a socket is yielded as what it is, with no file, and never entered; a regular file is opened
    through no link and yielded open (closed once the caller takes the next). More than
    `max_entries` entries listed (directories included), counted as they are listed, or more
    than MAX_WALK_DEPTH levels: InvalidTaskError, before any past the bound is opened."""
    with held_directory(root) as fd:
        yield from walk_held(fd, max_entries=max_entries, where=root)


def walk_held(fd: int, *, max_entries: int, where: Path) -> Iterator[Below]:
    """walk_below from a directory descriptor the caller holds (held_directory)."""
    yield from _walk(fd, "", 0, [0], max_entries, where)


def _walk(
    fd: int, prefix: str, depth: int, count: list[int], max_entries: int, where: Path
) -> Iterator[Below]:
    names: list[str] = []
    try:
        with os.scandir(fd) as listing:
            for item in listing:
                count[0] += 1
                if count[0] > max_entries:
                    raise InvalidTaskError(
                        f"holds more than {max_entries} entries; it is not read", path=str(where)
                    )
                names.append(item.name)
    except OSError as exc:  # a directory this user may not read
        raise InvalidTaskError(os_error_text(exc), path=f"{where}/{prefix}") from None
    for name in sorted(names):
        relative = prefix + name
        try:
            mode = os.lstat(name, dir_fd=fd).st_mode
        except FileNotFoundError:
            continue  # gone since it was listed
        except OSError as exc:  # a directory this user may list but not search
            raise InvalidTaskError(os_error_text(exc), path=f"{where}/{relative}") from None
        if not stat.S_ISDIR(mode):
            yield from _entry(name, relative, mode, fd)
            continue
        if depth >= MAX_WALK_DEPTH:
            # A rendered bundle is a few levels deep; each level holds a descriptor.
            raise InvalidTaskError(
                f"is nested more than {MAX_WALK_DEPTH} directories deep; it is not read",
                path=f"{where}/{relative}",
            )
        try:
            inner = os.open(name, _DIRECTORY, dir_fd=fd)
        except FileNotFoundError:
            continue
        except OSError as exc:  # replaced by a link or a file since the lstat
            _refuse(fd, name, relative, exc)
            raise
        try:
            yield from _walk(inner, f"{relative}/", depth + 1, count, max_entries, where)
        finally:
            os.close(inner)


def _entry(name: str, relative: str, mode: int, dir_fd: int) -> Iterator[Below]:
    if not stat.S_ISREG(mode):
        yield Below(relative=relative, mode=mode, size=0, file=None)
        return
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return  # gone since it was listed
    except OSError as exc:
        _refuse(dir_fd, name, relative, exc)
        raise
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced since the lstat
            yield Below(relative=relative, mode=info.st_mode, size=0, file=None)
            return
        yield Below(relative=relative, mode=info.st_mode, size=info.st_size, file=file)


def exact_chunks(source: BinaryIO, size: int, where: str, use: str) -> Iterator[bytes]:
    """Exactly `size` bytes of `source` (a file walk_below opened, its size taken before), a
    chunk at a time, never reading more than one byte past it: a file that changed size while
    it was read is refused (InvalidTaskError, "it is not <use>") rather than read on (one
    growing would never end)."""
    left = size
    while left > 0:
        chunk = source.read(min(1 << 20, left))
        if not chunk:
            break
        yield chunk
        left -= len(chunk)
    if left > 0 or source.read(1):
        raise InvalidTaskError(f"changed size while it was read; it is not {use}", path=where)


def copy_bounded(source: BinaryIO, size: int, target: Path, where: str) -> None:
    """Exactly `size` bytes of `source` into a new file `target` (exact_chunks)."""
    with target.open("xb") as out:
        for chunk in exact_chunks(source, size, where, "copied"):
            out.write(chunk)


def sha256_exactly(source: BinaryIO, size: int, where: str) -> str:
    """The sha256 of exactly `size` bytes of `source` (exact_chunks)."""
    digest = hashlib.sha256()
    for chunk in exact_chunks(source, size, where, "hashed"):
        digest.update(chunk)
    return digest.hexdigest()


class HashingReader(io.RawIOBase):
    """A reader that takes the sha256 of what passes through it; drain() reads and hashes what
    is left and gives the digest. With `size` (what fstat said when the file was opened) it
    never reads more than one byte past it, so `count` then says whether the file was exactly
    that size: one cut short before it was opened and put back after, or grown since (hashed
    without end otherwise), shows in it."""

    def __init__(self, inner: IO[bytes], size: int | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.size = size
        self.count = 0
        self.sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def _room(self, wanted: int) -> int:
        return wanted if self.size is None else min(wanted, self.size + 1 - self.count)

    def readinto(self, buffer: Any) -> int:
        room = self._room(len(buffer))
        data = self.inner.read(room) if room > 0 else b""
        self.count += len(data)
        self.sha.update(data)
        buffer[: len(data)] = data
        return len(data)

    def drain(self) -> str:
        while (room := self._room(1 << 20)) > 0 and (data := self.inner.read(room)):
            self.count += len(data)
            self.sha.update(data)
        return self.sha.hexdigest()
