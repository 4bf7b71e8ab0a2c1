"""The verdict from every stage's status, and its reason; and the two things a run itself says
beside its stages: that it was interrupted, and that the runner failed inside a stage. The
report copies what these decide."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.judge.base import Judgement, errored
from runner.model.report import Status, Verdict
from runner.model.stages import DOCKER_STAGES, Stage


def decide_verdict(
    statuses: Mapping[str, Status],
    *,
    invalid: bool = False,
    optional: frozenset[str] = frozenset(),
) -> Verdict:
    """invalid input → invalid; any red stage → rejected; any infrastructure error → that;
    accepted only when every Docker stage passed (an `optional` one may be skipped: the hack
    gate under --no-hack-gate)."""
    if invalid:
        return Verdict.INVALID
    values = list(statuses.values())
    if Status.FAILED in values:
        return Verdict.REJECTED
    if Status.ERROR in values:
        return Verdict.INFRASTRUCTURE_FAILED
    if all(
        statuses.get(name) is Status.PASSED
        or (name in optional and statuses.get(name) is Status.SKIPPED)
        for name in DOCKER_STAGES
    ):
        return Verdict.ACCEPTED
    return Verdict.INFRASTRUCTURE_FAILED


def verdict_reason(stages: Sequence[tuple[str, Status, str]]) -> str:
    """The first stage that did not pass, as `name: detail`."""
    for name, status, detail in stages:
        if status in (Status.FAILED, Status.ERROR):
            return f"{name}: {detail}"
    return ""


def judge_run(
    stages: Sequence[tuple[str, Status, str]],
    *,
    invalid: bool,
    interrupted: str | None,
    optional: frozenset[str] = frozenset(),
) -> tuple[Verdict, str]:
    """The run's verdict and reason: the stages' (decide_verdict, verdict_reason), unless it
    was interrupted, which no verdict but invalid outlives (the stages were stopped, not
    judged)."""
    verdict = decide_verdict({n: s for n, s, _ in stages}, invalid=invalid, optional=optional)
    reason = verdict_reason(stages)
    if interrupted:
        reason = f"interrupted ({interrupted}); the run's containers were removed"
        if not invalid:
            verdict = Verdict.INFRASTRUCTURE_FAILED
    return verdict, reason


def judge_internal_error(not_run: Sequence[str], error: str, log: str) -> tuple[str, Judgement]:
    """A failure of the runner itself is an infrastructure error of the first stage that had not
    run (compile's when every stage had): the stage and its judgement."""
    stage = not_run[0] if not_run else Stage.COMPILE.value
    return stage, errored(f"{error}; the traceback is in {log}")
