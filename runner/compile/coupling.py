"""Coupling evidence (pure): what the held-out tests reach for that only the gold patch brings.

A fair task's tests exercise behaviour the instruction describes. Names and strings that the
tests reference and that exist only in the gold patch (not in the base tree, not in the
instruction) are what a reviewer must look at first: private names, new module paths, exact
error messages, internal constants, and files the gold patch adds that the tests read. Never a
blocker by itself: evidence for the verification round.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from runner.compile.codetokens import language_of, tokens
from runner.compile.patches import HUNK_HEADER, FileChange, PatchInfo
from runner.model.report import CouplingItem

MAX_ITEMS = 100
MAX_CANDIDATES = 300
# New-side text read per patch: real tests are far smaller; this bounds the grammars' work on a
# patch near the 20 MiB limit (about 1 s a MiB for Python-looking garbage).
MAX_READ_BYTES = 1024 * 1024
CODE_SUFFIXES = (".py", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".rb", ".java")


@dataclass(frozen=True)
class _Site:
    file: str
    line: int


@dataclass(frozen=True)
class Fragments:
    """A section's hunks, new side: each a contiguous piece of the new file (context and added
    lines, so a grammar reads the added ones in context) with, per row, its line number there
    and whether it is added."""

    pieces: list[tuple[str, list[tuple[int, bool]]]]
    size: int  # characters taken
    cut: bool  # the limit stopped the reading

    def added(self) -> Iterator[tuple[int, str]]:
        """(line number in the new file, text) of each added line taken."""
        for text, rows in self.pieces:
            for (number, is_added), line in zip(rows, text.split("\n"), strict=True):
                if is_added:
                    yield number, line


def fragments(change: FileChange, limit: int) -> Fragments:
    """At most `limit` characters of new-side text, cut at a line's end."""
    pieces: list[tuple[str, list[tuple[int, bool]]]] = []
    rows: list[tuple[int, bool]] = []
    lines: list[str] = []
    size = 0
    number = 0
    in_hunk = False
    cut = False
    # New-side text is at most the section's size: reading past 4 times the limit is waste.
    source = change.raw if len(change.raw) <= 4 * limit else change.raw[: 4 * limit]
    for raw in source.decode("utf-8", "replace").splitlines():
        if match := HUNK_HEADER.match(raw):
            if lines:
                pieces.append(("\n".join(lines), rows))
            rows, lines = [], []
            number = int(match.group(3))
            in_hunk = True
            continue
        if not in_hunk or raw.startswith(("+++", "---")):
            continue
        if raw.startswith(("+", " ")):
            if size + len(raw) > limit:
                cut = True
                break
            size += len(raw)
            rows.append((number, raw.startswith("+")))
            lines.append(raw[1:])
            number += 1
    if lines:
        pieces.append(("\n".join(lines), rows))
    return Fragments(pieces, size, cut or source is not change.raw)


def added_lines(change: FileChange) -> Iterator[tuple[int, str]]:
    """(line number in the new file, text) of each added line of one file's diff."""
    return fragments(change, len(change.raw)).added()


@dataclass(frozen=True)
class _Reading:
    found: dict[str, _Site]
    added: list[tuple[str, int, str]]  # (path, line number, text) of each added line read
    unread: int  # sections left (partly) unread past MAX_READ_BYTES of new-side text


@lru_cache(maxsize=8)
def _read(patch: PatchInfo) -> _Reading:
    """Every name and string literal the added lines hold (comments and docstrings left out,
    by the file's own grammar), with its first site, in the first MAX_READ_BYTES of the
    patch's new-side text. Cached: the audit and the repository lookup ask for the same
    patches."""
    found: dict[str, _Site] = {}
    added: list[tuple[str, int, str]] = []
    budget = MAX_READ_BYTES
    unread = 0
    for change in patch.changes:
        if budget <= 0:
            unread += 1
            continue
        path = change.new_path or change.old_path or ""
        language = language_of(path)
        taken = fragments(change, budget)
        added.extend((path, number, line) for number, line in taken.added())
        for text, rows in taken.pieces:
            for token in tokens(text, language):
                number, is_added = rows[token.row]
                if is_added:
                    key = "\0" + token.text if token.kind == "string" else token.text
                    found.setdefault(key, _Site(path, number))
        budget = 0 if taken.cut else budget - taken.size
        unread += taken.cut
    return _Reading(found, added, unread)


