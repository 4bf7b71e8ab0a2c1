"""The fleet's workflows: `selfbench.pool` (a task list by reference, any length) and
`selfbench.task` (one task, a child workflow of its own).

Everything large stays in the artifact store; the histories hold references and compact
summaries only:
- a pool's input names a manifest blob (the task references) and its length; it reads the
  manifest a page at a time (`selfbench.pool-page`), runs one child workflow per task, at most
  `concurrency` at once, and after each segment of `segment` tasks writes the segment's
  summaries to the store as one blob (`selfbench.pool-record`) and continues as new, carrying
  only its cursor, its counts and the page digests (so its history stays a few thousand events
  whatever the pool's length);
- a task's child runs `selfbench.verify-stored` with its own retries and timeouts, so a task's
  attempts are in its own history, and returns a summary of a few hundred bytes: the verdict, the
  reason, the run's address in the store and the report's digest.

Versioning: these names are the contract with running workflows. A change that schedules
something different for the same history goes behind `workflow.patched(<id>)`, or ships as a
new workflow name with the old one still registered (tests/unit/test_replay.py replays recorded
histories of every registered workflow against the current code).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

from runner.model.stages import Gate
from runner.worker.workflows import VERDICTS, limits_problem, request_problem, single_input

POOL_WORKFLOW = "selfbench.pool"
TASK_WORKFLOW = "selfbench.task"
VERIFY_STORED_ACTIVITY = "selfbench.verify-stored"
# `evaluate --temporal`: a pool of kind "grade" runs one selfbench.grade child per prediction,
# whose activity grades a patch against a sealed bundle, both blobs in the store.
GRADE_WORKFLOW = "selfbench.grade"
GRADE_STORED_ACTIVITY = "selfbench.grade-stored"
VERIFY_KIND, GRADE_KIND = "verify", Gate.GRADE.value
POOL_KINDS = (VERIFY_KIND, GRADE_KIND)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
EVIDENCE_CHECKS = ("all", "canaries", "in-process")
PAGE_ACTIVITY = "selfbench.pool-page"
RECORD_ACTIVITY = "selfbench.pool-record"
MAX_REASON = 300
# The store calls a pool makes itself: short, retried.
STORE_CALL = timedelta(minutes=5)
STORE_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=30))

# Every continuation is validated again, so these stay as wide as any pool ever started with;
# a new pool is held to the tighter bounds below.
POOL_LIMITS: dict[str, tuple[int, int] | tuple[float, float]] = {
    "total": (0, 10_000_000),
    "concurrency": (1, 1000),
    "segment": (1, 5000),
    "page": (1, 1000),
    "cursor": (0, 10_000_000),
    "verify_timeout_seconds": (1.0, 7 * 24 * 3600.0),
    "heartbeat_timeout_seconds": (1.0, 24 * 3600.0),
    "max_attempts": (1, 100),
}


# A new pool (cursor 0) is held to these, behind a patch so that a pool started before them
# keeps its settings through every continuation. A segment's summaries travel as one activity
# input (`selfbench.pool-record`): up to about 1.2 KB each (a 128-character id, a 300-character
# reason, a store address), so 500 of them stay under a third of Temporal's 2 MB payload limit
# (5,000 could pass it), and a segment's children, about 10 events each, stay far under one
# history's 51,200 events. Every continuation carries the page digests (75 bytes as JSON
# each): 10,000 pages keep it and the pool's result under 1 MB.
BOUNDS_PATCH = "selfbench.pool.bounds-1"
DEFAULT_SEGMENT = 250
MAX_SEGMENT = 500
MAX_PAGES = 10_000


def bounds_problem(total: int, segment: int) -> str | None:
    """Why a new pool of `total` tasks in segments of `segment` would pass Temporal's limits."""
    if segment > MAX_SEGMENT:
        return (
            f"segment {segment} is over {MAX_SEGMENT}: a segment's summaries travel as one payload"
        )
    pages = -(-total // max(1, segment))
    if pages > MAX_PAGES:
        return (
            f"{total} tasks in segments of {segment} make {pages} pages, over {MAX_PAGES}: "
            f"give a larger segment (up to {MAX_SEGMENT}) or split the pool"
        )
    return None


@dataclass
class TaskSettings:
    verify_timeout_seconds: float = 4 * 3600.0
    heartbeat_timeout_seconds: float = 60.0
    max_attempts: int = 3


@dataclass
class PoolInput:
    """What a client starts a pool with, and what each continuation carries."""

    manifest: str  # the digest of a JSON list of task references in the store
    total: int
    concurrency: int = 4
    segment: int = DEFAULT_SEGMENT
    page: int = 50
    verify_timeout_seconds: float = 4 * 3600.0
    heartbeat_timeout_seconds: float = 60.0
    max_attempts: int = 3
    cursor: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    pages: list[str] = field(default_factory=list)  # digests of the segments' summaries
    # What each child does: verify a task (selfbench.task), or grade a patch (selfbench.grade).
    # A pool started before kinds has none: "verify", its children as they were.
    kind: str = VERIFY_KIND


@dataclass
class PoolSummary:
    total: int
    counts: dict[str, int]
    pages: list[str]


def pool_input(raw: Any) -> tuple[PoolInput | None, str | None]:
    """A pool's input as given (any JSON) and why it cannot run (None when it can)."""
    if not isinstance(raw, dict):
        return None, "the input is not an object"
    manifest = raw.get("manifest")
    if not isinstance(manifest, str) or not _DIGEST.fullmatch(manifest):
        return None, "manifest is not a digest (sha256:<64 hex>)"
    problem = limits_problem(raw, POOL_LIMITS)
    if problem is not None:
        return None, problem
    counts, pages = raw.get("counts", {}), raw.get("pages", [])
    # What a continuation carries: counts by verdict, the pages' digests (a pool that took
    # anything else would fail only after every child ran, and be retried without end).
    well_formed = (
        isinstance(counts, dict)
        and all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in counts.items())
        and isinstance(pages, list)
        and all(isinstance(d, str) and _DIGEST.fullmatch(d) for d in pages)
    )
    if not well_formed:
        return None, "counts or pages is malformed"
    known = {k: raw[k] for k in POOL_LIMITS if k in raw}
    if "total" not in known:
        return None, "total (the manifest's length) is missing"
    kind = raw.get("kind", VERIFY_KIND)
    if kind not in POOL_KINDS:
        return None, f"kind is one of {', '.join(POOL_KINDS)}"
    return PoolInput(manifest=manifest, counts=counts, pages=pages, kind=kind, **known), None


