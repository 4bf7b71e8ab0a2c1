"""A verification round's fix (pure): what a reviewing agent may change in a green task, and
what it changed.

The contract (seeds, "Verification rounds"): a fix may edit only the held-out tests and the
environment contract, plus the test selection, timeouts and resources that describe them;
never the gold patch, the base commit or the instruction. Here that is:

- the definition's fields are of three kinds: those a fix may change (FIXABLE_FIELDS), those it
  never may (FIXED_FIELDS: a different value is refused, the same value is no change), and none
  else (an unknown field is refused, as definition.json itself refuses one);
- the held-out tests are the paths the green test patch touches and its `testPaths` (an entry
  is a file or a directory), plus new files beside them: in a directory of a held-out file, or
  below it (except below the repository's root, where only the root's own files are beside a
  root-level test). A fixed test patch touches nothing else, and a fixed `testPaths` names
  nothing else;
- the gold patch and the instruction are compared byte for byte.

Every rule reports a Problem naming the field or the path, so the CLI, the sidecar and the
worker refuse the same fix with the same words (exit code 2)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner.base import validation as v
from runner.base.errors import Problem
from runner.compile.patches import FileChange, PatchInfo, PatchParseError, parse_patch
from runner.runners import expected_runners, selector_path

# definition.json's fields a fix may change: the environment contract and what describes the
# held-out tests (their command, selection, paths, toolchains, timeouts and resources).
FIXABLE_FIELDS = frozenset(
    {
        "workdir",
        "setupCommand",
        "testCommand",
        "failToPass",
        "passToPass",
        "testPaths",
        "toolchains",
        "timeouts",
        "resources",
        "environment",
    }
)
# Those it never may: what the task is (its request, its base, its reference solution's
# origin, its difficulty) and who it is.
FIXED_FIELDS = {
    "schemaVersion": "the schema version",
    "difficulty": "the difficulty",
    "taskId": "the task id",
    "repo": "the repository",
    "baseCommit": "the base commit",
    "sourcePr": "the source pull request",
    "sourceUrl": "the source pull request",
    "prompt": "the instruction (prompt)",
}
# A task's files, by the names fixed_task_problems takes them under.
DEFINITION_FILE = "definition.json"
INSTRUCTION_FILE = "instruction.md"
GOLD_FILE = "gold.patch"
# What a fix directory may hold besides the work tree's edits.
FIX_DEFINITION = "definition.json"
FIX_TEST_PATCH = "test.patch"
FIX_REFUSED_FILES = {
    "gold.patch": "a fix never changes the gold patch",
    "instruction.md": "a fix never changes the instruction",
}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, frozen=True
    )


class SelectorChange(_Model):
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)


class TestFileChanges(_Model):
    added: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)


class FixSummary(_Model):
    """What a fix changed, against the green task."""

    fields: list[str] = Field(default_factory=list)
    test_files: TestFileChanges = Field(default_factory=TestFileChanges)
    fail_to_pass: SelectorChange = Field(default_factory=SelectorChange)
    pass_to_pass: SelectorChange = Field(default_factory=SelectorChange)

    @property
    def empty(self) -> bool:
        t = self.test_files
        return not (self.fields or t.added or t.modified or t.removed)


def merge_definition(
    green: Mapping[str, Any], changes: Mapping[str, Any], *, file: str = FIX_DEFINITION
) -> tuple[dict[str, Any], list[Problem]]:
    """The green definition with a fix's changed fields merged in, field by field (an object
    such as `timeouts` key by key; a list or a value replaced whole), and the problems: a fixed
    field given another value, an unknown field."""
    merged: dict[str, Any] = dict(green)
    problems: list[Problem] = []
    for key, value in changes.items():
        if key in FIXED_FIELDS:
            if green.get(key) != value:
                problems.append(
                    _problem(file, key, f"a fix never changes {FIXED_FIELDS[key]}; drop {key}")
                )
            continue
        if key not in FIXABLE_FIELDS:
            problems.append(_problem(file, key, "unknown field (a fix changes only " + _fixable()))
            continue
        old = green.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            merged[key] = {**old, **value}
        else:
            merged[key] = value
    problems.extend(selector_escapes(merged, file=file))
    return merged, problems


def selector_escapes(definition: Mapping[str, Any], *, file: str) -> list[Problem]:
    """A selector whose path (as each runner the test command starts reads it) is absolute or
    leaves the repository: a fix's `failToPass` naming `../../../etc/passwd` selects nothing of
    the task, and names a file of whatever reads it."""
    command = str(definition.get("testCommand") or "")
    workdir = str(definition.get("workdir") or ".")
    runners: list[str | None] = [*expected_runners(command)] or [None]
    problems: list[Problem] = []
    for key in ("failToPass", "passToPass"):
        selectors = definition.get(key)
        for index, selector in enumerate(selectors if isinstance(selectors, list) else []):
            paths = {selector_path(r, str(selector)) for r in runners} - {None}
            if "/" in str(selector) and not any(c.isspace() for c in str(selector)):
                paths.add(str(selector))  # a custom command's selector that reads as a path
            if any(v.path_problem(str(path), base=workdir) for path in paths):
                problems.append(
                    _problem(file, f"{key}[{index}]", "names a path outside the repository")
                )
    return problems


def _problem(file: str, field: str | None, message: str) -> Problem:
    return Problem(file=file, field=field, message=message)


def _fixable() -> str:
    return ", ".join(sorted(FIXABLE_FIELDS)) + ")"


def _norm(path: str) -> str | None:
    """A repository-relative path as compared here ("" for the root), None when it is none."""
    try:
        normal = v.normalize_repo_path(path)
    except ValueError:
        return None
    return "" if normal == "." else normal.strip("/")


def held_out(test_patch: PatchInfo, test_paths: Iterable[str]) -> list[str]:
    """The green task's held-out paths: every path its test patch touches, and its testPaths
    (the root is never one: it would hold the implementation too)."""
    return sorted({n for p in (*test_patch.files, *test_paths) if (n := _norm(p))})


def is_held_out(path: str, held: Sequence[str]) -> bool:
    """`path` is a held-out path, or inside one (a testPaths directory)."""
    normal = _norm(path)
    return bool(normal) and any(normal == h or str(normal).startswith(h + "/") for h in held)


def is_beside(path: str, held: Sequence[str]) -> bool:
    """A new file at `path` is beside the held-out tests: in the directory of a held-out path
    or below it; at the repository's root, only beside a root-level held-out file."""
    normal = _norm(path)
    if not normal:
        return False
    path = normal
    parent = posixpath.dirname(path)
    for h in held:
        directory = posixpath.dirname(h)
        if parent == directory or (directory and path.startswith(directory + "/")):
            return True
    return False


