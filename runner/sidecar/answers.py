"""How a job ends and what it says on its way: the response (stored once, written into its
archive, handed to the listeners that deliver it), the sidecar's own events, and the metrics."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
from collections.abc import Callable
from typing import Any

from runner.base.safeio import write_atomic
from runner.model.layout import REPORT_FILE
from runner.run.events import LoggedEvent
from runner.sidecar.jobs import Job
from runner.sidecar.request import ErrorBody, JobState, VerificationResponse
from runner.sidecar.store import Store

log = logging.getLogger(__name__)

Listener = Callable[[Job], None]


class Answers:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.listeners: list[Listener] = []
        self.metrics: Any = None

    def error(self, job: Job, code: str, message: str) -> VerificationResponse:
        return VerificationResponse(
            id=job.id,
            status="error",
            archive=str(job.archive),
            error=ErrorBody(code=code, message=message),
        )

    def fail(self, job: Job, code: str, message: str) -> None:
        """End `job` in an error response (code, message)."""
        self.finish(job, self.error(job, code, message), state=JobState.ERROR, verdict=None)

    def cancelled(self, job: Job) -> VerificationResponse:
        return self.error(job, "cancelled", "cancelled (DELETE); its containers were removed")

    def finish(
        self,
        job: Job,
        response: VerificationResponse,
        *,
        state: JobState,
        verdict: str | None,
        detail: str | None = None,
    ) -> None:
        with contextlib.suppress(OSError):
            if job.archive.is_dir():
                write_atomic(job.archive / "response.json", response.to_json() + "\n")
        if not self.store.finish(job.id, response, state=state, verdict=verdict):
            return
        if detail is None:
            detail = verdict or (response.error.message if response.error else "")
        self.event(job.id, state.value, detail)
        if self.metrics is not None:
            self.metrics.finished(verdict or state.value)
        finished = self.store.get(job.id)
        if finished is None:
            return
        for listener in list(self.listeners):
            try:
                listener(finished)
            except Exception:
                log.exception("response listener failed for %s", job.id)

    def event(self, job_id: str, status: str, detail: str = "") -> None:
        """A sidecar-side event (stage `job`), in the same sequence as the verification's."""
        self.store.add_events(
            job_id,
            [
                LoggedEvent(
                    seq=0,
                    at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                    stage="job",
                    status=status,
                    detail=detail,
                    seconds=None,
                )
            ],
        )

    def reuse(self, job: Job, accepted: Job) -> bool:
        """Answer `job` with the accepted report of an identical payload (its archive holds
        the request and that report); False when that job has no report to give."""
        source = accepted.response
        if source is None or source.report is None:
            return False
        report = source.report
        archive = job.archive
        with contextlib.suppress(OSError):
            archive.mkdir(parents=True, exist_ok=True)
            write_atomic(archive / "request.json", job.request.to_json())
            write_atomic(archive / REPORT_FILE, json.dumps(report, indent=2) + "\n")
        response = VerificationResponse(
            id=job.id,
            status="done",
            report=report,
            reused=True,
            reused_from=str(report.get("runId") or accepted.run_id or accepted.id),
            archive=str(archive),
        )
        if self.metrics is not None:
            self.metrics.reused()
        self.finish(
            job,
            response,
            state=JobState.DONE,
            verdict=str(report.get("verdict")),
            detail=f"{report.get('verdict')} (the report of {accepted.id}, reused)",
        )
        return True
