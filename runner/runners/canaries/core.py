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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Literal

ScalarKind = Literal["number", "string", "bool"]
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
    line: int  # 0-based line the text goes before
    text: str
    mutation: str
    # The literals it changed, (start, end) in the file -> its text there: a copy made from
    # this one starts from them (derive: the unit's first copy is its others' pivot).
    literals: tuple[tuple[int, int, str], ...] = ()


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


# ---- literals ------------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"^(?P<body>0[xX][0-9a-fA-F_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][+-]?\d+)?)(?P<suffix>[A-Za-z]\w*)?$"
)


def _offset(value: int, rng: Random) -> int:
    """`value` moved by 1 to 3 either way, never below 0: the same chance for each move, so that
    a literal a canary was made from is, seen from the canary, just another move of it."""
    return value + rng.choice([d for d in (-3, -2, -1, 1, 2, 3) if value + d >= 0])


_DECIMAL = re.compile(r"(?P<whole>\d*)(?P<dot>\.?)(?P<frac>\d*)(?P<exp>[eE][+-]?\d+)?")


def mutate_number(text: str, rng: Random) -> str | None:
    """Another number of the same shape: an integer moves by 1 to 3 either way (never below 0),
    a decimal by 1 to 3 in its last digit (its digits and exponent kept), a whole number written
    with an exponent becomes an integer (its suffix, `n`, `u32`, `f64`, is kept)."""
    found = _NUMBER.match(text)
    if not found:
        return None
    body, suffix = found.group("body"), found.group("suffix") or ""
    clean = body.replace("_", "")
    if clean == "0" and suffix[:1] in ("o", "O", "b", "B", "x", "X"):
        return None  # an octal or binary literal: left alone
    if clean.lower().startswith("0x"):
        try:
            return hex(_offset(int(clean, 16), rng)) + suffix
        except ValueError:
            return None
    parts = _DECIMAL.fullmatch(clean)
    if parts is None or not (parts["whole"] or parts["frac"]):
        return None
    if parts["exp"] and float(clean).is_integer():
        # `1e3` is a whole number where a language takes it for one (Go's integer constants).
        return f"{_offset(int(float(clean)), rng)}{suffix}"
    whole, frac = parts["whole"], parts["frac"]
    digits = str(_offset(int(whole + frac), rng)).rjust(len(whole + frac), "0")
    head = digits[: len(digits) - len(frac)].lstrip("0")
    if not head and whole:
        head = "0"
    out = head + parts["dot"] + digits[len(digits) - len(frac) :] + (parts["exp"] or "")
    return None if out == clean else out + suffix


_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
_DIGITS = "0123456789"


def mutate_text(body: str, rng: Random) -> str | None:
    """The source text between a string literal's quotes with one letter or digit changed to
    another of its kind (never inside an escape sequence); an empty string gets one letter."""
    positions = []
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            index += 2
            continue
        if char.isascii() and char.isalnum():
            positions.append(index)
        index += 1
    if not positions:
        return None if body else rng.choice("abcdefgh")
    at = rng.choice(positions)
    char = body[at]
    pool = _LOWER if char in _LOWER else _UPPER if char in _UPPER else _DIGITS
    other = rng.choice([c for c in pool if c != char])
    return body[:at] + other + body[at + 1 :]


def flip_bool(text: str, rng: Random) -> str | None:
    """true and false (True and False), the other way round."""
    return {"true": "false", "false": "true", "True": "False", "False": "True"}.get(text)


def mutate_string(text: str, rng: Random) -> str | None:
    """A quoted string literal with one letter or digit of its body changed."""
    return quoted(mutate_text)(text, rng)


def quoted(
    mutate_body: Callable[[str, Random], str | None], prefix: str = ""
) -> Callable[[str, Random], str | None]:
    """A string literal's mutation: its prefix and quotes kept, its body changed."""

    def mutate(text: str, rng: Random) -> str | None:
        head = len(text) - len(text.lstrip("rRbBuUfF")) if prefix == "" else len(prefix)
        quote_chars = text[head:]
        for quote in ('"""', "'''", '"', "'", "`"):
            if (
                quote_chars.startswith(quote)
                and quote_chars.endswith(quote)
                and len(quote_chars) >= 2 * len(quote)
            ):
                body = quote_chars[len(quote) : len(quote_chars) - len(quote)]
                changed = mutate_body(body, rng)
                if changed is None or changed == body:
                    return None
                return text[: head + len(quote)] + changed + quote
        return None

    return mutate


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
    unit: Unit, words: Sequence[str], taken: set[str], rng: Random, count: int = 24
) -> list[str]:
    """Names a copy of `unit` could take, in the file's own style and from its own words: a
    word added, one replaced, one dropped. Never a name the file has."""
    parts = _split(unit.name, unit.style, unit.prefix)
    pool = [w for w in words if w not in {p.lower() for p in parts}] or list(words)
    if unit.style == "camel":
        pool = [w for w in pool if w.isalpha()]
    found: dict[str, None] = {}
    for _ in range(count * 6):
        if len(found) >= count or not pool:
            break
        choice = list(parts)
        moves = ["add", "add"]
        if len(pool) >= 2:
            moves.append("add two")  # a short name from few words has few one-word variants
        if len(parts) >= 2:
            moves.append("replace")
        if len(parts) >= 3:
            moves.append("drop")
        move = rng.choice(moves)
        word = rng.choice(pool)
        if move == "add":
            choice.insert(rng.randint(0, len(choice)), word)
        elif move == "add two":
            for extra in rng.sample(pool, 2):
                choice.insert(rng.randint(0, len(choice)), extra)
        elif move == "replace":
            choice[rng.randrange(len(choice))] = word
        else:
            del choice[rng.randrange(len(choice))]
            if rng.random() < 0.5:
                choice.insert(rng.randint(0, len(choice)), word)
        name = _join(choice, unit.style, unit.prefix, unit.name)
        if name and name not in taken and name != unit.name and _valid(name, unit):
            found.setdefault(name, None)
    return list(found)


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
    site: Site,
    rng: Random,
    pivot: Copy | None = None,
) -> Copy | None:
    """`unit`'s lines with `name` for its name and one literal of every slot of `site`
    changed, placed before or after it (the file's spacing kept); made from `pivot` (another
    copy of the unit: its literals kept, then changed again), never back to the test's own
    literal. None when a literal cannot be changed."""
    literals = {(start, end): text for start, end, text in (pivot.literals if pivot else ())}
    originals: dict[tuple[int, int], str] = {}
    for slot in site.slots:
        scalars = list(slot)
        rng.shuffle(scalars)
        for scalar in scalars:
            span = (scalar.start, scalar.end)
            now = literals.get(span, scalar.text)
            changed = scalar.mutate(now, rng)
            if changed is not None and changed not in (now, scalar.text):
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
    if rng.random() < 0.5:
        line, inserted = unit.first_line, block + blank
    else:
        line, inserted = unit.end_line, blank + block
        if unit.end_line == len(lines) and lines and not lines[-1].endswith(b"\n"):
            inserted = b"\n" + inserted
    where = f"line {site.line}"
    return Copy(
        unit=unit,
        name=name,
        line=line,
        text=inserted.decode("utf-8", "surrogateescape"),
        mutation=f"{where}: " + "; ".join(changes[:3]) + ("; ..." if len(changes) > 3 else ""),
        literals=tuple((start, end, text) for (start, end), text in sorted(literals.items())),
    )


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
