"""Shell quoting and `{tests}` expansion (pure)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from runner.model.task import TESTS_PLACEHOLDER


def quote(value: str) -> str:
    """Always single-quote, as the seed shows (`bun test 'tests/a.test.ts'`)."""
    return "'" + value.replace("'", "'\\''") + "'"


def expand_tests(command: str, selectors: Sequence[str]) -> str:
    return command.replace(TESTS_PLACEHOLDER, " ".join(quote(s) for s in selectors))


def quote_state_at(command: str, index: int) -> str | None:
    """The quoting in force at `index`: None (unquoted), "'", '"' or "$'"."""
    state: str | None = None
    i = 0
    while i < index:
        char = command[i]
        if state is None:
            if char == "\\":
                i += 2
                continue
            if char == "$" and command.startswith("$'", i):
                state = "$'"
                i += 2
                continue
            if char in ("'", '"'):
                state = char
        elif state == "'":
            if char == "'":
                state = None
        elif state == "$'":
            if char == "\\":
                i += 2
                continue
            if char == "'":
                state = None
        else:  # double quotes
            if char == "\\":
                i += 2
                continue
            if char == '"':
                state = None
        i += 1
    return state


def words(command: str) -> list[str]:
    """The shell words of `command`, for inspection only (quotes removed, escapes undone,
    operators split off). Linear in the length: shlex.split is quadratic on long words (a
    5 MB word took minutes)."""
    return [token for token in _tokens(command) if token is not None]


def commands(command: str) -> list[list[str]]:
    """The simple commands of `command` (split at `;`, `&`, `|` and newlines outside quotes),
    each its words, for inspection only; linear in the length, as `words`."""
    found: list[list[str]] = [[]]
    for token in _tokens(command):
        if token is None:
            if found[-1]:
                found.append([])
        else:
            found[-1].append(token)
    return [c for c in found if c]


def _tokens(command: str) -> Iterator[str | None]:
    """The words of `command`, and None where an operator ends a simple command."""
    current: list[str] = []
    in_word = False
    i, n = 0, len(command)
    while i < n:
        char = command[i]
        if char == "\\" and i + 1 < n:
            current.append(command[i + 1])
            in_word = True
            i += 2
            continue
        if char in "'\"":
            end = command.find(char, i + 1)
            if end < 0:
                end = n
            body = command[i + 1 : end]
            if char == '"':
                body = body.replace('\\"', '"').replace("\\\\", "\\")
            current.append(body)
            in_word = True
            i = end + 1
            continue
        if char.isspace() or char in ";&|()<>":
            if in_word:
                yield "".join(current)
                current, in_word = [], False
            if char in ";&|\n":
                yield None
            i += 1
            continue
        current.append(char)
        in_word = True
        i += 1
    if in_word:
        yield "".join(current)
