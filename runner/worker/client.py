"""`batch --temporal`: the batch's tasks as sidecar request documents, run by the
`selfbench.batch` workflow on whatever workers poll the task queue; the live view from the
workflow's pending activities (their heartbeats carry the stage events) and its `finished`
query; the summary as the same BatchResult a local batch writes (batch.json, .md, .html, JUnit).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from runner.base.errors import InfrastructureError, Interrupted
from runner.batch.model import BatchResult, TaskOutcome
from runner.compile.repository import is_remote
from runner.compile.taskdir import load_authored_task
from runner.worker.workflows import BATCH_WORKFLOW, BatchInput, BatchSummary, activity_id

POLL_SECONDS = 1.0
CONNECT_SECONDS = 30.0
# How long `batch --temporal` waits for a frontend that stopped answering before it gives up
# on the wait (the workflow and its workers carry on without this client). Measured: a
# 1,000-task pool's client died at task 501 on one `http2 error` while the dev server's store
# stalled for four minutes; the SDK's own retries give up after 10 s (its RetryConfig).
OUTAGE_SECONDS = 900.0
OUTAGE_BACKOFF_SECONDS = (1.0, 30.0)
# The gRPC statuses of a frontend that is restarting, overloaded or cut off: CANCELLED (the
# SDK's own timeout, seen), UNKNOWN (`transport error`: the connection closed under a long
# poll, seen on a restart), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and UNAVAILABLE (`http2
# error`, seen). Waiting on a result only reads, so a wrong guess costs time, never a verdict.
TRANSIENT_STATUSES = frozenset({1, 2, 4, 8, 14})
# A result wait pending this long, with the frontend answering looks, is a healthy one: only
# then does the outage clock start again (an error that recurs at once never resets it).
HEALTHY_WAIT_SECONDS = 10.0

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class TemporalBatch:
    address: str
    namespace: str
    task_queue: str
    concurrency: int
    tls: Any = None
    workflow_id: str = ""
    max_attempts: int = 3
    heartbeat_timeout_seconds: float = 60.0


@dataclass(frozen=True, kw_only=True)
class ViewCalls:
    started: Callable[[TaskOutcome, str], None]
    stage: Callable[[TaskOutcome, str], None]
    finished: Callable[[TaskOutcome, int, int], None]
    note: Callable[[str], None]


def task_request(target: Path, *, run: str, index: int) -> dict[str, Any]:
    """An authored task directory as a sidecar request document (loaded and checked first:
    bad input is an error naming the file and field, before anything starts)."""
    task = load_authored_task(target)
    definition = json.loads(task.definition_bytes)
    repo = task.definition.repo
    if repo and not is_remote(repo):
        repo = str((target / repo).resolve())
    name = request_name(target.resolve().name, 64)
    return {
        "id": f"{run}-{index:04d}",
        "run": run,
        "stage": "batch",
        "candidate": name or f"task-{index}",
        "round": 0,
        "verify": index,
        "task": {
            "definition": definition,
            "instruction": task.instruction,
            "testPatch": task.test_patch.decode(),
            "goldPatch": task.gold_patch.decode(),
        },
        "repo": repo,
    }


def request_name(text: str, limit: int) -> str:
    """`text` as a request name (runner.sidecar.request.NAME_PATTERN): letters, digits, `.`,
    `_` and `-`, never dots alone."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in text)
    return name[:limit].strip(".")


def run_batch(options: TemporalBatch, targets: list[Path], view: ViewCalls) -> BatchResult:
    run = request_name(options.workflow_id, 100) or f"batch-{uuid.uuid4().hex[:12]}"
    requests = [task_request(t, run=run, index=i) for i, t in enumerate(targets)]
    outcomes = [
        TaskOutcome(target=str(t), task_id=r["task"]["definition"].get("taskId"))
        for t, r in zip(targets, requests, strict=True)
    ]
    started = time.monotonic()
    result = asyncio.run(_drive(options, run, requests, outcomes, view))
    result.seconds = time.monotonic() - started
    return result


