"""A verification round's request (`fixOf`): the fix checked against the green verification it
names, before anything is built. The rules are the `fix` command's (runner.compile.fixrules);
here a fix arrives as a whole task, and each problem names the request field at fault."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner.compile.fixrules import (
    DEFINITION_FILE,
    FIX_TEST_PATCH,
    GOLD_FILE,
    INSTRUCTION_FILE,
    fixed_task_problems,
)
from runner.sidecar.policy import RequestRefusedError
from runner.sidecar.request import ErrorDetail, TaskPayload, VerificationRequest
from runner.sidecar.store import Store

# Where each of a task's files is in a request.
REQUEST_FIELDS = {
    DEFINITION_FILE: "task.definition",
    INSTRUCTION_FILE: "task.instruction",
    FIX_TEST_PATCH: "task.testPatch",
    GOLD_FILE: "task.goldPatch",
}


def task_files(task: TaskPayload) -> dict[str, Any]:
    """A request's task as fixed_task_problems takes it (the bytes verify would be given:
    runner.sidecar.verification writes them the same way)."""
    return {
        DEFINITION_FILE: task.definition,
        # Without instruction.md a task's instruction is its prompt (runner.compile.taskdir).
        INSTRUCTION_FILE: (
            task.instruction
            if task.instruction is not None
            else str(task.definition.get("prompt", ""))
        ),
        FIX_TEST_PATCH: task.test_patch.encode("utf-8", "surrogatepass"),
        GOLD_FILE: task.gold_patch.encode("utf-8", "surrogatepass"),
    }


# Where a fix's green verification is found when this service's store lacks it: (its task,
# its verdict), or None (runner.worker.stored reads a fleet's published run).
Elsewhere = Callable[[str], tuple[TaskPayload, str | None] | None]


def green_of(
    store: Store, fix_of: str, elsewhere: Elsewhere | None
) -> tuple[TaskPayload | None, str | None]:
    """The task and verdict of verification `fix_of` as this service knows it (its store's,
    else its fleet's), never the requester's copy: a fix does not vouch for itself."""
    green = store.get(fix_of)
    if green is not None:
        return green.request.task, green.verdict
    found = elsewhere(fix_of) if elsewhere is not None else None
    return found if found is not None else (None, None)


def check_fix(request: VerificationRequest, known: TaskPayload | None, verdict: str | None) -> None:
    """Refuse (RequestRefusedError, code `fix-refused`) a fix of no green verification, or one
    that crosses the boundary, naming every field at fault. `known`: the task of the request
    fixOf names as this service knows it (its own store, or its fleet's published run), and
    `verdict` its verdict. The request's own copy (fixOfTask) is never the reference: a fix that
    named an unknown id and sent its own edited task as the green one vouched for itself."""
    fix_of = request.fix_of
    assert fix_of is not None
    if known is None:
        raise RequestRefusedError(
            "fix-refused",
            f"fixOf: no verification {fix_of!r} is known here (a fix names a green "
            "verification this sidecar, or its fleet's store, holds)",
            field="fixOf",
        )
    green = known
    if request.fix_of_task is not None and request.fix_of_task != known:
        raise RequestRefusedError(
            "fix-refused",
            f"fixOfTask is not the task of verification {fix_of!r}",
            field="fixOfTask",
        )
    if verdict != "accepted":
        raise RequestRefusedError(
            "fix-refused",
            f"fixOf: verification {fix_of!r} is not green (its verdict: {verdict or 'none yet'})",
            field="fixOf",
        )
    fix = request.task
    problems = fixed_task_problems(task_files(green), task_files(fix))
    if not problems:
        return
    details = [
        ErrorDetail(
            field=".".join(
                part for part in (REQUEST_FIELDS.get(p.file or "", p.file), p.field) if part
            ),
            message=p.message,
        )
        for p in problems
    ]
    raise RequestRefusedError(
        "fix-refused",
        f"the fix of {fix_of!r} crosses the verification round's boundary: "
        + "; ".join(f"{d.field}: {d.message}" for d in details[:3])
        + (f" (and {len(details) - 3} more)" if len(details) > 3 else ""),
        problems=details,
    )
