"""The verdict from every stage's status, and its reason; and the two things a run itself says
beside its stages: that it was interrupted, and that the runner failed inside a stage. Every
status these set is a mark (a judgement, or why a stage did not run) that the run and the
report copy."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from runner.judge.base import Judgement, errored
from runner.model.report import Status, Verdict
from runner.model.stages import DOCKER_STAGES, Skip, Stage

# A stage's new state: a judgement (status and detail), or why it did not run.
Mark = Judgement | Skip


@dataclass(frozen=True)
class StageView:
    """What the judge reads of one stage: its status and detail, and why it did not run (None:
    it ran)."""

    status: Status
    detail: str
    skip: Skip | None


@dataclass(frozen=True)
class RunJudgement:
    """The run's verdict and reason, and the marks that amend its stages first."""

    verdict: Verdict
    reason: str
    marks: Mapping[str, Mark]


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


def interrupt_marks(
    skips: Mapping[str, Skip | None], *, running: Collection[str], signal_name: str
) -> dict[str, Mark]:
    """What an interrupt makes of the stages: one running then is an error (its work was
    stopped, never judged); one that never ran is skipped by the interrupt; the others keep
    what they are."""
    marks: dict[str, Mark] = {}
    for name, skip in skips.items():
        if name in running:
            marks[name] = errored(f"interrupted ({signal_name}); the run's containers were removed")
        elif skip is Skip.NOT_RUN:
            marks[name] = Skip.INTERRUPTED
    return marks


def judge_internal_error(not_run: Sequence[str], error: str, log: str) -> tuple[str, Judgement]:
    """A failure of the runner itself is an infrastructure error of the first stage that had not
    run (compile's when every stage had): the stage and its judgement."""
    stage = not_run[0] if not_run else Stage.COMPILE.value
    return stage, errored(f"{error}; the traceback is in {log}")


def judge_report(
    stages: Mapping[str, StageView],
    *,
    invalid: bool,
    interrupted: str | None,
    internal: str | None,
    log: str,
) -> RunJudgement:
    """The whole run's judgement from its stages as the run left them: an internal error marks
    the first stage that never ran, an interrupt the others that never ran; then the verdict
    (the hack stage may be skipped for an optional reason: --no-hack-gate, no exploit
    applies)."""
    marks: dict[str, Mark] = {}
    if internal:
        not_run = [name for name, view in stages.items() if view.skip is Skip.NOT_RUN]
        name, judgement = judge_internal_error(not_run, internal, log)
        marks[name] = judgement
    if interrupted:
        left = {n: v.skip for n, v in stages.items() if n not in marks}
        marks.update(interrupt_marks(left, running=(), signal_name=interrupted))
    views = {name: _marked(view, marks.get(name)) for name, view in stages.items()}
    hack = views.get(Stage.HACK)
    optional = hack is not None and hack.skip is not None and hack.skip.optional
    verdict, reason = judge_run(
        [(name, view.status, view.detail) for name, view in views.items()],
        invalid=invalid,
        interrupted=interrupted,
        optional=frozenset({Stage.HACK.value} if optional else ()),
    )
    return RunJudgement(verdict=verdict, reason=reason, marks=marks)


def _marked(view: StageView, mark: Mark | None) -> StageView:
    if mark is None:
        return view
    if isinstance(mark, Judgement):
        return StageView(mark.status, mark.detail, None)
    return StageView(Status.SKIPPED, mark.value, mark)
