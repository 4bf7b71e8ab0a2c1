"""The sidecar's job records: a queued entry, a job's summary (everything but its request),
and the job with it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runner.run.events import LoggedEvent
from runner.run.state import PROGRESS
from runner.sidecar.request import (
    JobState,
    StageProgress,
    VerificationRequest,
    VerificationResponse,
    VerificationStatus,
)


@dataclass(frozen=True, kw_only=True)
class QueueEntry:
    """A queued job without its (possibly large) request: what the scheduler looks at."""

    id: str
    task_id: str | None
    digest: str | None
    cancel: bool


class ConflictError(Exception):
    """The id (or the archive path) is already taken by another request."""


@dataclass(frozen=True, kw_only=True)
class JobSummary:
    """A job without its request: what status reads, event streams and listings need."""

    id: str
    source: str
    archive: Path
    task_id: str | None
    digest: str | None
    state: JobState
    run_id: str | None
    pid: int | None
    attempts: int
    cancel: bool
    created: float
    started: float | None
    finished: float | None
    verdict: str | None
    response: VerificationResponse | None


@dataclass(frozen=True, kw_only=True)
class Job(JobSummary):
    request: VerificationRequest


def _iso(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return dt.datetime.fromtimestamp(stamp, dt.UTC).isoformat(timespec="milliseconds")


def fold_stages(stages: dict[str, StageProgress], events: Iterable[LoggedEvent]) -> None:
    """Each stage's state in the job's last attempt, from its events in order (a fold: the
    worker's heartbeat takes each poll's new events into the same dict). A stage moves to the
    end when its status changes, so the last entry is the latest; a progress line updates a
    stage in place; the job's own events only mark a new attempt."""
    for event in events:
        if event.stage == "job":
            if event.status == "running":
                stages.clear()  # a new attempt: only its stages count
            continue
        if event.status == PROGRESS:
            # What a running stage does now: its status stays.
            current = stages.get(event.stage) or StageProgress(status="running")
            stages[event.stage] = current.model_copy(update={"progress": event.detail})
            continue
        stages.pop(event.stage, None)
        stages[event.stage] = StageProgress(
            status=event.status, detail=event.detail, seconds=event.seconds
        )


def status_of(job: JobSummary, events: Iterable[LoggedEvent]) -> VerificationStatus:
    """A job's status document: its state, and each stage's progress in its last attempt."""
    stages: dict[str, StageProgress] = {}
    fold_stages(stages, events)
    return VerificationStatus(
        id=job.id,
        status=job.state,
        stages=stages,
        verdict=job.verdict,
        queued_at=_iso(job.created) or "",
        started_at=_iso(job.started),
        finished_at=_iso(job.finished),
        attempts=job.attempts,
        response=job.response,
    )
