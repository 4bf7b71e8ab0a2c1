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
from pathlib import Path, PurePosixPath
from typing import Any

from runner.base.errors import InvalidTaskError
from runner.base.safeio import file_kind, read_opened

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


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
