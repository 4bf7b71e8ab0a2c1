"""Patch analysis (pure): which paths a Git patch touches, how many lines it changes, which of
them are dependency manifests, and whether every section is one `git apply` may safely take.

Hunks are parsed by unidiff; git's extended header lines (rename/copy names, modes), which decide
where a section writes, are checked here as well. The raw bytes are kept as given so binary
patches survive untouched.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchedFile, PatchSet

from runner.base import validation as v
from runner.base.errors import printable
from runner.runners.vocabulary import VOCABULARY

GIT_PATCH_PREFIX = b"diff --git "
DEV_NULL = "/dev/null"
REGULAR_MODES = frozenset({"100644", "100755"})
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"

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
# Extended header lines that name a path or a mode (git-diff(1), "extended header lines").
_HEADER_NAME = re.compile(r"^(rename from |rename to |copy from |copy to |--- |\+\+\+ )(.*)$")
_HEADER_MODE = re.compile(r"^(old mode|new mode|new file mode|deleted file mode) (\S+)$")
_INDEX_MODE = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+ (\S+)$")
# `@@ -old_start[,old_count] +new_start[,new_count] @@`; a count left out is 1.
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


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
    hunks: int = 0
    old_mode: str | None = None
    new_mode: str | None = None
    rename: bool = False
    copy: bool = False
    binary_data: bool = False  # a `GIT binary patch` payload (not just "Binary files differ")
    header_names: tuple[str, ...] = ()  # every raw name its header lines give
    symlink_target: str | None = None
    # Where a hunk's lines disagree with its header (an audit blocker, naming the section).
    hunk_problems: tuple[str, ...] = ()

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

    @property
    def changes_something(self) -> bool:
        return bool(
            self.hunks
            or self.binary_data
            or self.rename
            or self.copy
            or self.old_path is None
            or self.new_path is None
            or (self.old_mode and self.new_mode and self.old_mode != self.new_mode)
        )


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
    """A dependency manifest or lockfile (the vocabulary's, the patch policy's own)."""
    return VOCABULARY.is_manifest(path)


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
    if not starts:
        return []
    return [raw[start:end] for start, end in zip(starts, [*starts[1:], len(raw)], strict=True)]


def _header(section: str) -> tuple[list[str], list[str], str | None, str | None]:
    """Names and modes from a section's extended header (up to its first hunk or payload)."""
    names: list[str] = []
    modes: list[str] = []
    old_mode: str | None = None
    new_mode: str | None = None
    for line in section.splitlines()[1:]:
        if line.startswith(("@@", "GIT binary patch", "Binary files ")):
            break
        if match := _HEADER_NAME.match(line):
            kind, name = match.groups()
            name = _unquote(name.rstrip("\t"))
            if name != DEV_NULL:
                prefix = {"--- ": "a/", "+++ ": "b/"}.get(kind, "")
                names.append(name.removeprefix(prefix) if prefix else name)
        elif match := _HEADER_MODE.match(line):
            kind, mode = match.groups()
            modes.append(mode)
            if kind in ("old mode", "deleted file mode"):
                old_mode = mode
            else:
                new_mode = mode
        elif match := _INDEX_MODE.match(line):
            modes.append(match.group(1))
            old_mode = old_mode or match.group(1)
            new_mode = new_mode or match.group(1)
    return names, modes, old_mode, new_mode


@dataclass(frozen=True)
class _Hunks:
    """A section's hunks as `git apply` counts them."""

    count: int
    added: int
    removed: int
    problems: tuple[str, ...]  # where a hunk's header and its lines disagree


def _scan_hunks(section: str) -> _Hunks:
    """Check every hunk's line counts against its `@@ -a,b +c,d @@` header. unidiff takes a
    hunk with more lines than its header counts and drops the rest (so does `git apply`: a
    reader sees lines that are never applied); a short one fails the whole patch."""
    lines = section.split("\n")
    if lines[-1] == "":
        lines.pop()  # what follows the section's last newline is no line
    index = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    count = added = removed = 0
    problems: list[str] = []
    while index < len(lines):
        line = lines[index].rstrip("\r")
        match = HUNK_HEADER.match(line)
        if match is None:
            if line and not line.startswith("\\"):
                after = f"after hunk {count} " if count else ""
                problems.append(
                    f"line {index + 1} of the section ({printable(line[:40])!r}) lies {after}"
                    "outside what any hunk header counts"
                )
                break
            index += 1
            continue
        count += 1
        old_wanted = int(match.group(2)) if match.group(2) is not None else 1
        new_wanted = int(match.group(4)) if match.group(4) is not None else 1
        old = new = 0
        index += 1
        while index < len(lines) and (old < old_wanted or new < new_wanted):
            first = lines[index][:1]
            if first in (" ", "", "\r"):  # git reads an empty line as empty context
                old += 1
                new += 1
            elif first == "-":
                old += 1
                removed += 1
            elif first == "+":
                new += 1
                added += 1
            elif first != "\\":
                break
            index += 1
        if (old, new) != (old_wanted, new_wanted):
            problems.append(
                f"hunk {count} ({line[: line.index('@@', 2) + 2]}) declares {old_wanted} old and "
                f"{new_wanted} new lines but holds {old} and {new}"
            )
            break
    return _Hunks(count=count, added=added, removed=removed, problems=tuple(problems))


