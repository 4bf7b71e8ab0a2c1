"""The `selfbench.batch` workflow: many `selfbench.verify` activities, at most `concurrency` at
once, one typed summary (counts, each request's verdict, the responses).

Workflow code runs in Temporal's deterministic sandbox and is replayed: it only schedules
activities and gathers their results (no clock, no I/O, no runner import).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

BATCH_WORKFLOW = "selfbench.batch"
VERIFY_ACTIVITY = "selfbench.verify"  # the activity's name (runner.worker.activities takes it)
VERDICTS = ("accepted", "rejected", "invalid", "infrastructure_failed")


@dataclass
class BatchInput:
    """What a client starts the workflow with (plain JSON from any language)."""

    requests: list[dict[str, Any]]
    concurrency: int = 4
    # A verification's whole time, and the longest a worker may stay silent before its
    # activity runs again elsewhere.
    verify_timeout_seconds: float = 4 * 3600.0
    heartbeat_timeout_seconds: float = 60.0
    max_attempts: int = 3


@dataclass
class TaskResult:
    id: str
    verdict: str  # accepted | rejected | invalid | infrastructure_failed
    response: dict[str, Any] | None = None
    error: str | None = None  # the activity's last error, when it gave no response
    error_type: str | None = None
    # That error's details (runner.worker.activities.failure_details: runId, archive,
    # buildLogTail), when it carried any.
    details: dict[str, Any] | None = None


@dataclass
class BatchSummary:
    counts: dict[str, int] = field(default_factory=dict)
    tasks: list[TaskResult] = field(default_factory=list)


def _verdict(response: dict[str, Any]) -> str:
    report = response.get("report") or {}
    verdict = report.get("verdict")
    return verdict if verdict in VERDICTS else "infrastructure_failed"


_LIMITS: dict[str, tuple[int, int] | tuple[float, float]] = {
    "concurrency": (1, 1000),
    "verify_timeout_seconds": (1.0, 7 * 24 * 3600.0),
    "heartbeat_timeout_seconds": (1.0, 24 * 3600.0),
    "max_attempts": (1, 100),
}


def settings_problem(raw: dict[str, Any]) -> str | None:
    """Why the batch's own settings cannot run (None: they can): each a number in range. A bad
    one used to fail the workflow task on every replay, and the batch stayed RUNNING forever."""
    return limits_problem(raw, _LIMITS)


def limits_problem(
    raw: dict[str, Any], limits: dict[str, tuple[int, int] | tuple[float, float]]
) -> str | None:
    """Why one of `raw`'s settings named in `limits` is out of its (low, high) range (an int
    where low is one); None when each given one is in range."""
    for name, (low, high) in limits.items():
        if name not in raw:
            continue
        value = raw[name]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if isinstance(low, int) and not isinstance(value, int):
            number = False
        if not number or not (low <= value <= high):  # NaN fails the range too
            return f"{name} must be a number from {low} to {high}, not {str(value)[:50]}"
    return None


def single_input(kind: str, given: tuple[Any, ...]) -> Any:
    """The one input a workflow run takes. Declared as `*given`: a run started with no input
    or with two would otherwise fail its workflow task on the signature, which Temporal retries
    without end; here it fails the workflow, once, saying why."""
    if len(given) != 1:
        raise ApplicationError(
            f"the {kind} workflow takes one input (a JSON object); it was started with "
            f"{len(given)}",
            type="InvalidRequest",
            non_retryable=True,
        )
    return given[0]


def batch_input(raw: Any) -> tuple[BatchInput, str | None]:
    """The workflow's input as given (any JSON), as a BatchInput, and why its settings are
    refused (None when they are not). Requests are checked one by one as they run."""
    if not isinstance(raw, dict):
        return BatchInput(requests=[]), "the input is not an object"
    requests = raw.get("requests")
    if not isinstance(requests, list):
        return BatchInput(requests=[]), "requests is not a list"
    problem = settings_problem(raw)
    if problem is not None:
        return BatchInput(requests=requests), problem
    known = {k: raw[k] for k in _LIMITS if k in raw}
    return BatchInput(requests=requests, **known), None


def request_problem(request: Any) -> str | None:
    """Why one request cannot be scheduled at all (the activity checks the rest)."""
    if not isinstance(request, dict):
        return "is not an object"
    if not isinstance(request.get("id"), str) or not request["id"]:
        return "has no id"
    return None


def activity_id(index: int, request: dict[str, Any]) -> str:
    """A request's activity id in its batch (what `describe` lists a pending one by)."""
    return f"{index}:{request.get('id')}"


@workflow.defn(name=BATCH_WORKFLOW)
class BatchWorkflow:
    def __init__(self) -> None:
        self._done: list[TaskResult] = []

    @workflow.query(name="finished")
    def finished(self) -> list[TaskResult]:
        """The requests answered so far (a client's live view)."""
        return list(self._done)

    @workflow.run
    async def run(self, *given: Any) -> BatchSummary:
        # The input is read as plain JSON and checked here: one that does not decode into
        # BatchInput, or a bad setting, would otherwise fail every workflow task.
        batch, problem = batch_input(single_input(BATCH_WORKFLOW, given))
        bound = asyncio.Semaphore(max(1, batch.concurrency))
        retry = RetryPolicy(
            maximum_attempts=max(1, batch.max_attempts),
            non_retryable_error_types=["InvalidRequest", "Cancelled"],
        )

        async def one(index: int, request: Any) -> TaskResult:
            why = problem or request_problem(request)
            if why is not None:
                name = request.get("id") if isinstance(request, dict) else None
                result = TaskResult(
                    id=str(name or f"requests[{index}]"),
                    verdict="invalid",
                    error=f"requests[{index}]: {why}" if problem is None else why,
                    error_type="InvalidRequest",
                )
            else:
                result = await attempt(index, request)
            self._done.append(result)
            return result

        async def attempt(index: int, request: dict[str, Any]) -> TaskResult:
            name = str(request.get("id") or "?")
            async with bound:
                try:
                    response = await workflow.execute_activity(
                        VERIFY_ACTIVITY,
                        request,
                        start_to_close_timeout=timedelta(seconds=batch.verify_timeout_seconds),
                        heartbeat_timeout=timedelta(seconds=batch.heartbeat_timeout_seconds),
                        retry_policy=retry,
                        result_type=dict,
                        activity_id=activity_id(index, request),
                    )
                except ActivityError as exc:
                    cause = exc.cause
                    if not isinstance(cause, ApplicationError):
                        return TaskResult(
                            id=name, verdict="infrastructure_failed", error=str(cause or exc)
                        )
                    details = cause.details[0] if cause.details else None
                    return TaskResult(
                        id=name,
                        verdict="invalid"
                        if cause.type == "InvalidRequest"
                        else "infrastructure_failed",
                        error=cause.message,
                        error_type=cause.type,
                        details=details if isinstance(details, dict) else None,
                    )
            return TaskResult(id=name, verdict=_verdict(response), response=response)

        tasks = list(await asyncio.gather(*(one(i, r) for i, r in enumerate(batch.requests))))
        counts = {verdict: 0 for verdict in VERDICTS}
        for task in tasks:
            counts[task.verdict] += 1
        return BatchSummary(counts=counts, tasks=tasks)
