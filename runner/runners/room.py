"""What every test runner's room answers (pure), and the defaults most rooms keep.

A room is one module of this package holding one runner whole: how a test command starts it,
the shape of its selectors (and, from the vocabulary, what it prints when a selector selected
nothing), how its output says a test ended (for the progress display only), what `init`
proposes for a repository it runs, the exploits specific to it, and whether the project's hack
corpus proves its per-test evidence. Its recorder hooks are `dockerfiles/verifier/hooks/<name>/`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from runner.model.shell import words
from runner.runners.canaries.core import ALL, FileTests, Scope, Unit
from runner.runners.kit import Exploit, TaskFacts
from runner.runners.vocabulary import VOCABULARY, RunnerSignals


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """What the repository's files suggest: its toolchains, its setup and test commands, and
    the runner that takes the selectors ("" when none is known)."""

    toolchains: list[str]
    setup_command: str
    test_command: str
    runner: str
    found: list[str] = field(default_factory=list)  # the files it read, for the author


# One test's end in the spec reporters' output (jest, vitest, node --test, mocha, bun): a mark,
# then the name (vitest marks a failure with U+00D7).
SPEC_MARKS = {"✓": "passed", "✔": "passed", "√": "passed", "✕": "failed", "✖": "failed",
              "\u00d7": "failed", "○": "skipped", "↓": "skipped", "﹣": "skipped"}  # fmt: skip
_SPEC_LINE = re.compile(r"^\s*([" + "".join(SPEC_MARKS) + r"]) ")
_JS_TEST_FILE = re.compile(r"\.(test|spec)\.[cm]?[jt]sx?$")


def spec_outcome(line: str) -> str | None:
    found = _SPEC_LINE.match(line)
    return SPEC_MARKS[found.group(1)] if found else None


class Room:
    """One test runner. `name` is its key in the vocabulary (and in evidence and census files)."""

    name: ClassVar[str]
    # Proved: a test named in tests/integration/proofs.py grades every canned exploit of a task
    # of this runner through `grade`, on a bundle whose policy keeps every change, on every
    # change to the verifier; test_verdicts.py keeps this flag equal to the runners proved.
    # Where a task's fail-to-pass runs are judged by proved runners alone, an exploit the patch
    # policy leaves in the tree is proved, not run again.
    proven: ClassVar[bool] = False
    # The order init asks the rooms in (lower first): the most specific files first.
    init_order: ClassVar[int] = 100
    # Toolchains whose tasks get this room's exploits whatever the command starts.
    exploit_toolchains: ClassVar[frozenset[str]] = frozenset()

    @property
    def signals(self) -> RunnerSignals:
        return VOCABULARY.runners[self.name]

    def starts(self, names: Sequence[str], index: int) -> bool:
        """Whether the command's word at `index` (base names of its words) starts this runner."""
        return False

    def selector_path(self, selector: str) -> str | None:
        """The path a selector names, relative to the workdir, or None when it names none (a
        pattern, a test name, a module, an import path). The helper reads selectors the same
        way (`selector_path` in verifier.pl), by the vocabulary's selector kind."""
        if not selector or selector.startswith("-"):
            return None
        if self.signals.selector != "file":
            return None
        return file_selector_path(selector)

    def selector_names(self, selector: str) -> list[str]:
        """Names a selector adds to its file, each of which must occur in that file."""
        return []

    def outcome(self, line: str) -> str | None:
        """The outcome ("passed", "failed", "skipped") one line of its output reports for one
        test, or None. For the progress display only: nothing judges by it."""
        return spec_outcome(line)

    def line_outcomes(self, line: str) -> list[str]:
        """Every outcome one whole line reports (most lines report one test at most)."""
        found = self.outcome(line)
        return [found] if found else []

    def partial_outcomes(self, line: str) -> list[str]:
        """What a line that has not ended yet already reports (pytest's progress line grows a
        character per test)."""
        return []

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        """init: the commands for a repository whose head commit has these files at its root
        (its dependency manifests and lockfiles, by the vocabulary), or None when this runner
        is not the one they suggest."""
        return None

    def init_selectors(self, paths: Sequence[str]) -> list[str]:
        """The selectors naming these test files: the files themselves by default."""
        return list(dict.fromkeys(paths))

    def is_test_file(self, path: str) -> bool:
        """A file the runner runs as tests, not a fixture beside them."""
        return bool(_JS_TEST_FILE.search(posixpath.basename(path)))

    def exploits(self, facts: TaskFacts) -> list[Exploit]:
        """The hack gate's exploits specific to this runner (the toolchains' own families are
        chosen for every task of the toolchain)."""
        return []

    # ---- canaries (runner.runners.canaries) ----------------------------------------------------

    # Whether the room derives canaries: its engine reads its tests and its reporter's ids.
    canaries_supported: ClassVar[bool] = False

    def canary_file(self, path: str) -> bool:
        """A held-out file whose tests this runner runs (a repository path)."""
        return self.is_test_file(path)

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        """The tests of a held-out file a canary can copy (its language's engine)."""
        return FileTests(why_none=f"{self.name} has no canaries")

    # The runner's options that select tests by name: a copy's new name may not match them.
    name_options: ClassVar[tuple[str, ...]] = ()

    def canary_scope(self, path: str, command: str, selectors: Sequence[str]) -> Scope:
        """What the fail-to-pass selection runs of the held-out file `path` (relative to the
        workdir): none when the command selects by name, else what its selectors run."""
        if option := selects_by_name(command, self.name_options):
            return Scope(selected=False, why=f"the test command selects tests by name ({option})")
        return self.selection_scope(path, selectors)

    def selection_scope(self, path: str, selectors: Sequence[str]) -> Scope:
        """By default, the file when a selector names it, its directory, or a pattern that
        matches it."""
        if not selectors:
            return ALL
        for selector in selectors:
            named = self.selector_path(selector)
            target = (named or selector).rstrip("/")
            if path == target or path.startswith(target + "/") or target in ("", "."):
                return ALL
            if named is None and _pattern_matches(selector, path):
                return ALL
        return Scope(selected=False)

    def canary_id(self, path: str, unit: Unit, name: str) -> str:
        """A pattern (Python and Perl read it alike) the ids of a copy's tests match: its file
        ` > ` its blocks ` > ` its name, as the spec reporters' (the file's name alone: a
        runner's root may be below the workdir; copies take names no held-out file has)."""
        return (
            r"(?:^|/)"
            + re.escape(posixpath.basename(path))
            + " > "
            + "".join(re.escape(c) + " > " for c in unit.containers)
            + re.escape(name)
            + "$"
        )


def _pattern_matches(pattern: str, path: str) -> bool:
    """A file-pattern selector (jest's regular expression, vitest's and bun's substring) that
    matches the path."""
    if pattern in path:
        return True
    try:
        return re.search(pattern, path) is not None
    except re.error:
        return False


def selects_by_name(command: str, options: Sequence[str]) -> str | None:
    """The option of the command that selects tests by name (a canary's new name may not
    match it), if any."""
    for word in words(command):
        for option in options:
            if word == option or word.startswith(option + "="):
                return option
    return None


def file_selector_path(selector: str) -> str | None:
    """A file selector's path (`file`, `file:line`, `file:line:column`), or None for a glob or
    a name without an extension."""
    if any(c in selector for c in "*?[{"):
        return None
    path = selector
    for _ in range(2):  # file:line (mocha, node --test), file:line:column
        head, _sep, tail = path.rpartition(":")
        if head and tail.isdigit():
            path = head
    name = posixpath.basename(path)
    stem, dot, extension = name.rpartition(".")
    return path if stem and dot and extension.isalnum() else None
