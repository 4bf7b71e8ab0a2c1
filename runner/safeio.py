"""Reading untrusted input files and writing the runner's own outputs.

Input files are read only when they are regular files reached without a final symlink, opened
non-blocking (a FIFO never hangs the runner) and read up to a size limit (a link to /dev/zero
cannot exhaust memory). Outputs are written atomically (temp file + os.replace).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from runner.errors import InvalidTaskError, UsageError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _os_error(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "file not found"
    if exc.errno == errno.ELOOP:
        return "is a symbolic link; task files must be regular files"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot read: permission denied"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    if exc.errno == errno.EISDIR:
        return "is a directory, expected a file"
    return f"cannot read: {exc.strerror or exc}"


def read_regular(path: Path, *, limit: int) -> bytes:
    """The bytes of a regular file (no final symlink, at most `limit` bytes).

    Raises InvalidTaskError naming the file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        # Opening a socket fails (ENXIO); name what is there rather than the errno.
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
                raise InvalidTaskError(
                    f"is {file_kind(mode)}; expected a regular file", path=str(path)
                ) from None
        raise InvalidTaskError(_os_error(exc), path=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidTaskError(
                f"is {file_kind(info.st_mode)}; expected a regular file", path=str(path)
            )
        if info.st_size > limit:
            raise InvalidTaskError(
                f"is too large ({info.st_size} bytes; at most {limit})", path=str(path)
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            except OSError as exc:
                raise InvalidTaskError(_os_error(exc), path=str(path)) from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise InvalidTaskError(f"is too large (more than {limit} bytes)", path=str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def optional_regular(path: Path, *, limit: int) -> bytes | None:
    """Like read_regular, but None when nothing is at `path` (a dangling link is an error)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidTaskError(_os_error(exc), path=str(path)) from None
    return read_regular(path, limit=limit)


def require_directory(path: Path, *, what: str = "task directory") -> None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InvalidTaskError(f"{what} not found", path=str(path)) from None
    except OSError as exc:
        raise InvalidTaskError(_os_error(exc), path=str(path)) from None
    if not stat.S_ISDIR(info.st_mode):
        raise InvalidTaskError(f"is {file_kind(info.st_mode)}, not a directory", path=str(path))


def is_within(path: Path, root: Path) -> bool:
    """Whether `path` is `root` or lies below it, after resolving symlinks."""
    try:
        resolved, base = path.resolve(), root.resolve()
    except (OSError, RuntimeError):
        return False
    return resolved == base or base in resolved.parents


def check_writable_file(path: Path, *, option: str) -> None:
    """Refuse, before any work, an output file that cannot be written atomically: a directory,
    a special file, or a parent that is missing, not a directory, or not writable."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UsageError(_os_error(exc), path=str(path), field=option) from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UsageError(
            f"is {file_kind(info.st_mode)}; expected a regular file", path=str(path), field=option
        )
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent_info = os.stat(parent)
    except OSError:
        raise UsageError("its directory does not exist", path=str(path), field=option) from None
    if not stat.S_ISDIR(parent_info.st_mode):
        raise UsageError("its parent is not a directory", path=str(path), field=option)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError("its directory is not writable", path=str(path), field=option)
    if str(parent.resolve()).startswith(("/proc/", "/sys/", "/dev/")) or str(parent.resolve()) in (
        "/proc",
        "/sys",
        "/dev",
    ):
        raise UsageError("is in a kernel or device filesystem", path=str(path), field=option)


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
