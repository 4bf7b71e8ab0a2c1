"""`batch --temporal --store`: the client side of a pool. Each task's files go into the store
once (a TaskPayload JSON blob), its repository as a git bundle blob (a local repository or
bundle) or its URL; the references as one manifest blob; a `selfbench.pool` workflow started
with the manifest's digest; the live view from its `progress` query and its running children;
the summaries read back from the store, each run named by its store address.
"""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from runner.artifacts.store import ArtifactStore, StoreError
from runner.base.errors import InfrastructureError, Interrupted, RepositoryError, UsageError
from runner.batch.model import BatchResult, TaskOutcome
from runner.compile.repository import bundle_local, is_remote
from runner.worker.client import (
    TemporalBatch,
    ViewCalls,
    await_result,
    connect,
    request_name,
    stage_summary,
    task_request,
)
from runner.worker.pool import (
    DEFAULT_SEGMENT,
    POOL_WORKFLOW,
    PoolInput,
    PoolSummary,
    bounds_problem,
)

# Children described per look for their stage (a describe each): the rest show as started.
DESCRIBED_PER_LOOK = 8
MAX_REPORT_BYTES = 64 * 1024 * 1024
MAX_PAGE_BYTES = 256 * 1024 * 1024


def reference_of(
    store: ArtifactStore, request: dict[str, Any], bundles: dict[str, str]
) -> dict[str, Any]:
    """A request document as a reference: its task a blob, its local repository a bundle blob
    (put once per repository: `bundles` maps a repository to its blob's digest)."""
    reference = {k: v for k, v in request.items() if k != "task"}
    reference["task"] = store.put_json(request["task"])
    repo = reference.pop("repo", None)
    if isinstance(repo, str) and is_remote(repo):
        reference["repo"] = repo
    elif isinstance(repo, str):
        if repo not in bundles:
            path = Path(repo.removeprefix("file://"))
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                raise RepositoryError(f"repository {repo}: {exc.strerror or exc}") from None
            if stat.S_ISREG(mode):
                bundles[repo] = store.put_file(path)
            else:
                commit = str(request["task"]["definition"].get("baseCommit", ""))
                with tempfile.TemporaryDirectory(prefix="bundle.") as tmp:
                    bundle = Path(tmp) / "repo.bundle"
                    bundle_local(path, commit, bundle, label=repo)
                    bundles[repo] = store.put_file(bundle)
        reference["repoBlob"] = bundles[repo]
    return reference


def run_pool(
    options: TemporalBatch, store: ArtifactStore, targets: list[Path], view: ViewCalls
) -> BatchResult:
    problem = bounds_problem(len(targets), DEFAULT_SEGMENT)
    if problem is not None:
        raise UsageError(f"the pool cannot run: {problem}", field="TASK_DIRS")
    run = request_name(options.workflow_id, 100) or "pool"
    requests = [task_request(t, run=run, index=i) for i, t in enumerate(targets)]
    started = time.monotonic()
    bundles: dict[str, str] = {}
    references = [reference_of(store, request, bundles) for request in requests]
    manifest = store.put_json(references)
    view.note(f"{len(references)} task(s) in the store {store.url} (manifest {manifest[:19]}…)")
    outcomes = [
        TaskOutcome(target=str(t), task_id=r["task"]["definition"].get("taskId"))
        for t, r in zip(targets, requests, strict=True)
    ]
    pool = PoolInput(
        manifest=manifest,
        total=len(references),
        concurrency=options.concurrency,
        max_attempts=options.max_attempts,
        heartbeat_timeout_seconds=options.heartbeat_timeout_seconds,
    )
    done: set[int] = set()
    by_id = {str(r["id"]): i for i, r in enumerate(requests)}
    summary = asyncio.run(_drive(options, run, pool, by_id, outcomes, done, view))
    for digest in summary.pages:
        page = store.get_json(digest, limit=MAX_PAGE_BYTES)
        for item in page if isinstance(page, list) else []:
            index = by_id.get(str(item.get("id"))) if isinstance(item, dict) else None
            if index is None:
                continue
            _fill(outcomes[index], item, store)
            if index not in done:  # finished between two looks at a continuation's edge
                done.add(index)
                view.finished(outcomes[index], len(done), len(outcomes))
    result = BatchResult(tasks=outcomes, engines=[{"name": "temporal", "url": options.address}])
    result.seconds = time.monotonic() - started
    return result


