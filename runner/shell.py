"""Shell quoting and `{tests}` expansion (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from runner.models import TESTS_PLACEHOLDER


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
