"""What every language's canaries share (pure): the held-out tests they copy (Unit), the
expected values they change (Site, Scalar), the names they take from the file's own words, and
the copy itself: the test's lines, renamed, one expected value changed, placed beside it.

A canary must fail with the reference solution whatever else the code does, and pass only when
the code under test reports what the expected value was changed to: so only an equality between
the tested value and a literal is changed, only in a statement every run of the test reaches
(the test's own body, not a branch or a loop the code decides), and only on a line test.patch
wrote (an old assertion's answer is the base code's, which a forger can compute)."""

from __future__ import annotations

import keyword
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Literal

from runner.runners.canaries.literals import (
    NUMBER,
    ScalarKind,
    quoted,
    string_body,
    string_quote,
    word_move,
)

NameStyle = Literal["snake", "camel", "prose"]


@dataclass(frozen=True)
class Scalar:
    """One literal of an expected value: its bytes in the file and how to change it."""

    start: int
    end: int
    kind: ScalarKind
    text: str
    # Changes the literal's source text (None: no change keeps it valid and different).
    mutate: Callable[[str, Random], str | None]


@dataclass(frozen=True)
class Site:
    """An expected value a canary can change: one slot per value the test compares (a plain
    assertion has one; a parametrized column or a table has one per case), each slot a choice
    of literals (the leaves of a list or an object): a canary changes one literal of every slot,
    so that every case of it fails."""

    slots: tuple[tuple[Scalar, ...], ...]
    line: int  # 1-based line of the assertion (for the report)


@dataclass(frozen=True)
class Unit:
    """One held-out test a canary can copy."""

    file: str  # repository path
    name: str  # as written (a function's name, a description)
    name_span: tuple[int, int]  # bytes of the name in the file (inside the quotes for prose)
    containers: tuple[str, ...]  # enclosing classes or describe blocks, outermost first
    first_line: int  # 0-based first line of the block (decorators included)
    end_line: int  # 0-based line after the block
    gap: int  # blank lines that separate it from its neighbours
    sites: tuple[Site, ...]
    style: NameStyle
    prefix: str = ""  # what every name of the runner starts with ("test_", "Test")


@dataclass(frozen=True)
class Copy:
    unit: Unit
    name: str
    # Its text placed before the test (inserted before unit.first_line) or after it (before
    # unit.end_line), the file's spacing kept either way: which one, and its order among the
    # test's other copies there, derive decides for the whole group (place_group).
    before: str
    after: str
    mutation: str
    # The literals it changed, (start, end) in the file -> its text there: a copy made from
    # this one starts from them (derive: the unit's first copy is its others' pivot).
    literals: tuple[tuple[int, int, str], ...] = ()
    site: int = 0  # which of the unit's sites it changed


@dataclass(frozen=True)
class Scope:
    """What a runner's selection runs of one held-out file: whether it runs the file at all
    (`why` when it cannot run a canary there), the classes or blocks it runs (None: all), and
    the names a test must have to run (a `-run` pattern)."""

    selected: bool
    why: str | None = None
    containers: frozenset[str] | None = None
    name_ok: Callable[[str], bool] | None = None


ALL = Scope(selected=True)


@dataclass
class FileTests:
    """What a language engine found in one held-out file."""

    units: list[Unit] = field(default_factory=list)
    names: set[str] = field(default_factory=set)  # every test name in the file
    words: list[str] = field(default_factory=list)  # the file's own words, for new names
    why_none: str | None = None  # set when the file has no unit


# ---- names ---------------------------------------------------------------------------------------

_STOP = frozenset(
    {
        "self", "cls", "test", "tests", "assert", "expect", "equal", "equals", "def", "return",
        "const", "let", "var", "func", "true", "false", "none", "null", "undefined", "await",
        "async", "import", "from", "require", "new", "the", "and", "for", "with", "not", "is",
        "it", "to", "be", "err", "nil", "fatal", "fatalf", "errorf", "error", "str", "int",
        "describe", "should", "case", "cases", "want", "got", "tt", "tc", "fn", "pub", "mod",
        "use", "unwrap", "toBe", "tobe", "toequal", "strictequal", "deepstrictequal", "ok",
    }
)  # fmt: skip
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def words_of(names: Sequence[str]) -> list[str]:
    """The lowercase words of identifiers and descriptions, in order of first use, without the
    words every test file has (test, assert, expect, self...)."""
    seen: dict[str, None] = {}
    for name in names:
        for part in re.split(r"[^A-Za-z]+", name):
            for word in _WORD.findall(part):
                low = word.lower()
                if 2 <= len(low) <= 12 and low not in _STOP and not keyword.iskeyword(low):
                    seen.setdefault(low, None)
    return list(seen)


def _split(name: str, style: NameStyle, prefix: str) -> list[str]:
    rest = name[len(prefix) :] if prefix and name.startswith(prefix) else name
    if style == "snake":
        return [w for w in rest.split("_") if w]
    if style == "camel":
        return re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+|_", rest) or ([rest] if rest else [])
    return rest.split(" ")


