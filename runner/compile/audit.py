"""Static audit (pure): the seed's "Static audit beyond the schema" table, blocker by blocker."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from runner.base import validation as v
from runner.base.errors import printable
from runner.compile.coupling import added_lines, coupling, coupling_notes
from runner.compile.harness import harness_changes
from runner.compile.patches import PatchInfo
from runner.compile.shellsyntax import placement_problem
from runner.model.report import CouplingItem
from runner.model.shell import words
from runner.model.task import TESTS_PLACEHOLDER, Difficulty, TaskDefinition


@dataclass(frozen=True)
class Profile:
    min_files: int
    min_changed_lines: int
    min_pass_to_pass: int


PROFILES: dict[Difficulty, Profile] = {
    Difficulty.EASY: Profile(min_files=1, min_changed_lines=20, min_pass_to_pass=0),
    Difficulty.MEDIUM: Profile(min_files=2, min_changed_lines=50, min_pass_to_pass=1),
    Difficulty.HARD: Profile(min_files=3, min_changed_lines=100, min_pass_to_pass=2),
}

PLACEHOLDER_COUNT = 'test command must contain "{tests}" exactly once'
PLACEHOLDER_QUOTED = 'test command must expand "{tests}" as an unquoted shell argument list'
PLACEHOLDER_HARDCODED = (
    'test command must not hard-code fail-to-pass or pass-to-pass paths outside "{tests}"'
)
NO_TEST_FILES = "held-out test patch changes no files"


class AuditMetrics(BaseModel):
    model_config = ConfigDict(frozen=True)

    implementation_files: int
    implementation_changed_lines: int
    test_files: int


class AuditResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    blockers: list[str]
    metrics: AuditMetrics
    repository_checked: bool = False
    # Evidence for the reviewer, never a blocker; computed when the repository was at hand.
    coupling: list[CouplingItem] = []
    # Why a blocker holds, where its fixed wording cannot say (the seed's messages are exact).
    hints: list[str] = []

    @property
    def accepted(self) -> bool:
        return not self.blockers

    def reason(self) -> str:
        return "; ".join(self.blockers)


def placeholder_blockers(command: str, selectors: list[str]) -> list[str]:
    count = command.count(TESTS_PLACEHOLDER)
    if count != 1:
        return [PLACEHOLDER_COUNT]
    blockers: list[str] = []
    index = command.index(TESTS_PLACEHOLDER)
    if placement_problem(command) is not None:
        blockers.append(PLACEHOLDER_QUOTED)
    rest = command[:index] + " " + command[index + len(TESTS_PLACEHOLDER) :]
    if _hardcodes_selector(rest, selectors):
        blockers.append(PLACEHOLDER_HARDCODED)
    return blockers


def _hardcodes_selector(command: str, selectors: list[str]) -> bool:
    tokens: list[str] = []
    for word in words(command):
        tokens.append(word)
        if "=" in word:
            tokens.append(word.split("=", 1)[1])
    for selector in (s for s in selectors if s.strip()):
        bare = selector.strip().removeprefix("./")
        for word in tokens:
            candidate = word.removeprefix("./")
            if (
                candidate == bare
                or candidate.endswith("/" + bare)
                or candidate.startswith(bare + "::")
            ):
                return True
    return False


def selectors_in_both(definition: TaskDefinition) -> list[str]:
    """A selector cannot fail at the base commit (failToPass) and pass there (passToPass): the
    schema allows it, the seed's semantics do not."""
    both = sorted(set(definition.fail_to_pass) & set(definition.pass_to_pass))
    return [
        f"selector {selector!r} is in both failToPass and passToPass "
        f"(passToPass[{definition.pass_to_pass.index(selector)}]): it cannot both fail and "
        "pass at baseCommit"
        for selector in both
    ]


# Characters that make a path a command line's business: the shell's own (`;`, `&`, `|`, `<`,
# `>`, quotes, backslash, backtick, `$(`, `${`) and the pathspec globs `*` and `?` (git reads
# them as patterns). `[`, `(`, `{`, `$`, `+`, `@` and spaces stay allowed: routing frameworks
# name real files with them (Next.js `[id].tsx` and `(group)/`, Remix `$slug.tsx`, SvelteKit
# `+page.svelte`), and every path reaches a command as one quoted word.
_PATH_METACHARACTERS = frozenset(";&|<>\"'\\`*?")
_PATH_SEQUENCES = ("$(", "${")
# Attributes that name a driver: a command git runs on the file's content (gitattributes(5)).
_DRIVER_ATTRIBUTE = re.compile(r"^(filter|diff|merge)=(\S+)$")


def path_oddity(path: str) -> str | None:
    """Why `path` may not be a task's file, or None."""
    if path.startswith(("-", ":")):
        return (
            f"path {path!r} starts with {path[0]!r} (read as an option, or as pathspec magic, "
            "by the commands it reaches)"
        )
    found = sorted({c for c in path if c in _PATH_METACHARACTERS})
    found += [seq for seq in _PATH_SEQUENCES if seq in path]
    if found:
        return f"path {path!r} holds the shell metacharacter{'s' if len(found) > 1 else ''} " + (
            " ".join(repr(c) for c in found)
        )
    return None


