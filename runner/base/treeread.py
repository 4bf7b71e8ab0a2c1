"""Reading one file below a root that others may have written (a run directory: its logs came
out of containers): every component is opened relative to the one above it and never through
a link, so no name below the root leads out of it, and the file must be regular and within a
size limit before a byte of it is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from runner.base.errors import InvalidTaskError
from runner.base.safeio import file_kind, read_opened

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
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
            file_fd = os.open(parts[-1], _FILE, dir_fd=fd)
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


def walk_below(root: Path, *, max_entries: int) -> Iterator[Below]:
    """Every entry below `root` but directories, sorted, walked through directory descriptors
    (os.fwalk) and never through a link: a link (to a file or a directory), a FIFO, a device or
    a socket is yielded as what it is, with no file, and the walk does not enter it; a regular
    file is opened through no link and yielded open (closed once the caller takes the next).
    The root itself may be reached through links: it is the runner's choice. More than
    `max_entries` entries (directories included) or more than MAX_WALK_DEPTH levels:
    InvalidTaskError, before any past the bound is opened."""
    count = 0
    for top, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        where = Path(top).relative_to(root)
        if len(where.parts) > MAX_WALK_DEPTH:
            # os.fwalk recurses, a descriptor and a frame a level: a tree this deep is no
            # bundle, and walking on would end in a RecursionError or out of descriptors.
            raise InvalidTaskError(
                f"is nested more than {MAX_WALK_DEPTH} directories deep; it is not read",
                path=str(root / where),
            )
        names = sorted(files + [d for d in dirs if _is_link(d, dir_fd)])
        dirs[:] = sorted(d for d in dirs if d not in names)
        # Directories count too: a tree of empty ones costs the walk as much as files.
        for name in [*names, *(None for _ in dirs)]:
            count += 1
            if count > max_entries:
                raise InvalidTaskError(
                    f"holds more than {max_entries} entries; it is not read", path=str(root)
                )
            if name is None:
                continue
            relative = (where / name).as_posix()
            yield from _entry(name, relative, dir_fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _entry(name: str, relative: str, dir_fd: int) -> Iterator[Below]:
    try:
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
    except FileNotFoundError:
        return  # gone since it was listed
    if not stat.S_ISREG(mode):
        yield Below(relative=relative, mode=mode, size=0, file=None)
        return
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError as exc:
        _refuse(dir_fd, name, relative, exc)
        return  # gone since it was listed
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced since the lstat
            yield Below(relative=relative, mode=info.st_mode, size=0, file=None)
            return
        yield Below(relative=relative, mode=info.st_mode, size=info.st_size, file=file)


def copy_bounded(source: BinaryIO, size: int, target: Path, where: str) -> None:
    """Exactly `size` bytes of `source` (a file walk_below opened, its size taken before) into
    a new file `target`, a chunk at a time: a file that grew past the size it had is refused
    rather than copied on."""
    with target.open("xb") as out:
        left = size
        while left > 0:
            chunk = source.read(min(1 << 20, left))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)
    if source.read(1):
        raise InvalidTaskError("grew while it was read; it is not copied", path=where)