def _join(parts: Sequence[str], style: NameStyle, prefix: str, original: str) -> str:
    if style == "snake":
        return prefix + "_".join(parts)
    if style == "camel":
        return prefix + "".join(p[:1].upper() + p[1:] for p in parts)  # a word of its own is kept
    return " ".join(parts)


def new_names(
    unit: Unit,
    words: Sequence[str],
    taken: set[str],
    rng: Random,
    count: int = 24,
    elsewhere: Collection[str] | None = None,
) -> list[str]:
    """Names a copy of `unit` could take, in the file's own style and from its own words: a
    word added, one replaced, one dropped. Never a name the file has.

    With `elsewhere` (the lowercase words the file spells outside this name), a word is taken
    out of the name only if it is one of them. The pivot is named so: a copy brings in a word
    of the file, which the file then spells twice or more, and a test whose pivot took out a
    word only its name spells is the one member with a word spelled once (measured: "the member
    with the rarest word" found a pytest file's test 2.5 times as often as a blind pick)."""
    parts = _split(unit.name, unit.style, unit.prefix)
    # A word the name has only when the file spells no other (`test_text_text` from a file that
    # spells two words: a repeated word then marks a copy, measured on such files; without it
    # they get no canary at all).
    pool = [w for w in words if w not in {p.lower() for p in parts}] or list(words)
    if unit.style == "camel":
        pool = [w for w in pool if w.isalpha()]
    movable = [i for i, part in enumerate(parts) if elsewhere is None or _spelled(part, elsewhere)]
    found: dict[str, None] = {}
    for _ in range(count * 6):
        if len(found) >= count or not pool:
            break
        choice = list(parts)
        # A word added, replaced or dropped, each as likely (dropped only from a name of two
        # words or more): the name a copy was made from is, seen from the copy, just another
        # move of it (a name made mostly by adding words is the one with the fewest).
        moves = ["add"] + (["replace"] if movable else [])
        moves += ["drop"] if len(parts) >= 2 and movable else []
        move = rng.choice(moves)
        word = rng.choice(pool)
        if move == "add":
            choice.insert(rng.randint(0, len(choice)), word)
        elif move == "replace":
            choice[rng.choice(movable)] = word
        else:
            del choice[rng.choice(movable)]
        name = _join(choice, unit.style, unit.prefix, unit.name)
        if name and name not in taken and name != unit.name and _valid(name, unit):
            found.setdefault(name, None)
    return list(found)


def spelled_elsewhere(text: bytes, name: str) -> frozenset[str]:
    """The lowercase words `text` spells more often than the name `name` does once."""
    counts = Counter(_words_in(text.decode("utf-8", "replace")))
    own = Counter(_words_in(name))
    return frozenset(w for w, n in counts.items() if n > own[w])


def _words_in(text: str) -> list[str]:
    return [w.lower() for token in re.findall(r"[A-Za-z]+", text) for w in _WORD.findall(token)]


def _spelled(part: str, elsewhere: Collection[str]) -> bool:
    words = _words_in(part)
    return bool(words) and all(w in elsewhere for w in words)


def _valid(name: str, unit: Unit) -> bool:
    if unit.style == "prose":
        return bool(name.strip()) and "\\" not in name and "'" not in name and '"' not in name
    return name.isidentifier() and name.startswith(unit.prefix)


# ---- the copy ------------------------------------------------------------------------------------


