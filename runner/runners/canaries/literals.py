"""A canary's literals (pure): how an expected value's text changes (numbers, strings,
booleans, each within its shape), and the literals a held-out file spells, which a canary may
take instead (runner.runners.canaries.core)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from random import Random
from typing import Literal

ScalarKind = Literal["number", "string", "bool"]


# ---- literals ------------------------------------------------------------------------------------

NUMBER = re.compile(
    r"^(?P<body>0[xX][0-9a-fA-F_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][+-]?\d+)?)(?P<suffix>[A-Za-z]\w*)?$"
)


def _offset(value: int, rng: Random) -> int:
    """`value` moved by 1 to 5 either way, never below 0: the same chance for each move, so that
    a literal a canary was made from is, seen from the canary, just another move of it. Five,
    not three: a test's copies take values within five of their pivot's, and a test with one
    number to change then still takes eight (three left it six, once the values were moves
    only)."""
    return value + rng.choice([d for d in range(-5, 6) if d and value + d >= 0])


_DECIMAL = re.compile(r"(?P<whole>\d*)(?P<dot>\.?)(?P<frac>\d*)(?P<exp>[eE][+-]?\d+)?")


def mutate_number(text: str, rng: Random) -> str | None:
    """Another number of the same shape: an integer moves by 1 to 5 either way (never below 0),
    a decimal by 1 to 5 in its last digit (its digits and exponent kept), a whole number written
    with an exponent becomes an integer (its suffix, `n`, `u32`, `f64`, is kept)."""
    found = NUMBER.match(text)
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


_TOKEN = re.compile(r"[A-Za-z]+")


def text_words(text: bytes) -> list[str]:
    """The alphabetic words a file spells anywhere (names, strings, comments), lowercased, in
    order of first use: what a changed string takes a word from."""
    found: dict[str, None] = {}
    for token in _TOKEN.findall(text.decode("utf-8", "replace")):
        found.setdefault(token.lower(), None)
        if len(found) >= 500:
            break
    return list(found)


def word_move(body: str, words: Sequence[str], rng: Random, among: bool = False) -> str | None:
    """The source text between a string literal's quotes with one of its words replaced by
    another word the file spells, written in the replaced word's case. A letter changed at random
    made words no project has ("HELLO X" -> "HEVLO X"), and code that kept only answers spelled
    with the project's words told such a canary from the test (an attack: 8 grades of 8). With
    `among`, only a word of `words` is replaced: the move then reads the same both ways (the
    value it came from is a move of it too). None for a body with an interpolation or no such
    word (the caller changes a letter then)."""
    if any(c in body for c in "{}$%"):
        return None
    known = {w.lower() for w in words} if among else None
    tokens = [
        m
        for m in _TOKEN.finditer(body)
        if not (m.start() and body[m.start() - 1] == "\\")
        and (known is None or m.group().lower() in known)
    ]
    if not tokens:
        return None
    token = rng.choice(tokens)
    text = token.group()
    pool = [w for w in words if w.isascii() and w.isalpha() and w != text.lower()]
    if not pool:
        return None
    word = rng.choice(pool)
    if text.isupper() and (len(text) > 1 or not text.islower()):
        word = word.upper()
    elif text[0].isupper():
        word = word.capitalize()
    return body[: token.start()] + word + body[token.end() :]


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
        head = len(text) - len(text.lstrip(_PREFIXES)) if prefix == "" else len(prefix)
        quote_chars = text[head:]
        quote = _quote_of(quote_chars)
        if quote is None:
            return None
        body = quote_chars[len(quote) : len(quote_chars) - len(quote)]
        changed = mutate_body(body, rng)
        if changed is None or changed == body:
            return None
        return text[: head + len(quote)] + changed + quote

    return mutate


_PREFIXES = "rRbBuUfF"  # a string literal's prefix letters (Python's)


def _quote_of(chars: str) -> str | None:
    """The quotes around `chars` (a string literal without its prefix), or None."""
    for quote in ('"""', "'''", '"', "'", "`"):
        fits = len(chars) >= 2 * len(quote)
        if fits and chars.startswith(quote) and chars.endswith(quote):
            return quote
    return None


def string_quote(text: str) -> str | None:
    """The quotes of a string literal, its prefix (`b`, `r`...) left out; None: not one."""
    return _quote_of(text.lstrip(_PREFIXES))


def string_body(text: str) -> str | None:
    """The body of a string literal without a prefix; None for any other text."""
    quote = string_quote(text)
    if quote is None or text[: len(text) - len(text.lstrip(_PREFIXES))]:
        return None
    return text[len(quote) : len(text) - len(quote)]


_LITERAL = re.compile(r"""'[^'\\\n]*'|"[^"\\\n]*"|(?<![\w.])\d+(?:\.\d+)?(?![\w.])""")


def string_words(text: bytes) -> list[str]:
    """The alphabetic words the string literals of `text` spell, lowercased, in order of first
    use: what a per-test canary's string takes a word from (the words of a string the test
    compares with, not those of names or keywords: a copy's value spelling `import` or `tobe`
    read as made)."""
    found: dict[str, None] = {}
    for literal in file_literals(text)["string"]:
        for token in _TOKEN.findall(string_body(literal) or ""):
            found.setdefault(token.lower(), None)
    return list(found)[:500]


def file_literals(text: bytes) -> dict[ScalarKind, list[str]]:
    """The string and number literals a file spells (a plain scan: only their texts are used,
    as candidates a scalar's own form must fit), by kind, in order of first use."""
    found: dict[ScalarKind, dict[str, None]] = {"string": {}, "number": {}}
    for token in _LITERAL.findall(text.decode("utf-8", "replace")):
        kind: ScalarKind = "number" if token[0].isdigit() else "string"
        found[kind].setdefault(token, None)
    return {kind: list(values)[:200] for kind, values in found.items()}