def _tokens(patch: PatchInfo) -> dict[str, _Site]:
    return _read(patch).found


def coupling_notes(tests: PatchInfo, gold: PatchInfo) -> list[str]:
    """What the evidence did not read (a patch past MAX_READ_BYTES of new-side text)."""
    notes = []
    for label, patch in (("test.patch", tests), ("gold.patch", gold)):
        unread = _read(patch).unread
        if unread:
            notes.append(
                f"coupling evidence read the first {MAX_READ_BYTES // (1024 * 1024)} MiB of "
                f"{label}'s new lines ({unread} section{'s' if unread != 1 else ''} not read "
                "to the end)"
            )
    return notes


def _module_names(path: str) -> list[str]:
    stem, suffix = posixpath.splitext(path)
    if suffix not in CODE_SUFFIXES:
        return []
    parts = [p for p in stem.split("/") if p not in ("", ".", "src", "lib")]
    names = []
    if len(parts) >= 2:
        names += [".".join(parts[-2:]), "/".join(parts[-2:])]
    return names


def _kind(token: str) -> str:
    if token.startswith("\0"):
        text = token[1:]
        return (
            "error-message" if (" " in text or text.rstrip()[-1:] in ".:!?") else "string-literal"
        )
    if token.startswith("_") and not token.startswith("__"):
        return "private-name"
    if token.isupper() and ("_" in token or len(token) >= 4):
        return "internal-constant"
    return "gold-only-name"


def candidates(tests: PatchInfo, gold: PatchInfo, instruction: str) -> list[str]:
    """The tokens the tests reference that the gold patch adds and the instruction does not
    name: what must be looked up in the base tree (strings without their marker)."""
    test_tokens = _tokens(tests)
    gold_tokens = _tokens(gold)
    out = []
    for token in test_tokens:
        if token not in gold_tokens:
            continue
        text = token.lstrip("\0")
        if _in_instruction(token, instruction):
            continue
        out.append(text)
        if len(out) >= MAX_CANDIDATES:
            break
    return out


def _in_instruction(token: str, instruction: str) -> bool:
    if token.startswith("\0"):
        return token[1:] in instruction
    return (
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(token)}(?![A-Za-z0-9_])", instruction) is not None
    )


def coupling(
    tests: PatchInfo, gold: PatchInfo, instruction: str, present_at_base: set[str]
) -> list[CouplingItem]:
    """The evidence, strongest kinds first."""
    test_tokens = _tokens(tests)
    gold_tokens = _tokens(gold)
    items: list[CouplingItem] = []
    for token, test_site in test_tokens.items():
        gold_site = gold_tokens.get(token)
        text = token.lstrip("\0")
        if gold_site is None or text in present_at_base or _in_instruction(token, instruction):
            continue
        items.append(
            CouplingItem(
                kind=_kind(token),
                name=text,
                test_file=test_site.file,
                test_line=test_site.line,
                gold_file=gold_site.file,
                gold_line=gold_site.line,
            )
        )
    # New modules and files of the gold patch that the tests import or read.
    added_files = [c.new_path for c in gold.changes if c.old_path is None and c.new_path]
    for test_path, number, text in _read(tests).added if added_files else ():
        for path in added_files:
            names = _module_names(path)
            module = next((n for n in names if n in text and n not in instruction), None)
            if path in instruction or posixpath.basename(path) in instruction:
                continue  # the instruction names it: part of the task's contract
            if module is not None:
                kind, name = "new-module", module
            elif not path.endswith(CODE_SUFFIXES) and (
                path in text or posixpath.basename(path) in text
            ):
                kind, name = "gold-only-file", path
            else:
                continue
            items.append(
                CouplingItem(
                    kind=kind,
                    name=name,
                    test_file=test_path,
                    test_line=number,
                    gold_file=path,
                    gold_line=1,
                )
            )
    order = {
        "private-name": 0,
        "new-module": 1,
        "gold-only-file": 2,
        "error-message": 3,
        "internal-constant": 4,
        "string-literal": 5,
        "gold-only-name": 6,
    }
    unique = {(i.kind, i.name): i for i in reversed(items)}
    ranked = sorted(unique.values(), key=lambda i: (order.get(i.kind, 9), i.test_file, i.test_line))
    return ranked[:MAX_ITEMS]