def copy_unit(
    unit: Unit,
    source: bytes,
    lines: Sequence[bytes],
    name: str,
    site_index: int,
    rng: Random,
    pivot: Copy | None = None,
    taken: Mapping[tuple[int, int], set[str]] | None = None,
    words: Sequence[str] = (),
) -> Copy | None:
    """`unit`'s lines with `name` for its name and one literal of every slot of its site
    `site_index` changed, to be placed before or after it (the file's spacing kept). Made from
    `pivot` (the unit's first copy), it changes again each literal the pivot changed, and
    nothing else: every member of the group then differs from the pivot in the same places, by
    one move each. A new value is never the test's own, nor one a member of the group has there
    (`taken`). It is always a move of the one it replaces (a number by 1 to 5; one word of a
    string, among `words`, for another of them): the pivot's value is one move from the test's,
    as each copy's is from the pivot's. A literal of the file's own, taken half the time, left
    the test the one member whose value was not a move of the pivot's (an attack: 1.9 times a
    blind pick over 22 files, 4 on a Go table). None when a literal cannot be changed."""
    site = unit.sites[site_index]
    literals = {(start, end): text for start, end, text in (pivot.literals if pivot else ())}
    originals: dict[tuple[int, int], str] = {}
    for slot in site.slots:
        scalars = [s for s in slot if (s.start, s.end) in literals] or list(slot)
        rng.shuffle(scalars)
        for scalar in scalars:
            span = (scalar.start, scalar.end)
            now = literals.get(span, scalar.text)
            avoid = {now, scalar.text, *((taken or {}).get(span, ()))}
            changed = new_value(scalar, now, avoid, {}, rng, words, among=True)
            if changed is not None:
                literals[span] = changed
                originals[span] = scalar.text
                break
        else:
            return None
    for found in (s for site in unit.sites for slot in site.slots for s in slot):
        originals.setdefault((found.start, found.end), found.text)
    edits = [(unit.name_span[0], unit.name_span[1], name)]
    edits += [(start, end, text) for (start, end), text in sorted(literals.items())]
    changes = [f"{originals[span]} -> {text}" for span, text in sorted(literals.items())]
    block_start = sum(len(line) for line in lines[: unit.first_line])
    block_end = sum(len(line) for line in lines[: unit.end_line])
    block = source[block_start:block_end]
    for start, end, new in sorted(edits, reverse=True):
        if not block_start <= start <= end <= block_end:
            return None
        block = block[: start - block_start] + new.encode() + block[end - block_start :]
    if not block.endswith(b"\n"):
        block += b"\n"
    blank = b"\n" * unit.gap
    after = blank + block
    if unit.end_line == len(lines) and lines and not lines[-1].endswith(b"\n"):
        after = b"\n" + after
    where = f"line {site.line}"
    return Copy(
        unit=unit,
        name=name,
        before=(block + blank).decode("utf-8", "surrogateescape"),
        after=after.decode("utf-8", "surrogateescape"),
        mutation=f"{where}: " + "; ".join(changes[:3]) + ("; ..." if len(changes) > 3 else ""),
        literals=tuple((start, end, text) for (start, end), text in sorted(literals.items())),
        site=site_index,
    )


def new_value(
    scalar: Scalar,
    now: str,
    avoid: set[str],
    natural: Mapping[ScalarKind, Sequence[str]],
    rng: Random,
    words: Sequence[str] = (),
    among: bool = False,
) -> str | None:
    """Another text for `scalar` (its value now `now`) that is none of `avoid`: half the time
    a literal of `natural` (the file's own, by kind), requoted as the scalar is, else a move of
    `now` (a string's: one of its words replaced by another of `words`, only one of `words` with
    `among`; else a letter changed)."""
    own = [v for v in (_requoted(scalar, n) for n in natural.get(scalar.kind, ())) if v]
    own = [v for v in dict.fromkeys(own) if v not in avoid]
    if own and rng.random() < 0.5:
        return rng.choice(own)
    moves = [scalar.mutate]
    if scalar.kind == "string" and words:
        moves.insert(0, quoted(lambda body, r: word_move(body, words, r, among)))
    for move in moves:
        for _ in range(8):
            changed = move(now, rng)
            if changed is not None and changed not in avoid:
                return changed
    return rng.choice(own) if own else None


def _requoted(scalar: Scalar, literal: str) -> str | None:
    """`literal` (a literal's text found in the file) in `scalar`'s own form: a string's body
    between the scalar's quotes, a number of the scalar's shape (its suffix, a decimal point or
    none); None when it does not fit."""
    if scalar.kind == "bool":
        return None
    if scalar.kind == "number":
        mine, theirs = NUMBER.match(scalar.text), NUMBER.match(literal)
        if not mine or not theirs or (mine.group("suffix") or "") != (theirs.group("suffix") or ""):
            return None
        if ("." in mine.group("body")) != ("." in theirs.group("body")):
            return None
        if mine.group("body").lower().startswith("0x") or "e" in theirs.group("body").lower():
            return None
        return literal
    body = string_body(literal)
    quote = string_quote(scalar.text)
    unsafe = ("\\", "\n", "'", '"', "`", "$", "{")
    if body is None or quote is None or any(c in body for c in unsafe):
        return None
    head = scalar.text[: scalar.text.index(quote)]
    return f"{head}{quote}{body}{quote}"


def spacing(lines: Sequence[bytes], first: int, end: int, default: int) -> int:
    """The blank lines the file puts between this block (lines first..end-1, 0-based) and its
    siblings: those above it, unless it opens its enclosing block (then those below it, unless
    it also closes it: then `default`)."""
    at = first - 1
    while at >= 0 and not lines[at].strip():
        at -= 1
    above = first - 1 - at
    previous = lines[at].rstrip() if at >= 0 else b""
    if at >= 0 and not previous.endswith((b"{", b"(", b"[", b":")):
        return above
    after = end
    while after < len(lines) and not lines[after].strip():
        after += 1
    following = lines[after].strip() if after < len(lines) else b""
    if following and not following.startswith((b"}", b")", b"]")):
        return after - end
    return default


def split_lines(source: bytes) -> list[bytes]:
    return source.splitlines(keepends=True)


def line_of(source: bytes, offset: int) -> int:
    """The 0-based line of a byte offset."""
    return source.count(b"\n", 0, offset)