def _take(outcome: TaskOutcome, summary: dict[str, Any]) -> None:
    """What the live view shows of a task's summary: its verdict, reason and time."""
    outcome.verdict = str(summary.get("verdict") or "infrastructure_failed")
    outcome.reason = str(summary.get("reason") or "")
    outcome.seconds = float(summary.get("seconds") or 0.0)


def _fill(outcome: TaskOutcome, summary: dict[str, Any], store: ArtifactStore) -> TaskOutcome:
    """A task's outcome from its summary: the report read back from the store by digest."""
    _take(outcome, summary)
    outcome.engine = str(summary.get("worker") or "") or outcome.engine
    if isinstance(summary.get("run"), str):
        outcome.run_dir = summary["run"]
    digest = summary.get("report")
    if isinstance(digest, str):
        try:
            report = store.get_json(digest, limit=MAX_REPORT_BYTES)
        except StoreError as exc:
            outcome.reason = outcome.reason or f"its report is not readable: {exc}"
        else:
            outcome.report = report if isinstance(report, dict) else None
    return outcome


async def _drive(
    options: TemporalBatch,
    run: str,
    pool: PoolInput,
    index_of: dict[str, int],
    outcomes: list[TaskOutcome],
    done: set[int],
    view: ViewCalls,
) -> PoolSummary:
    from temporalio.client import WorkflowFailureError

    client = await connect(options.address, options.namespace, options.tls)
    started = await client.start_workflow(
        POOL_WORKFLOW, pool, id=run, task_queue=options.task_queue, result_type=PoolSummary
    )
    # Queries and describe go to the newest run of the chain (the pool continues as new).
    latest = client.get_workflow_handle(run)
    view.note(f"workflow {run} ({POOL_WORKFLOW}) on task queue {options.task_queue!r}")
    shown: set[int] = set()

    async def look() -> bool:
        return await _look(client, latest, run, index_of, outcomes, shown, done, view)

    try:
        summary: PoolSummary = await await_result(started.result, look, view, options.address, run)
        return summary
    except asyncio.CancelledError:
        await latest.cancel()
        raise Interrupted("the batch was interrupted; its workflow is cancelled") from None
    except WorkflowFailureError as exc:
        raise InfrastructureError(f"the pool workflow {run} failed: {exc.cause or exc}") from None


async def _look(
    client: Any,
    handle: Any,
    run: str,
    index_of: dict[str, int],
    outcomes: list[TaskOutcome],
    shown: set[int],
    done: set[int],
    view: ViewCalls,
) -> bool:
    """What runs now (the pool's pending children, the stage of a few) and what finished;
    whether the frontend answered."""
    try:
        described = await handle.describe()
        progress = await handle.query("progress", len(done))
    except Exception:  # a transient look; the pages are what counts
        return False
    looked = 0
    for child in described.raw_description.pending_children:
        name = child.workflow_id.removeprefix(f"{run}/")
        index = index_of.get(name)
        if index is None or index in done:
            continue
        if index not in shown:
            shown.add(index)
            view.started(outcomes[index], "a worker")
        if looked < DESCRIBED_PER_LOOK:
            looked += 1
            beat = await _child_stage(client, child.workflow_id)
            if beat:
                view.stage(outcomes[index], beat)
    for item in progress.get("finished", []) if isinstance(progress, dict) else []:
        index = index_of.get(str(item.get("id"))) if isinstance(item, dict) else None
        if index is None or index in done:
            continue
        done.add(index)
        _take(outcomes[index], item)
        view.finished(outcomes[index], len(done), len(outcomes))
    return True


async def _child_stage(client: Any, workflow_id: str) -> str:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
        for pending in described.raw_description.pending_activities:
            if pending.heartbeat_details.payloads:
                (details,) = await client.data_converter.decode(pending.heartbeat_details.payloads)
                return stage_summary(details)
    except Exception:
        return ""
    return ""