async def connect(address: str, namespace: str, tls: Any) -> Any:
    """A Temporal client (the worker's and `batch --temporal`'s), or an infrastructure error
    saying the frontend cannot be reached."""
    from temporalio.client import Client

    try:
        return await asyncio.wait_for(
            Client.connect(address, namespace=namespace, tls=tls or False), CONNECT_SECONDS
        )
    except (OSError, RuntimeError, TimeoutError) as exc:
        raise InfrastructureError(
            f"cannot reach Temporal at {address}: {str(exc)[:300] or type(exc).__name__}"
        ) from None


async def _drive(
    options: TemporalBatch,
    run: str,
    requests: list[dict[str, Any]],
    outcomes: list[TaskOutcome],
    view: ViewCalls,
) -> BatchResult:
    from temporalio.client import WorkflowFailureError

    client = await connect(options.address, options.namespace, options.tls)
    handle = await client.start_workflow(
        BATCH_WORKFLOW,
        BatchInput(
            requests=requests,
            concurrency=options.concurrency,
            max_attempts=options.max_attempts,
            heartbeat_timeout_seconds=options.heartbeat_timeout_seconds,
        ),
        id=run,
        task_queue=options.task_queue,
        result_type=BatchSummary,
    )
    view.note(f"workflow {run} on task queue {options.task_queue!r} at {options.address}")
    by_activity = {activity_id(i, r): i for i, r in enumerate(requests)}
    shown: set[int] = set()
    done: set[int] = set()

    async def look() -> bool:
        return await _show(client, handle, by_activity, outcomes, shown, done, view, len(requests))

    try:
        summary: BatchSummary = await await_result(handle.result, look, view, options.address, run)
    except asyncio.CancelledError:
        await handle.cancel()
        raise Interrupted("the batch was interrupted; its workflow is cancelled") from None
    except WorkflowFailureError as exc:
        raise InfrastructureError(f"the batch workflow {run} failed: {exc.cause or exc}") from None
    index_of = {r["id"]: i for i, r in enumerate(requests)}
    for task in summary.tasks:
        index = index_of[task.id]
        outcome = _outcome(outcomes[index], task.verdict, task.response, task.error, task.details)
        if index not in done:
            done.add(index)
            view.finished(outcome, len(done), len(requests))
    return BatchResult(tasks=outcomes, engines=[{"name": "temporal", "url": options.address}])


async def _show(
    client: Any,
    handle: Any,
    by_activity: dict[str, int],
    outcomes: list[TaskOutcome],
    shown: set[int],
    done: set[int],
    view: ViewCalls,
    total: int,
) -> bool:
    """What runs where now (the pending activities and their last heartbeat), and what
    finished since the last look; whether the frontend answered."""
    try:
        described = await handle.describe()
        finished = await handle.query("finished")
    except Exception:  # a transient look; the result is what counts
        return False
    for pending in described.raw_description.pending_activities:
        index = by_activity.get(pending.activity_id)
        if index is None or index in done:
            continue
        outcome = outcomes[index]
        worker = pending.last_worker_identity or "a worker"
        if index not in shown:
            shown.add(index)
            outcome.engine = worker
            outcome.attempts = max(1, pending.attempt)
            view.started(outcome, worker)
        beat = await _last_stage(client, pending)
        if beat:
            view.stage(outcome, beat)
    index_of = {key.split(":", 1)[1]: i for key, i in by_activity.items()}
    for record in finished if isinstance(finished, list) else []:
        index = index_of.get(str(record.get("id"))) if isinstance(record, dict) else None
        if index is None or index in done:
            continue
        done.add(index)
        view.finished(
            _outcome(
                outcomes[index],
                record.get("verdict"),
                record.get("response"),
                record.get("error"),
                record.get("details"),
            ),
            len(done),
            total,
        )
    return True


