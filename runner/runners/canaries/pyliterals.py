"""How a Python literal of an expected value changes (pure): a number moves, a string or bytes
literal gets one letter or digit changed (a raw string is left alone), a bool flips; each change
is checked to give another value."""

from __future__ import annotations

import ast
import io
import tokenize
from random import Random

from runner.runners.canaries.literals import mutate_number, mutate_text, quoted


def string_mutation(text: str, rng: Random) -> str | None:
    """A string or bytes literal (implicit concatenation included): one of its pieces changed."""
    try:
        pieces = [
            t
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type == tokenize.STRING
        ]
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        return None
    if not pieces:
        return None
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    order = list(pieces)
    rng.shuffle(order)
    for piece in order:
        begin = starts[piece.start[0] - 1] + piece.start[1]
        end = starts[piece.end[0] - 1] + piece.end[1]
        token = text[begin:end]
        prefix = token[: len(token) - len(token.lstrip("rRbBuU"))]
        if "r" in prefix.lower():
            continue  # a raw string's backslashes are its own: leave it
        changed = quoted(mutate_text)(token, rng)
        if changed is None:
            continue
        candidate = text[:begin] + changed + text[end:]
        try:
            if ast.literal_eval(candidate.strip()) == ast.literal_eval(text.strip()):
                continue
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            continue
        return candidate
    return None


def python_number(text: str, rng: Random) -> str | None:
    changed = mutate_number(text, rng)
    if changed is None:
        return None
    try:
        return changed if ast.literal_eval(changed) != ast.literal_eval(text) else None
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return None
