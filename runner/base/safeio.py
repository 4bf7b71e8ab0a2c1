"""Reading untrusted input files and writing the runner's own outputs.

Input files are read only when they are regular files reached without a final symlink, opened
non-blocking (a FIFO never hangs the runner) and read up to a size limit (a link to /dev/zero
cannot exhaust memory). Outputs are written atomically (temp file + os.replace).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from runner.base.errors import InvalidTaskError, UsageError

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


def os_error_text(exc: OSError) -> str:
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
        raise InvalidTaskError(os_error_text(exc), path=str(path)) from None
    return read_opened(fd, str(path), limit)


def size_words(size: int) -> str:
    """A byte count as people read limits: "20 MiB", "256 KiB", "100 bytes"."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


def read_opened(fd: int, where: str, limit: int) -> bytes:
    """The bytes of an opened file that must be regular and at most `limit` bytes; closes it."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidTaskError(
                f"is {file_kind(info.st_mode)}; expected a regular file", path=where
            )
        if info.st_size > limit:
            raise InvalidTaskError(
                f"is too large ({info.st_size} bytes; the limit is {size_words(limit)})",
                path=where,
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            except OSError as exc:
                raise InvalidTaskError(os_error_text(exc), path=where) from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise InvalidTaskError(
                    f"is too large (more than the limit of {size_words(limit)})", path=where
                )
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
        raise InvalidTaskError(os_error_text(exc), path=str(path)) from None
    return read_regular(path, limit=limit)


def require_directory(path: Path, *, what: str = "task directory") -> None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InvalidTaskError(f"{what} not found", path=str(path)) from None
    except OSError as exc:
        raise InvalidTaskError(os_error_text(exc), path=str(path)) from None
    if not stat.S_ISDIR(info.st_mode):
        raise InvalidTaskError(f"is {file_kind(info.st_mode)}, not a directory", path=str(path))


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read a chunk at a time."""
    with path.open("rb") as handle:
        return stream_sha256(handle)


def stream_sha256(handle: BinaryIO) -> str:
    """The SHA-256 (hex) of what is left to read of an open file, a chunk at a time."""
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


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
        raise UsageError(os_error_text(exc), path=str(path), field=option) from None
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


def private_dir(path: Path, *, exist_ok: bool = True) -> None:
    """Make `path` (and its parents) and leave it the runner user's alone (0700): a run
    directory, a state directory or a store holds held-out tests, gold patches and job records,
    which no other local user may read."""
    path.mkdir(mode=0o700, parents=True, exist_ok=exist_ok)
    info = path.lstat()
    if info.st_uid == os.geteuid() and info.st_mode & 0o077:
        os.chmod(path, 0o700)


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one; synced to
    disk first unless not `durable` (a cache entry lost to a crash costs only its reuse)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def staged_directory(out: Path) -> Iterator[Path]:
    """A new directory beside `out` to fill: it becomes `out` when the block ends, and is
    removed when the block raises, so `out` is whole or absent. `out` must not exist, or be an
    empty directory (UsageError otherwise)."""
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise UsageError(f"-o {out}: exists and is not an empty directory", path=str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield staged
        if out.exists():
            out.rmdir()  # empty, as checked
        os.replace(staged, out)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirectoryHandle:
    """A directory held open, every entry reached relative to it and never through a link.

    For ground someone else writes to (the sidecar's mailbox lives in a sandbox): a name is
    looked up in this directory only (no `/`, no `..`), a final link is never followed, a
    child directory replaced by a link or a file is moved aside and made again, and a write
    lands in the directory this handle holds even when its path has been swapped since."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: Path) -> DirectoryHandle:
        """The root itself is the operator's choice: it may be reached through links."""
        path.mkdir(parents=True, exist_ok=True)
        return cls(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), path)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> DirectoryHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _name(name: str) -> str:
        if not name or "/" in name or name in (".", "..") or "\0" in name:
            raise ValueError(f"not a name in one directory: {name!r}")
        return name

    def child(self, name: str, *, displaced: list[str] | None = None) -> DirectoryHandle:
        """The child directory `name`, made when missing; anything else there (a link, a
        file, a FIFO) is moved aside under a new name first (recorded in `displaced`)."""
        name = self._name(name)
        for _ in range(3):
            try:
                return DirectoryHandle(os.open(name, _DIR_FLAGS, dir_fd=self.fd), self.path / name)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EACCES):
                    raise
                aside = self.move_aside(name)
                if displaced is not None and aside is not None:
                    displaced.append(aside)
        raise OSError(errno.EAGAIN, f"{self.path / name} keeps being replaced")

    def move_aside(self, name: str) -> str | None:
        """Rename the entry (never what a link points to) to a fresh hidden name here."""
        aside = f".displaced-{name[:80]}-{time.time_ns()}-{os.getpid()}"
        try:
            os.rename(name, aside, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except FileNotFoundError:
            return None
        return aside

    def names(self) -> list[str]:
        try:
            return os.listdir(self.fd)
        except OSError:
            return []

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return None

    def read_regular(self, name: str, *, limit: int) -> bytes:
        """Like read_regular: a regular file only (no link, FIFO, device, directory), at most
        `limit` bytes. Raises InvalidTaskError naming what is there."""
        where = str(self.path / name)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self._name(name), flags, dir_fd=self.fd)
        except OSError as exc:
            info = self.lstat(name)
            if info is not None and not stat.S_ISREG(info.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else file_kind(info.st_mode)
                raise InvalidTaskError(f"is {kind}; expected a regular file", path=where) from None
            raise InvalidTaskError(os_error_text(exc), path=where) from None
        return read_opened(fd, where, limit)

    def _temporary(self, name: str, data: bytes, mode: int) -> str:
        tmp = f".{name[:80]}.{os.getpid()}.{time.time_ns()}.tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
            dir_fd=self.fd,
        )  # fmt: skip
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        return tmp

    def write_atomic(self, name: str, data: bytes, *, mode: int = 0o644) -> None:
        """Replace `name` (a link there is replaced, never followed; a directory there is
        moved aside) so a reader sees the old file or the whole new one."""
        name = self._name(name)
        tmp = self._temporary(name, data, mode)
        try:
            try:
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                self.move_aside(name)
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    def write_new(self, name: str, data: bytes, *, mode: int = 0o644) -> bool:
        """Create `name` whole, only when nothing is there (a hard link of a finished
        temporary file: no overwrite, no half file). False when something already is."""
        name = self._name(name)
        tmp = self._temporary(name, data, mode)
        try:
            os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)

    def move(self, name: str, target: DirectoryHandle, new_name: str) -> None:
        """Rename the entry itself (a link moves as a link) into `target`."""
        os.rename(self._name(name), self._name(new_name), src_dir_fd=self.fd, dst_dir_fd=target.fd)

    def unlink(self, name: str) -> None:
        """Remove a non-directory entry (a link itself, never its target)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._name(name), dir_fd=self.fd)