def grade_reference_problem(reference: Any) -> str | None:
    """Why a grade's reference cannot be scheduled (None when it can): its id, its task, the
    digests of its bundle and its patch in the store, and how to grade."""
    if not isinstance(reference, dict):
        return "is not an object"
    for name in ("id", "taskId"):
        if not isinstance(reference.get(name), str) or not _NAME.fullmatch(reference[name]):
            return f"field `{name}`: [A-Za-z0-9._-], at most 128"
    for name in ("bundle", "patch"):
        if not isinstance(reference.get(name), str) or not _DIGEST.fullmatch(reference[name]):
            return f"field `{name}`: a digest (sha256:<64 hex>) in the store"
    if not isinstance(reference.get("rewardOnly", False), bool):
        return "field `rewardOnly`: true or false"
    if reference.get("evidenceChecks", "all") not in EVIDENCE_CHECKS:
        return f"field `evidenceChecks`: one of {', '.join(EVIDENCE_CHECKS)}"
    unknown = set(reference) - {"id", "taskId", "bundle", "patch", "rewardOnly", "evidenceChecks"}
    if unknown:
        return f"fields not known: {', '.join(sorted(unknown))[:200]}"
    return None


def summary_of_failure(name: str, error: BaseException) -> dict[str, Any]:
    """A task's summary when its activity (or child) failed: why, and where its run is."""
    cause = error.cause if isinstance(error, (ActivityError, ChildWorkflowError)) else error
    if isinstance(cause, ActivityError):
        cause = cause.cause
    kind = cause.type if isinstance(cause, ApplicationError) else type(cause).__name__
    details: Any = None
    if isinstance(cause, ApplicationError) and cause.details:
        details = cause.details[0]
    summary: dict[str, Any] = {
        "id": name,
        "verdict": "invalid" if kind == "InvalidRequest" else "infrastructure_failed",
        "reason": str(getattr(cause, "message", None) or cause or error)[:MAX_REASON],
        "errorType": kind,
    }
    if isinstance(details, dict):
        summary.update({k: details[k] for k in ("run", "runId") if details.get(k)})
    return summary


async def _one_activity(
    activity: str, raw: dict[str, Any], reference: Any, name: str
) -> dict[str, Any]:
    """A child's one activity (a verification or a grade) under the pool's timeouts and
    retries, and its summary (a failure's too)."""
    settings = TaskSettings(**{k: raw[k] for k in asdict(TaskSettings()) if k in raw})
    try:
        summary: dict[str, Any] = await workflow.execute_activity(
            activity,
            reference,
            start_to_close_timeout=timedelta(seconds=settings.verify_timeout_seconds),
            heartbeat_timeout=timedelta(seconds=settings.heartbeat_timeout_seconds),
            retry_policy=RetryPolicy(
                maximum_attempts=settings.max_attempts,
                non_retryable_error_types=["InvalidRequest", "Cancelled"],
            ),
            result_type=dict,
        )
    except ActivityError as exc:
        return summary_of_failure(name, exc)
    if summary.get("verdict") not in VERDICTS:
        summary["verdict"] = "infrastructure_failed"
    return summary


@workflow.defn(name=TASK_WORKFLOW)
class TaskWorkflow:
    @workflow.run
    async def run(self, *given: Any) -> dict[str, Any]:
        raw = single_input(TASK_WORKFLOW, given)
        reference = raw.get("reference") if isinstance(raw, dict) else None
        problem = request_problem(reference)
        name = str(reference.get("id")) if isinstance(reference, dict) else "?"
        if problem is not None and isinstance(raw, dict) and isinstance(raw.get("name"), str):
            name = raw["name"]  # the pool's name for a reference without an id
        if problem is None and isinstance(raw, dict):
            problem = limits_problem(raw, POOL_LIMITS)
        if problem is not None:
            return {"id": name, "verdict": "invalid", "reason": problem, "errorType": "Input"}
        assert isinstance(raw, dict) and isinstance(reference, dict)
        return await _one_activity(VERIFY_STORED_ACTIVITY, raw, reference, name)


