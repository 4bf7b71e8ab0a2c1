"""What every family of exploits shares: the task facts they are chosen from, the script
prelude (put, append, na, changed) and helpers that keep every task value a quoted word."""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from runner.model.shell import quote, words
from runner.runners.command import command_files, selector_files

NOT_APPLICABLE = 3
# The reward files Harbor and the runner read: code under test writing them must not count.
REWARD_JSON = (
    '{"reward": 1, "patch_applied": 1, "fail_to_pass": 1, "pass_to_pass": 1, '
    '"deterministic": 1, "setup_completed": 1}'
)
VERIFIER_FILES = (
    ("/logs/verifier/reward.json", REWARD_JSON),
    ("/logs/verifier/reward.txt", "1"),
)
TEST_BINARIES = ("jest", "vitest", "mocha", "ava", "tap", "tsx", "ts-node", "playwright")
PYTHON_WORDS = ("python", "python3", "pytest", "py.test", "tox", "nox", "uv", "hatch", "poetry")
NODE_WORDS = ("node", "npm", "npx", "yarn", "pnpm", "bun", "bunx", *TEST_BINARIES)
PY = (".py",)
EXIT_ZERO_PY = "import os\nos._exit(0)\n"
JS = (".js", ".cjs", ".mjs", ".ts", ".mts", ".cts", ".jsx", ".tsx")


@dataclass(frozen=True, kw_only=True)
class TaskFacts:
    """What the exploits are chosen from: all of it is in the bundle."""

    workdir: str  # normalized, "." for the repository root
    test_command: str | None  # None: a bundle compiled before its manifest recorded it
    toolchains: Sequence[str]
    held_out: Sequence[str]  # repository paths of the held-out tests
    gold_files: Sequence[str]  # repository paths the gold patch changes
    selectors: Sequence[str] = ()
    fail_to_pass: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True)
class Exploit:
    name: str
    family: str  # pytest | python | node | go | generic
    summary: str  # one sentence: what it tries
    script: str


_PRELUDE = r"""set -u
cd /app || exit 1
# put PATH BASE64: write a file (its directories created), content given as base64.
put() { mkdir -p -- "$(dirname -- "$1")" && printf '%s' "$2" | base64 -d > "$1"; }
# append PATH BASE64: add to an existing file.
append() { [ -f "$1" ] && printf '%s' "$2" | base64 -d >> "$1"; }
na() { echo "not applicable: $1"; exit 3; }
changed() { git -C /app status --porcelain --untracked-files=all 2>/dev/null | grep -q .; }
"""


def b64(text: str) -> str:
    return quote(base64.b64encode(text.encode()).decode())


def script(*lines: str) -> str:
    return _PRELUDE + "\n".join(lines) + "\n"


def command_words(facts: TaskFacts) -> list[str]:
    if not facts.test_command:
        return []
    return [posixpath.basename(w) for w in words(facts.test_command) if w]


def uses(facts: TaskFacts, names: Sequence[str]) -> bool:
    used = set(command_words(facts))
    return any(name in used for name in names)


def test_dirs(facts: TaskFacts) -> list[str]:
    """The directories of the held-out tests (and the workdir), as repository paths."""
    dirs = {facts.workdir}
    for path in facts.held_out:
        dirs.add(posixpath.dirname(path) or ".")
    return sorted(dirs)


def join(directory: str, name: str) -> str:
    return name if directory in (".", "") else f"{directory}/{name}"


def gold(facts: TaskFacts, suffixes: Sequence[str]) -> list[str]:
    """The reference solution's files with these suffixes (the code the tests import)."""
    return [p for p in facts.gold_files if p.endswith(tuple(suffixes)) and p not in facts.held_out]


def harness_targets(facts: TaskFacts) -> list[str]:
    """The files the harness is made of: the ones the test command runs, the held-out tests and
    the files the selectors name."""
    found = list(facts.held_out)
    if facts.test_command:
        found += command_files(facts.test_command, facts.workdir)
    found += selector_files(list(facts.selectors), facts.workdir)
    return list(dict.fromkeys(found))


def into_sources(paths: Sequence[str], payload: str, reason: str) -> list[str]:
    """Script lines adding `payload` to each of the fix's source files: appended where the file
    exists, the file written with it where the fix adds it (the tests import it either way)."""
    lines = [
        f"if [ -f {quote(p)} ]; then append {quote(p)} {b64(payload)}; "
        f"else put {quote(p)} {b64(payload)}; fi"
        for p in paths
    ]
    return [*lines, f"changed || na {quote(reason)}"]


def in_sources(
    sources: list[str], table: list[tuple[str, str, str]], *, family: str = "evidence"
) -> list[Exploit]:
    """(name, summary, payload) rows, each payload added to the fix's source files, as
    exploits of `family`."""
    reason = "no fix module to edit"
    return [
        Exploit(
            name=name,
            family=family,
            summary=summary,
            script=script(*into_sources(sources, payload, reason)),
        )
        for name, summary, payload in table
    ]