async def await_result(
    result: Callable[[], Awaitable[T]],
    look: Callable[[], Awaitable[bool]],
    view: ViewCalls,
    address: str,
    workflow_id: str,
) -> T:
    """A workflow's result, with a look at its progress every POLL_SECONDS. A frontend that
    stops answering (a restart, a stalled store, a cut network) is waited for, up to
    OUTAGE_SECONDS since it last answered: the workflow lives on the server and its workers
    retry on their own, so one lost long poll must not end a pool of hours."""
    from temporalio.service import RPCError

    answered = time.monotonic()
    pause = OUTAGE_BACKOFF_SECONDS[0]
    while True:
        waiting = asyncio.ensure_future(result())
        began = time.monotonic()
        try:
            while not waiting.done():
                if await look() and time.monotonic() - began >= HEALTHY_WAIT_SECONDS:
                    answered = time.monotonic()
                    pause = OUTAGE_BACKOFF_SECONDS[0]
                await asyncio.wait({waiting}, timeout=POLL_SECONDS)
            return waiting.result()
        except RPCError as exc:
            if int(exc.status) not in TRANSIENT_STATUSES:
                raise
            silent = time.monotonic() - answered
            if silent > OUTAGE_SECONDS:
                raise InfrastructureError(
                    f"Temporal at {address} has not answered for {silent:.0f} s "
                    f"({exc.message or exc.status.name}); the workflow {workflow_id} may still "
                    f"be running: `temporal workflow result --workflow-id {workflow_id}` "
                    "waits for it"
                ) from None
            view.note(
                f"Temporal at {address} does not answer ({exc.message or exc.status.name}); "
                f"waiting for it, up to {OUTAGE_SECONDS - silent:.0f} s more"
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, OUTAGE_BACKOFF_SECONDS[1])
        finally:
            waiting.cancel()


async def _last_stage(client: Any, pending: Any) -> str:
    """Where a running task is, from its activity's last heartbeat: its running stages, else
    the last one that ended ("" before the first heartbeat)."""
    if not pending.heartbeat_details.payloads:
        return ""
    try:
        (details,) = await client.data_converter.decode(pending.heartbeat_details.payloads)
    except Exception:
        return ""
    return stage_summary(details)


def stage_summary(details: Any) -> str:
    """A heartbeat's details in a few words: "nop running, oracle running", "oracle passed"."""
    if not isinstance(details, dict):
        return ""
    stages = details.get("stages")
    if isinstance(stages, dict) and stages:
        states = [
            (str(name), str(state.get("status", "")))
            for name, state in stages.items()
            if isinstance(state, dict)
        ]
        running = [
            f"{name}: {state['progress']}" if state.get("progress") else f"{name} running"
            for name, state in stages.items()
            if isinstance(state, dict) and state.get("status") == "running"
        ]
        if running:
            return ", ".join(running)
        return " ".join(states[-1]) if states else ""
    # A worker of an earlier version: the events since its previous heartbeat.
    events = details.get("events")
    if not isinstance(events, list) or not events or not isinstance(events[-1], dict):
        return ""
    return f"{events[-1].get('stage')} {events[-1].get('status')}"


def _outcome(
    outcome: TaskOutcome, verdict: Any, response: Any, error: Any, details: Any
) -> TaskOutcome:
    """A task's result from the workflow: its response, or for a failed activity its error and
    the error's details (where the failed run's archive is on its worker)."""
    report = response.get("report") if isinstance(response, dict) else None
    outcome.verdict = str(verdict or "infrastructure_failed")
    outcome.report = report if isinstance(report, dict) else None
    if outcome.report is not None:
        outcome.reason = str(outcome.report.get("reason") or "")
        outcome.seconds = float(outcome.report.get("seconds") or 0.0)
    else:
        outcome.reason = str(error or "")
    source = response if isinstance(response, dict) else details
    archive = source.get("archive") if isinstance(source, dict) else None
    if archive:
        outcome.run_dir = f"{archive}/run"
    return outcome
