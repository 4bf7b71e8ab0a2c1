"""`fix`: a green task and a reviewer's fix, as the fixed task (the verification round of the
task contract). The fix is the reviewer's work tree (its held-out test edits become the test
patch, runner.compile.fixtree) and an optional fix directory: `definition.json` with only the
changed fields, merged field by field, and `test.patch`, which then replaces the one the tree
would give. The boundary (runner.compile.fixrules) is checked first, every violation named
(exit code 2); the fixed task is then loaded and audited as any task, and written only when
the audit accepts it, all at once (a staged directory renamed into place)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base import validation as v
from runner.base.errors import InvalidInputError, Problem, TaskFailedError, UsageError
from runner.base.safeio import optional_regular, require_directory, staged_directory
from runner.compile.fixrules import (
    FIX_DEFINITION,
    FIX_REFUSED_FILES,
    FIX_TEST_PATCH,
    FixSummary,
    held_out,
    held_out_patch_problems,
    held_out_paths_problems,
    merge_definition,
    summarize,
)
from runner.compile.fixtree import test_patch_from_tree
from runner.compile.repository import repository_spec, resolve_repository
from runner.compile.taskaudit import TaskAudit, audit_task
from runner.compile.taskdir import (
    DEFINITION,
    GOLD_PATCH,
    INSTRUCTION,
    TEST_PATCH,
    AuthoredTask,
    check_patch,
    load_authored_task,
    parse_json_object,
)


@dataclass(frozen=True, kw_only=True)
class FixedTask:
    task: AuthoredTask  # as written (its directory is the output)
    summary: FixSummary
    audit: TaskAudit
    # The green task's repository when definition.repo alone would not find it from the fixed
    # task's directory (a relative path beside the green task): verify it with --repo this.
    repository: str | None


class FixRejectedError(TaskFailedError):
    """The fixed task does not pass the audit: nothing is written (exit code 1)."""

    def __init__(self, audited: TaskAudit, summary: FixSummary) -> None:
        super().__init__(f"the fixed task does not pass the audit: {audited.result.reason()}")
        self.audited = audited
        self.summary = summary


def _fix_files(fix_dir: Path) -> tuple[dict[str, Any], bytes | None, list[Problem]]:
    """The fix directory's changed fields and test patch, and what it holds that no fix may."""
    require_directory(fix_dir, what="fix directory")
    problems = []
    for entry in sorted(os.listdir(fix_dir)):
        if entry in FIX_REFUSED_FILES:
            problems.append(
                Problem(file=str(fix_dir / entry), field=None, message=FIX_REFUSED_FILES[entry])
            )
        elif entry not in (FIX_DEFINITION, FIX_TEST_PATCH):
            problems.append(
                Problem(
                    file=str(fix_dir / entry),
                    field=None,
                    message="unknown file: a fix directory holds definition.json (the changed "
                    "fields) and test.patch only",
                )
            )
    raw = optional_regular(fix_dir / FIX_DEFINITION, limit=v.MAX_DEFINITION_BYTES)
    changes = parse_json_object(raw, fix_dir / FIX_DEFINITION) if raw is not None else {}
    patch = optional_regular(fix_dir / FIX_TEST_PATCH, limit=v.MAX_PATCH_BYTES)
    return changes, patch, problems


def fix_task(
    task_dir: Path,
    *,
    out: Path,
    tree: Path | None,
    fix_dir: Path | None,
    repo: str | None = None,
) -> FixedTask:
    green = load_authored_task(task_dir)
    green_doc = parse_json_object(green.definition_bytes, task_dir / DEFINITION)
    repository = repository_of(green, repo)
    changes: dict[str, Any] = {}
    patch: bytes | None = None
    problems: list[Problem] = []
    if fix_dir is not None:
        changes, patch, problems = _fix_files(fix_dir)
    if patch is None and tree is None:
        raise UsageError(
            "give --tree WORKTREE (the reviewer's edits) or --fix DIR with a test.patch"
        )
    where = str(fix_dir / FIX_DEFINITION) if fix_dir is not None else FIX_DEFINITION
    merged, found = merge_definition(green_doc, changes, file=where)
    problems.extend(found)
    held = held_out(green.tests, green.definition.test_paths)
    patch_file = str(fix_dir / FIX_TEST_PATCH) if patch is not None and fix_dir else ""
    if tree is not None:
        definition = green.definition
        # The base commit into the store, which the tree is compared against.
        resolve_repository(
            repository, definition.repo, definition.base_commit, task_dir=green.directory
        )
        from_tree = test_patch_from_tree(
            tree,
            base_commit=definition.base_commit,
            gold_patch=green.gold_patch,
            gold_paths=frozenset(green.gold.files),
            held=held,
        )
        problems.extend(from_tree.problems)
        if patch is None:
            patch, patch_file = from_tree.test_patch, f"{TEST_PATCH} (from --tree {tree})"
    assert patch is not None
    info, messages = check_patch(patch, patch_file, label="test")
    problems.extend(Problem(file=patch_file, field=None, message=m) for m in messages)
    if info is not None:
        problems.extend(held_out_patch_problems(info, held, green.gold, file=patch_file))
    fixed_paths = merged.get("testPaths")
    if isinstance(fixed_paths, list):
        problems.extend(held_out_paths_problems([str(p) for p in fixed_paths], held, file=where))
    if problems:
        raise InvalidInputError(problems)
    with staged_directory(out) as staged:
        (staged / DEFINITION).write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n")
        (staged / TEST_PATCH).write_bytes(patch)
        (staged / GOLD_PATCH).write_bytes(green.gold_patch)
        instruction = optional_regular(task_dir / INSTRUCTION, limit=v.MAX_INSTRUCTION_BYTES)
        if instruction is not None:
            (staged / INSTRUCTION).write_bytes(instruction)
        fixed = load_authored_task(staged)
        summary = summarize(green_doc, merged, green.tests, fixed.tests)
        audited = audit_task(fixed, repository)
        if not audited.result.accepted:
            raise FixRejectedError(audited, summary)
    return FixedTask(
        task=dataclasses.replace(fixed, directory=out),
        summary=summary,
        audit=audited,
        repository=repository,
    )


def repository_of(task: AuthoredTask, repo: str | None) -> str | None:
    """Where the green task's repository is, for the fixed one: `repo` when given; a relative
    definition.repo found beside the green task as that path made absolute (the fixed task lies
    elsewhere); else None (definition.repo, as it is)."""
    spec = repository_spec(repo, task.definition.repo, task.directory)
    if repo is None and spec == task.definition.repo:
        return None
    return spec if repo is not None else str(Path(spec).resolve())