def patch_oddities(label: str, info: PatchInfo) -> list[str]:
    """Sections `git apply` would take but a task may not carry: hunks whose lines disagree
    with their headers, submodule configuration, git attributes that name drivers, and paths
    a command line would misread. Each names the patch and the section."""
    blockers: list[str] = []
    for index, change in enumerate(info.changes):
        where = f"{label}: section {index + 1} ({printable(change.path)})"
        blockers.extend(f"{where}: {problem}" for problem in change.hunk_problems)
        for path in change.paths:
            problem = path_oddity(path)
            if problem:
                blockers.append(f"{where}: {problem}")
        names = {posixpath.basename(p).lower() for p in change.paths}
        if ".gitmodules" in names:
            blockers.append(
                f"{where}: .gitmodules configures submodules, which a task cannot carry"
            )
        if ".gitattributes" in names and change.new_path is not None:
            for number, text in added_lines(change):
                drivers = _drivers(text)
                if drivers:
                    blockers.append(
                        f"{where}: line {number} sets {', '.join(drivers)}: a driver is a "
                        "command git runs on the files, which a task cannot carry"
                    )
    return blockers


def _drivers(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return []
    attributes = stripped.split()[1:]
    return [a for a in attributes if _DRIVER_ATTRIBUTE.match(a)]


def held_out_gold(definition: TaskDefinition, gold: PatchInfo, tests: PatchInfo) -> list[str]:
    """Gold files that a testPaths entry holds out: the verifier would restore them from the
    base and discard the reference implementation. (A file in both patches is the overlap
    blocker already.)"""
    in_tests = {v.normalize_repo_path(p) for p in tests.files}
    found = []
    for entry in definition.test_paths:
        held = v.normalize_repo_path(entry, base=definition.workdir)
        for path in gold.files:
            normalized = v.normalize_repo_path(path)
            if normalized not in in_tests and v.covers(held, normalized):
                found.append(f"held-out path {entry!r} covers gold patch file {path}")
    return found


def audit(
    definition: TaskDefinition,
    *,
    gold: PatchInfo,
    tests: PatchInfo,
    repository: list[str] | None = None,
    instruction: str = "",
    present_at_base: frozenset[str] | None = None,
) -> AuditResult:
    """`repository`: the problems compile found against the base commit (workdir, `git apply
    --check`), or None when the repository was not at hand."""
    profile = PROFILES[definition.difficulty]
    level = definition.difficulty.value
    blockers: list[str] = []

    test_files = {v.normalize_repo_path(p) for p in tests.files}
    overlap = [path for path in gold.files if v.normalize_repo_path(path) in test_files]
    if overlap:
        blockers.append(f"gold and held-out test patches overlap: {', '.join(overlap)}")
    blockers.extend(held_out_gold(definition, gold, tests))
    blockers.extend(patch_oddities("test.patch", tests))
    blockers.extend(patch_oddities("gold.patch", gold))
    for index, entry in enumerate(definition.test_paths):
        problem = path_oddity(entry)
        if problem:
            blockers.append(f"testPaths[{index}]: {problem}")
    blockers.extend(harness_changes(definition, gold))

    implementation_files = len(gold.changes)
    if implementation_files < profile.min_files:
        blockers.append(
            f"{level} mode requires at least {profile.min_files} implementation "
            f"file{'s' if profile.min_files != 1 else ''}; found {implementation_files}"
        )
    if gold.changed_lines < profile.min_changed_lines:
        blockers.append(
            f"{level} mode requires at least {profile.min_changed_lines} changed implementation "
            f"lines; found {gold.changed_lines}"
        )
    if not tests.changes:
        blockers.append(NO_TEST_FILES)
    if len(definition.pass_to_pass) < profile.min_pass_to_pass:
        blockers.append(
            f"{level} mode requires at least {profile.min_pass_to_pass} pass-to-pass regression "
            f"test{'s' if profile.min_pass_to_pass != 1 else ''}; found "
            f"{len(definition.pass_to_pass)}"
        )
    blockers.extend(selectors_in_both(definition))
    blockers.extend(
        placeholder_blockers(
            definition.test_command, [*definition.fail_to_pass, *definition.pass_to_pass]
        )
    )
    hints: list[str] = []
    if PLACEHOLDER_QUOTED in blockers:
        hints.append(f"testCommand: {{tests}} {placement_problem(definition.test_command)}")
    blockers.extend(repository or [])
    evidence = (
        coupling(tests, gold, instruction, set(present_at_base))
        if present_at_base is not None
        else []
    )
    if present_at_base is not None:
        hints.extend(coupling_notes(tests, gold))
    return AuditResult(
        blockers=blockers,
        coupling=evidence,
        hints=hints,
        repository_checked=repository is not None,
        metrics=AuditMetrics(
            implementation_files=implementation_files,
            implementation_changed_lines=gold.changed_lines,
            test_files=len(tests.changes),
        ),
    )