def held_out_patch_problems(
    fixed: PatchInfo,
    held: Sequence[str],
    gold: PatchInfo,
    *,
    file: str = FIX_TEST_PATCH,
) -> list[Problem]:
    """A fixed test patch touches the held-out tests only (new files beside them too), never a
    path of the gold patch."""
    gold_paths = {n for p in gold.files if (n := _norm(p)) is not None}
    problems: list[Problem] = []
    for change in fixed.changes:
        for path in change.paths:
            if _norm(path) in gold_paths:
                problems.append(
                    _problem(file, path, "a path of the gold patch: a fix never changes it")
                )
            elif not is_held_out(path, held) and not (
                change.old_path is None and is_beside(path, held)
            ):
                problems.append(
                    _problem(
                        file,
                        path,
                        "outside the held-out tests (a fix edits only the test patch's paths, "
                        "testPaths, and new files beside them)",
                    )
                )
    return problems


def held_out_paths_problems(
    fixed_paths: Sequence[str], held: Sequence[str], *, file: str = FIX_DEFINITION
) -> list[Problem]:
    """A fixed testPaths names held-out paths only (or new ones beside them): a fix cannot make
    an implementation path a test path."""
    return [
        _problem(
            file,
            f"testPaths[{index}]",
            f"{path} is outside the green task's held-out tests",
        )
        for index, path in enumerate(fixed_paths)
        if not is_held_out(path, held) and not is_beside(path, held)
    ]


