"""What every judgement shares: its shape (a status and a detail that says what happened)
and what the limits did, merged from the runner's view and the cgroup's readings."""

from __future__ import annotations

from dataclasses import dataclass

from runner.model.report import LimitsData, Status
from runner.model.reward import VerifierDetails
from runner.plan.runtime import ExecOutcome


@dataclass(frozen=True)
class Judgement:
    status: Status
    detail: str

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED


def passed(detail: str) -> Judgement:
    return Judgement(Status.PASSED, detail)


def failed(detail: str) -> Judgement:
    return Judgement(Status.FAILED, detail)


def errored(detail: str) -> Judgement:
    return Judgement(Status.ERROR, detail)


# ---- limits ------------------------------------------------------------------------------------


def limits_data(
    outcome: ExecOutcome | None, details: VerifierDetails | None, mechanism: str | None
) -> LimitsData:
    """What the limits did, merged from the runner's view and test.sh's cgroup readings."""
    pids = max(
        outcome.limits.pids_limit_hits if outcome else -1,
        details.pids_limit_hits if details else -1,
    )
    ooms = max(outcome.limits.oom_kills if outcome else -1, details.oom_kills if details else -1)
    return LimitsData(
        pids_limit_hits=pids,
        oom_kills=ooms,
        pids_at_limit=outcome.limits.pids_at_limit if outcome else False,
        storage_exceeded_mb=outcome.storage_exceeded_mb if outcome else None,
        storage_mechanism=mechanism,
    )


def storage_reason(used_mb: int, limit_mb: int, mechanism: str | None) -> str:
    if mechanism == "quota":
        return (
            f"storage limit exceeded ({used_mb} MB >= {limit_mb} MB): the engine's quota "
            "refused further writes"
        )
    return (
        f"storage limit exceeded ({used_mb} MB > {limit_mb} MB): the runner's storage "
        "watchdog stopped the container"
    )


def limit_notes(limits: LimitsData, *, memory_mb: int, pids: int) -> str:
    """A clause naming each limit that acted, or ''."""
    notes = []
    if limits.oom_kills > 0:
        notes.append(
            f"the OOM killer ended {limits.oom_kills} process(es) at the {memory_mb} MB "
            "memory limit"
        )
    if limits.pids_limit_hits > 0:
        notes.append(f"the pids limit ({pids}) refused {limits.pids_limit_hits} new process(es)")
    elif limits.pids_at_limit:
        notes.append(f"the pids limit ({pids}) was reached: every process slot was taken")
    return "; ".join(notes)


def with_limit_notes(detail: str, limits: LimitsData, *, memory_mb: int, pids: int) -> str:
    notes = limit_notes(limits, memory_mb=memory_mb, pids=pids)
    return f"{detail} ({notes})" if notes else detail
