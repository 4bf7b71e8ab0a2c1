"""The verdict from every stage's status, and its reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.model.report import Status, Verdict
from runner.model.stages import DOCKER_STAGES


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
