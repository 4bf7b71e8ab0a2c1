"""Patch analysis (pure): which paths a Git patch touches, how many lines it changes, which of
them are dependency manifests, and whether every path stays inside the repository.

Parsing is unidiff's; the raw bytes are kept as given so binary patches survive untouched.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

GIT_PATCH_PREFIX = b"diff --git "
DEV_NULL = "/dev/null"

# The seed's manifest basenames plus the lockfiles of the other package managers we meet.
MANIFEST_BASENAMES = frozenset(
    {
        "package.json",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "bun.lock",
        "bun.lockb",
        "pnpm-lock.yaml",
        "yarn.lock",
        "deno.lock",
        "pyproject.toml",
        "uv.lock",
        "poetry.lock",
        "Pipfile",
        "Pipfile.lock",
        "go.mod",
        "go.sum",
        "Cargo.toml",
        "Cargo.lock",
    }
)
MANIFEST_GLOBS = ("requirements*.txt",)

_OCTAL_ESCAPE = re.compile(rb"\\([0-7]{3}|.)")
_SIMPLE_ESCAPES = {
    b"n": b"\n",
    b"t": b"\t",
    b'"': b'"',
    b"\\": b"\\",
    b"a": b"\a",
    b"b": b"\b",
    b"f": b"\f",
    b"r": b"\r",
    b"v": b"\v",
}


class PatchParseError(ValueError):
    pass


@dataclass(frozen=True, kw_only=True)
class FileChange:
    """One `diff --git` section."""

    old_path: str | None  # None when the file is added
    new_path: str | None  # None when the file is deleted
    added_lines: int
    removed_lines: int
    binary: bool
    raw: bytes  # the section's exact bytes, for re-emitting a sub-patch

    @property
    def paths(self) -> tuple[str, ...]:
        seen: list[str] = []
        for path in (self.old_path, self.new_path):
            if path is not None and path not in seen:
                seen.append(path)
        return tuple(seen)

    @property
    def path(self) -> str:
        """The path a reader would name the change by: the new one, or the old for a deletion."""
        return self.new_path if self.new_path is not None else str(self.old_path)

    @property
    def changed_lines(self) -> int:
        return self.added_lines + self.removed_lines


@dataclass(frozen=True, kw_only=True)
class PatchInfo:
    changes: tuple[FileChange, ...]

    @property
    def files(self) -> tuple[str, ...]:
        """Every path the patch touches (both sides of a rename), sorted, unique."""
        return tuple(sorted({p for change in self.changes for p in change.paths}))

    @property
    def changed_lines(self) -> int:
        return sum(change.changed_lines for change in self.changes)

    def manifest_changes(self) -> tuple[FileChange, ...]:
        return tuple(c for c in self.changes if any(is_manifest(p) for p in c.paths))

    def subpatch(self, changes: Iterable[FileChange]) -> bytes:
        return b"".join(change.raw for change in changes)


def is_git_patch(raw: bytes) -> bool:
    return raw.startswith(GIT_PATCH_PREFIX)


def is_manifest(path: str) -> bool:
    name = posixpath.basename(path)
    return name in MANIFEST_BASENAMES or any(fnmatch.fnmatchcase(name, g) for g in MANIFEST_GLOBS)


def _unquote(path: str) -> str:
    """Undo Git's C-style quoting of unusual path names (core.quotePath)."""
    if not (len(path) >= 2 and path.startswith('"') and path.endswith('"')):
        return path
    body = path[1:-1].encode("utf-8", "surrogateescape")

    def replace(match: re.Match[bytes]) -> bytes:
        token = match.group(1)
        if len(token) == 3 and token.isdigit():
            return bytes([int(token, 8)])
        return _SIMPLE_ESCAPES.get(token, token)

    return _OCTAL_ESCAPE.sub(replace, body).decode("utf-8", "surrogateescape")


def _strip_prefix(path: str, prefix: str) -> str | None:
    path = _unquote(path.rstrip("\t"))
    if path == DEV_NULL:
        return None
    if path.startswith(prefix):
        return path[len(prefix) :]
    return path


def _split_sections(raw: bytes) -> list[bytes]:
    """Split the raw patch at each `diff --git ` line, keeping bytes exactly."""
    starts = [m.start() for m in re.finditer(rb"(?m)^diff --git ", raw)]
    return [raw[start:end] for start, end in zip(starts, [*starts[1:], len(raw)], strict=True)]


def parse_patch(raw: bytes) -> PatchInfo:
    """Parse a Git patch. Raises PatchParseError when unidiff cannot read it."""
    text = raw.decode("utf-8", "surrogateescape")
    try:
        parsed = PatchSet(text)
    except UnidiffParseError as exc:
        raise PatchParseError(str(exc)) from exc
    sections = _split_sections(raw)
    if len(sections) != len(parsed):
        raise PatchParseError(
            f"found {len(sections)} 'diff --git' sections but could parse {len(parsed)}"
        )
    changes = []
    for patched, section in zip(parsed, sections, strict=True):
        old = None if patched.is_added_file else _strip_prefix(patched.source_file, "a/")
        new = None if patched.is_removed_file else _strip_prefix(patched.target_file, "b/")
        changes.append(
            FileChange(
                old_path=old,
                new_path=new,
                added_lines=patched.added,
                removed_lines=patched.removed,
                binary=bool(patched.is_binary_file),
                raw=section,
            )
        )
    return PatchInfo(changes=tuple(changes))


def escapes_repository(path: str, *, base: str = ".") -> bool:
    """True when `base/path` leaves the repository root, or is absolute."""
    if posixpath.isabs(path) or posixpath.isabs(base):
        return True
    joined = posixpath.normpath(posixpath.join("/repo", base, path))
    return not (joined == "/repo" or joined.startswith("/repo/"))


def touches_git_dir(path: str) -> bool:
    normalized = posixpath.normpath(path)
    return normalized.split("/", 1)[0] == ".git" or "/.git/" in f"/{normalized}/"


def repository_path(workdir: str, path: str) -> str:
    """`path` (relative to workdir) as a normalized repository-relative path."""
    return posixpath.normpath(posixpath.join(workdir, path))