def payload_problems(
    green_definition: Mapping[str, Any],
    fixed_definition: Mapping[str, Any],
    *,
    green_instruction: str,
    fixed_instruction: str,
    green_gold: bytes,
    fixed_gold: bytes,
) -> list[Problem]:
    """A whole fixed task against the green one (the sidecar's and the worker's view: a fix
    arrives as a complete task): the gold patch and instruction unchanged, no fixed field
    changed, no unknown field added."""
    problems: list[Problem] = []
    if fixed_gold != green_gold:
        problems.append(_problem(GOLD_FILE, None, "a fix never changes the gold patch"))
    if fixed_instruction.strip() != green_instruction.strip():
        problems.append(_problem(INSTRUCTION_FILE, None, "a fix never changes the instruction"))
    changed = {
        key: value for key, value in fixed_definition.items() if green_definition.get(key) != value
    }
    removed = [key for key in green_definition if key not in fixed_definition]
    _, merge = merge_definition(green_definition, changed, file=DEFINITION_FILE)
    problems.extend(merge)
    problems.extend(
        _problem(DEFINITION_FILE, key, f"a fix never changes {FIXED_FIELDS[key]}; keep {key}")
        for key in removed
        if key in FIXED_FIELDS
    )
    return problems


def fixed_task_problems(green: Mapping[str, Any], fixed: Mapping[str, Any]) -> list[Problem]:
    """A whole fixed task against the green one, each a mapping of the task's files by name
    (definition.json as an object, instruction.md as text, test.patch and gold.patch as bytes):
    the sidecar's and the worker's view, where a fix arrives as a complete task. Everything
    payload_problems checks, and the fixed test patch and testPaths within the green task's
    held-out tests."""
    green_doc, fixed_doc = green[DEFINITION_FILE], fixed[DEFINITION_FILE]
    problems = payload_problems(
        green_doc,
        fixed_doc,
        green_instruction=green[INSTRUCTION_FILE],
        fixed_instruction=fixed[INSTRUCTION_FILE],
        green_gold=green[GOLD_FILE],
        fixed_gold=fixed[GOLD_FILE],
    )
    try:
        green_tests, gold = parse_patch(green[FIX_TEST_PATCH]), parse_patch(green[GOLD_FILE])
    except PatchParseError as exc:
        return [*problems, _problem("green task", None, f"its patches cannot be read: {exc}")]
    held = held_out(green_tests, [str(p) for p in green_doc.get("testPaths") or []])
    try:
        fixed_tests = parse_patch(fixed[FIX_TEST_PATCH])
    except PatchParseError as exc:
        problems.append(_problem(FIX_TEST_PATCH, None, f"cannot be parsed: {exc}"))
    else:
        problems.extend(held_out_patch_problems(fixed_tests, held, gold))
    paths = fixed_doc.get("testPaths")
    if isinstance(paths, list):
        problems.extend(
            held_out_paths_problems([str(p) for p in paths], held, file=DEFINITION_FILE)
        )
    return problems


def _section_text(change: FileChange) -> bytes:
    """A section without its `index` line (which tools abbreviate differently)."""
    return b"".join(
        line for line in change.raw.splitlines(keepends=True) if not line.startswith(b"index ")
    )


def summarize(
    green_definition: Mapping[str, Any],
    fixed_definition: Mapping[str, Any],
    green_tests: PatchInfo,
    fixed_tests: PatchInfo,
) -> FixSummary:
    fields = sorted(
        key
        for key in {*green_definition, *fixed_definition}
        if green_definition.get(key) != fixed_definition.get(key)
    )
    before = {change.path: _section_text(change) for change in green_tests.changes}
    after = {change.path: _section_text(change) for change in fixed_tests.changes}

    def selectors(key: str) -> SelectorChange:
        old = list(green_definition.get(key) or [])
        new = list(fixed_definition.get(key) or [])
        return SelectorChange(
            added=[s for s in new if s not in old], removed=[s for s in old if s not in new]
        )

    return FixSummary(
        fields=fields,
        test_files=TestFileChanges(
            added=sorted(set(after) - set(before)),
            modified=sorted(p for p in set(after) & set(before) if after[p] != before[p]),
            removed=sorted(set(before) - set(after)),
        ),
        fail_to_pass=selectors("failToPass"),
        pass_to_pass=selectors("passToPass"),
    )