@workflow.defn(name=GRADE_WORKFLOW)
class GradeWorkflow:
    """One prediction of an evaluation: its grade in an activity with its own retries."""

    @workflow.run
    async def run(self, *given: Any) -> dict[str, Any]:
        raw = single_input(GRADE_WORKFLOW, given)
        reference = raw.get("reference") if isinstance(raw, dict) else None
        problem = grade_reference_problem(reference)
        name = raw.get("name") if isinstance(raw, dict) else None
        name = name if isinstance(name, str) else "?"
        if problem is None and isinstance(raw, dict):
            problem = limits_problem(raw, POOL_LIMITS)
        if problem is not None:
            return {"id": name, "verdict": "invalid", "reason": problem, "errorType": "Input"}
        assert isinstance(raw, dict)
        return await _one_activity(GRADE_STORED_ACTIVITY, raw, reference, name)


@workflow.defn(name=POOL_WORKFLOW)
class PoolWorkflow:
    def __init__(self) -> None:
        self._done: list[dict[str, Any]] = []
        self._base = 0
        self._total = 0

    @workflow.query(name="progress")
    def progress(self, after: int = 0) -> dict[str, Any]:
        """How far the pool is: `done` of `total`, and the summaries finished after the first
        `after` (of this continuation's; earlier ones are in the pages)."""
        start = max(0, after - self._base)
        return {
            "total": self._total,
            "done": self._base + len(self._done),
            "base": self._base,
            "finished": self._done[start:],
        }

    @workflow.run
    async def run(self, *given: Any) -> PoolSummary:
        pool, problem = pool_input(single_input(POOL_WORKFLOW, given))
        if pool is None:
            raise ApplicationError(f"the pool cannot run: {problem}", type="InvalidRequest")
        if pool.cursor == 0 and workflow.patched(BOUNDS_PATCH):
            problem = bounds_problem(pool.total, pool.segment)
            if problem is not None:
                raise ApplicationError(f"the pool cannot run: {problem}", type="InvalidRequest")
        self._base, self._total = pool.cursor, pool.total
        end = min(pool.total, pool.cursor + pool.segment)
        bound = asyncio.Semaphore(pool.concurrency)
        me = workflow.info().workflow_id
        task_settings = {k: getattr(pool, k) for k in asdict(TaskSettings())}

        async def child(index: int, reference: Any) -> None:
            # A reference without an id (the child answers it invalid) is named by its place.
            given = reference.get("id") if isinstance(reference, dict) else None
            name = given if isinstance(given, str) and given else f"manifest-{index}"
            async with bound:
                try:
                    summary = await workflow.execute_child_workflow(
                        TASK_WORKFLOW if pool.kind == VERIFY_KIND else GRADE_WORKFLOW,
                        {"reference": reference, "name": name, **task_settings},
                        id=f"{me}/{name}",
                        parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                        result_type=dict,
                    )
                except ChildWorkflowError as exc:
                    summary = summary_of_failure(name, exc)
                except WorkflowAlreadyStartedError:
                    # Two references with one id in the manifest: the second is refused.
                    summary = {
                        "id": name,
                        "verdict": "invalid",
                        "reason": f"the id {name} is given twice in the pool",
                        "errorType": "InvalidRequest",
                    }
            self._done.append(summary)

        running: list[asyncio.Task[None]] = []
        offset = pool.cursor
        while offset < end:
            page: list[Any] = await workflow.execute_activity(
                PAGE_ACTIVITY,
                {
                    "manifest": pool.manifest,
                    "offset": offset,
                    "limit": min(pool.page, end - offset),
                },
                start_to_close_timeout=STORE_CALL,
                retry_policy=STORE_RETRY,
                result_type=list,
            )
            if not page:
                break
            running.extend(asyncio.create_task(child(offset + i, r)) for i, r in enumerate(page))
            offset += len(page)
        await asyncio.gather(*running)
        done = sorted(self._done, key=lambda s: str(s.get("id")))
        digest: str = await workflow.execute_activity(
            RECORD_ACTIVITY,
            {"summaries": done},
            start_to_close_timeout=STORE_CALL,
            retry_policy=STORE_RETRY,
            result_type=str,
        )
        counts = {verdict: pool.counts.get(verdict, 0) for verdict in VERDICTS}
        for summary in done:
            verdict = summary.get("verdict")
            counts[verdict if verdict in VERDICTS else "infrastructure_failed"] += 1
        pages = [*pool.pages, digest]
        if offset < pool.total and offset > pool.cursor:
            # The next segment in a fresh history: only the cursor, counts and pages carry on.
            nxt = PoolInput(**{**asdict(pool), "cursor": offset, "counts": counts, "pages": pages})
            workflow.continue_as_new(nxt)
        return PoolSummary(total=offset, counts=counts, pages=pages)
