"""The build and smoke gates: an image that does not build, a verifier that does not start
or cannot reach its services."""

from __future__ import annotations

from collections.abc import Sequence

from runner.judge.base import (
    Judgement,
    errored,
    failed,
    passed,
    storage_reason,
    with_limit_notes,
)
from runner.model.report import LimitsData
from runner.plan.runtime import BuildOutcome, ExecOutcome


def judge_build(
    kind: str, outcome: BuildOutcome, *, task_fault: bool, memory_mb: int, log_path: str
) -> Judgement:
    step = f"`{outcome.failed_step}`" if outcome.failed_step else "the build"
    if outcome.timed_out:
        # The runner stopped it: never blame memory for the runner's own kill.
        detail = (
            f"{kind} image: {outcome.error} while running {step}; the runner stopped it; "
            f"see {log_path}"
        )
        return failed(detail) if task_fault else errored(detail)
    why = outcome.error or "failed"
    if outcome.engine_lost:
        # Not the task: the engine went away under the step (a restart, a shutdown).
        return errored(
            f"{kind} image: {step} was killed and the Docker engine stopped answering: "
            f"{why}; see {log_path}"
        )
    if outcome.exit_code == 137:
        if outcome.oom_killed:
            why += f" (killed by the build's memory limit, {memory_mb} MB)"
        elif outcome.oom_killed is None:
            why += f" (killed by SIGKILL; the build's memory limit is {memory_mb} MB)"
        else:
            why += " (killed by SIGKILL; not the memory limit: the engine recorded no OOM kill)"
    detail = f"{kind} image: {step} failed: {why}; see {log_path}"
    return failed(detail) if task_fault else errored(detail)


# ---- smoke --------------------------------------------------------------------------------------


def judge_smoke(
    outcome: ExecOutcome,
    lines: Sequence[str],
    limits: LimitsData,
    *,
    storage_mb: int,
    memory_mb: int,
    pids: int,
    log_path: str,
) -> Judgement:
    if outcome.timed_out:
        return failed(
            f"smoke command timed out after {int(outcome.seconds)}s; the runner stopped it"
        )
    if limits.storage_exceeded_mb is not None:
        return failed(
            storage_reason(limits.storage_exceeded_mb, storage_mb, limits.storage_mechanism)
        )
    if outcome.exit_code != 0:
        failing = next(
            (ln for ln in reversed(lines) if ln.startswith("smoke: failed")),
            f"exit {outcome.exit_code}",
        )
        detail = f"smoke check failed: {failing}; see {log_path}"
        return failed(with_limit_notes(detail, limits, memory_mb=memory_mb, pids=pids))
    return passed("smoke checks passed in the verifier image")
