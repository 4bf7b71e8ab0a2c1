"""The static audit of an authored task with its repository at hand (a side effect: git): the
pure audit (runner.compile.audit) given what the base commit says about the task's paths and
patches. `audit` and `fix` both ask it."""

from __future__ import annotations

from dataclasses import dataclass

from runner.base.errors import RepositoryError
from runner.compile.audit import AuditResult, audit
from runner.compile.compiler import task_facts
from runner.compile.repository import resolve_repository
from runner.compile.taskdir import AuthoredTask


@dataclass(frozen=True, kw_only=True)
class TaskAudit:
    result: AuditResult
    # Why the repository was not checked (it could not be reached and none was named).
    note: str | None = None


def audit_task(task: AuthoredTask, repo: str | None) -> TaskAudit:
    """The audit, with the repository checked when it can be reached; a repository named by
    `repo` that cannot be is an error (RepositoryError), one from the definition a note."""
    definition = task.definition
    note = None
    try:
        path = resolve_repository(
            repo, definition.repo, definition.base_commit, task_dir=task.directory
        )
        facts = task_facts(task, path)
    except RepositoryError as exc:
        if repo is not None:
            raise
        note = f"repository not checked: {exc.one_line()}"
        facts = None
    result = audit(
        definition,
        gold=task.gold,
        tests=task.tests,
        repository=facts.problems if facts is not None else None,
        instruction=task.instruction,
        present_at_base=facts.present_at_base if facts is not None else None,
    )
    return TaskAudit(result=result, note=note)
