"""A compiled Harbor bundle read from disk, as typed input for the plan.

A bundle on disk is untrusted: task.toml goes through the strict model, the required files must
be regular files, and the build contexts may hold only regular files, directories and symlinks
(hashed by their target text, never followed), so hashing one cannot block on a FIFO or read a
device.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from runner.errors import InvalidTaskError
from runner.harbor import TaskToml, read_task_toml
from runner.safeio import file_kind, require_directory

AGENT_CONTEXT = "environment"
VERIFIER_CONTEXT = "tests"
CONTEXT_DIRS = (AGENT_CONTEXT, VERIFIER_CONTEXT)
REQUIRED_FILES = (
    "task.toml",
    "instruction.md",
    "environment/Dockerfile",
    "tests/Dockerfile",
    "tests/test.sh",
    "solution/solve.sh",
)
MAX_CONTEXT_FILES = 100_000


@dataclass(frozen=True, kw_only=True)
class Bundle:
    root: Path
    config: TaskToml
    # sha256 over each build context's file names, modes and bytes.
    context_digests: dict[str, str]

    @property
    def task_id(self) -> str:
        return self.config.task_id

    def context(self, name: str) -> Path:
        return self.root / name


def _require_regular(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise InvalidTaskError("file not found", path=str(path)) from None
    except OSError as exc:
        raise InvalidTaskError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else file_kind(info.st_mode)
        raise InvalidTaskError(f"is {kind}; expected a regular file", path=str(path))


def context_digest(context: Path) -> str:
    """What a build of `context` depends on: every entry's path, type, mode and content."""
    digest = hashlib.sha256()
    count = 0
    for directory, dirnames, filenames in os.walk(context, followlinks=False):
        dirnames.sort()
        for name in sorted(
            [*filenames, *(d for d in dirnames if (Path(directory) / d).is_symlink())]
        ):
            path = Path(directory) / name
            relative = path.relative_to(context).as_posix()
            info = os.lstat(path)
            count += 1
            if count > MAX_CONTEXT_FILES:
                raise InvalidTaskError(
                    f"build context holds more than {MAX_CONTEXT_FILES} files", path=str(context)
                )
            if stat.S_ISLNK(info.st_mode):
                digest.update(
                    f"L\0{relative}\0{os.readlink(path)}\0".encode(errors="surrogateescape")
                )
                continue
            if not stat.S_ISREG(info.st_mode):
                raise InvalidTaskError(
                    f"is {file_kind(info.st_mode)}; a build context holds regular files only",
                    path=str(path),
                )
            digest.update(
                f"F\0{relative}\0{info.st_mode & 0o777:o}\0".encode(errors="surrogateescape")
            )
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
    return digest.hexdigest()


def is_bundle(path: Path) -> bool:
    return os.path.lexists(path / "task.toml")


def load_bundle(root: Path) -> Bundle:
    require_directory(root, what="bundle directory")
    for required in REQUIRED_FILES:
        _require_regular(root / required)
    config = read_task_toml(root)
    digests = {}
    for name in CONTEXT_DIRS:
        context = root / name
        if context.is_symlink() or not context.is_dir():
            raise InvalidTaskError("must be a directory", path=str(context))
        digests[name] = context_digest(context)
    return Bundle(root=root, config=config, context_digests=digests)