def _parse_section(text: str) -> PatchedFile:
    try:
        parsed = PatchSet(text, metadata_only=True)
    except UnidiffParseError as exc:
        raise PatchParseError(str(exc)) from exc
    except (ValueError, IndexError, TypeError, AttributeError) as exc:
        # unidiff assumes well-formed input; on hostile bytes it can fail in other ways.
        raise PatchParseError(f"unreadable diff ({type(exc).__name__})") from exc
    if len(parsed) != 1:
        raise PatchParseError(f"a 'diff --git' section holds {len(parsed)} file diffs")
    return parsed[0]


def parse_patch(raw: bytes) -> PatchInfo:
    """Parse a Git patch, section by section (unidiff reads the headers and counts; the hunk
    counts are checked here). Raises PatchParseError when it cannot be read."""
    if not raw.strip():
        return PatchInfo(changes=())
    sections = _split_sections(raw)
    if not sections:
        raise PatchParseError("no 'diff --git' section")
    changes = []
    for section in sections:
        section_text = section.decode("utf-8", "surrogateescape")
        hunks = _scan_hunks(section_text)
        header_text = section_text.split("\n@@", 1)[0] + "\n"
        # A section whose hunks disagree with their headers is read by its header alone: the
        # audit names it (a blocker), and nothing here guesses which lines were meant.
        patched = _parse_section(header_text if hunks.problems else section_text)
        names, _modes, old_mode, new_mode = _header(section_text)
        old = None if patched.is_added_file else _strip_prefix(patched.source_file, "a/")
        new = None if patched.is_removed_file else _strip_prefix(patched.target_file, "b/")
        header_lines = header_text.splitlines()
        symlink_target = None
        if new_mode == SYMLINK_MODE and new is not None:
            body = section_text.split("\n@@", 1)[1] if "\n@@" in section_text else ""
            added = [
                line[1:]
                for line in body.split("\n")[1:]
                if line.startswith("+") and line[1:].strip("\n")
            ]
            symlink_target = "".join(added).rstrip("\n")
        changes.append(
            FileChange(
                old_path=old,
                new_path=new,
                added_lines=hunks.added,
                removed_lines=hunks.removed,
                binary=bool(patched.is_binary_file),
                raw=section,
                hunks=hunks.count,
                old_mode=old_mode,
                new_mode=new_mode,
                rename=any(line.startswith("rename from ") for line in header_lines),
                copy=any(line.startswith("copy from ") for line in header_lines),
                binary_data="\nGIT binary patch\n" in section_text,
                header_names=tuple(names),
                symlink_target=symlink_target,
                hunk_problems=hunks.problems,
            )
        )
    return PatchInfo(changes=tuple(changes))


def section_problems(change: FileChange, index: int) -> list[str]:
    """What makes one section unsafe or useless; each message names the section."""
    label = f"section {index + 1} ({change.path!s})"
    problems: list[str] = []
    for name in dict.fromkeys((*change.paths, *change.header_names)):
        try:
            normalized = v.normalize_repo_path(name)
        except ValueError as exc:
            problems.append(f"{label}: {exc}")
            continue
        if normalized != name.rstrip("/"):
            problems.append(f"{label}: path {name!r} is not in normal form ({normalized})")
    for mode in (change.old_mode, change.new_mode):
        if mode is None:
            continue
        if mode == GITLINK_MODE:
            problems.append(f"{label}: submodules (gitlinks, mode 160000) are not supported")
        elif mode not in REGULAR_MODES and mode != SYMLINK_MODE:
            problems.append(f"{label}: unsupported file mode {mode}")
    if change.symlink_target is not None and change.new_path is not None:
        target = change.symlink_target
        base = posixpath.dirname(change.new_path) or "."
        problem = v.path_problem(target, base=base) if target else "empty symlink target"
        if problem:
            problems.append(f"{label}: symlink target {target!r} leaves the repository")
    if change.binary and not change.binary_data:
        problems.append(
            f"{label}: binary change without data (make the patch with `git diff --binary`)"
        )
    if not change.changes_something:
        problems.append(f"{label}: changes nothing (a header without hunks, or unreadable hunks)")
    return problems


def patch_problems(info: PatchInfo) -> list[str]:
    problems: list[str] = []
    for index, change in enumerate(info.changes):
        problems.extend(section_problems(change, index))
    return problems


def repository_path(workdir: str, path: str) -> str:
    """`path` (relative to workdir) as a normalized repository-relative path."""
    return v.normalize_repo_path(path, base=workdir)


def added_lines(change: FileChange) -> frozenset[int]:
    """The 1-based lines of the new file that a section adds or changes (its `+` lines)."""
    lines: set[int] = set()
    target = 0
    in_hunk = False
    for line in change.raw.decode("utf-8", "surrogateescape").splitlines():
        header = HUNK_HEADER.match(line)
        if header:
            target = int(header.group(3))
            in_hunk = True
            continue
        if not in_hunk or line.startswith("\\"):
            continue
        if line.startswith("+"):
            lines.add(target)
            target += 1
        elif line.startswith(" ") or line == "":
            target += 1
        elif not line.startswith("-"):
            in_hunk = False
    return frozenset(lines)
