"""`evaluate --temporal --store`: the client side of an evaluation graded by the fleet. Each
task's sealed bundle goes into the store once (as export archives it: read through its seal),
each patch as a blob, the references as one manifest; a `selfbench.pool` of kind "grade" runs
one `selfbench.grade` child per prediction on the workers (runner.worker.gradestored); each
grade's grade.json is read back from the store by digest and becomes the prediction's result
here, signed and kept for the resume as a local grade's is. Ctrl-C cancels the pool (its
children's grades stop and remove their containers); what has no result is graded next run."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runner.artifacts.store import ArtifactStore, StoreError
from runner.base.errors import InfrastructureError, Interrupted, RunnerError
from runner.batch.evalresults import Instance, graded_result, result_of, write_result
from runner.model.evaluation import InstanceResult
from runner.present.export import Accepted, write_bundle_archive
from runner.run.grading import GradeReport
from runner.worker.client import connect
from runner.worker.fleet import MAX_PAGE_BYTES
from runner.worker.pool import GRADE_KIND, POOL_WORKFLOW, PoolInput, PoolSummary

MAX_GRADE_BYTES = 64 * 1024 * 1024
POLL_SECONDS = 1.0


@dataclass(frozen=True, kw_only=True)
class FleetGrade:
    address: str
    namespace: str
    task_queue: str
    store: ArtifactStore
    concurrency: int
    max_attempts: int
    evidence_checks: str = "all"
    reward_only: bool = False
    tls: Any = None

    def grade(
        self,
        todo: list[Instance],
        results_dir: Path,
        workflow_id: str,
        *,
        note: Callable[[str], None],
        finished: Callable[[InstanceResult, int, int], None],
        results: list[InstanceResult],
    ) -> None:
        """runner.batch.evaluation.FleetGrader: grade `todo` on the fleet; each result written
        (signed) as it is read back, and added to `results` (what an interruption leaves there
        was graded)."""
        if not todo:
            return
        found = references(self, todo)
        manifest = self.store.put_json(found)
        note(
            f"{len(found)} prediction(s) in the store {self.store.url} (manifest {manifest[:19]}…)"
        )
        pool = PoolInput(
            manifest=manifest,
            total=len(found),
            concurrency=self.concurrency,
            max_attempts=self.max_attempts,
            kind=GRADE_KIND,
        )
        by_key = {instance.key: instance for instance in todo}
        total = len(todo)

        def take(summary: Any) -> None:
            instance = (
                by_key.pop(str(summary.get("id")), None) if isinstance(summary, dict) else None
            )
            if instance is None:
                return
            result = _result(self.store, instance, summary, self)
            write_result(results_dir, result)
            results.append(result)
            finished(result, total - len(by_key), total)

        done = asyncio.run(_drive(self, pool, workflow_id, take, note))
        for digest in done.pages:
            try:
                page = self.store.get_json(digest, limit=MAX_PAGE_BYTES)
            except (StoreError, ValueError, RecursionError, RunnerError) as exc:
                note(f"a page of the pool's summaries ({digest}) is not readable: {exc}")
                continue
            for summary in page if isinstance(page, list) else []:
                take(summary)


def fleet_key_options(evidence_checks: str, reward_only: bool) -> tuple[str, ...]:
    """What a result's key holds of how it was graded on the fleet: the workers build with
    their own options; the evaluation chooses only how the evidence is judged."""
    return (
        "fleet",
        "--evidence-checks",
        evidence_checks,
        *(["--reward-only"] if reward_only else []),
    )


def references(options: FleetGrade, todo: list[Instance]) -> list[dict[str, Any]]:
    """Each prediction as a reference: its bundle's archive and its patch put in the store."""
    store = options.store
    bundles: dict[str, str] = {}
    found = []
    for instance in todo:
        task = instance.task
        if task.task_id not in bundles:
            with tempfile.TemporaryDirectory(prefix="evaluate-bundle.") as tmp:
                archive = Path(tmp) / f"{task.task_id}.tar.gz"
                run = Accepted(
                    run_dir=task.bundle,
                    bundle=task.bundle,
                    task_id=task.task_id,
                    run_id=task.run_id or "",
                )
                with archive.open("wb") as handle:
                    write_bundle_archive(handle, run)
                bundles[task.task_id] = store.put_file(archive)
        found.append(
            {
                "id": instance.key,
                "taskId": task.task_id,
                "bundle": bundles[task.task_id],
                "patch": store.put_file(instance.prediction.patch),
                "evidenceChecks": options.evidence_checks,
                "rewardOnly": options.reward_only,
            }
        )
    return found


def _not_this(
    store: ArtifactStore, instance: Instance, report: GradeReport, run: str, options: FleetGrade
) -> str | None:
    """Why a grade read back from the fleet is not this prediction's, or contradicts itself
    (None when it is its own): a confused worker, or a store that holds another grade."""
    prediction = instance.prediction
    if report.task_id != instance.task.task_id:
        return f"is of task {report.task_id}"
    if Path(report.patch or "").name != prediction.patch_sha256:
        return "is of another patch"
    if report.patch_bytes != prediction.patch_bytes:
        return "is of a patch of another size"
    if run != store.url.run_address(instance.key):
        return "names another run"
    if report.census != "sealed" or report.reward_only != options.reward_only:
        return "was not graded as asked (sealed census, --reward-only as given)"
    reward = report.reward.reward if report.reward is not None else None
    if (report.verdict == "rewarded") != (reward == 1):
        return f"says {report.verdict} with reward {reward}"
    return None


def _result(
    store: ArtifactStore, instance: Instance, summary: dict[str, Any], options: FleetGrade
) -> InstanceResult:
    """A prediction's result from its grade's summary: its grade.json read back by digest."""
    run = str(summary.get("run") or "")
    digest = summary.get("gradeReport")
    reason = str(summary.get("reason") or summary.get("verdict") or "no grade")
    if not isinstance(digest, str):
        return result_of(instance, status="error", detail=f"the fleet: {reason}", run_dir=run)
    try:
        report = GradeReport.model_validate(store.get_json(digest, limit=MAX_GRADE_BYTES))
    except (StoreError, ValidationError, ValueError, RecursionError, RunnerError) as exc:
        detail = f"its grade.json ({digest}) is not readable: {str(exc)[:200]}"
        return result_of(instance, status="error", detail=detail, run_dir=run)
    problem = _not_this(store, instance, report, run, options)
    if problem is not None:
        detail = f"the fleet's grade ({digest}) {problem}: not taken"
        return result_of(instance, status="error", detail=detail, run_dir=run)
    result = graded_result(instance, report, run, [])
    result.logs = []  # they are in the run's archive in the store (`logs <run>`)
    return result


async def _drive(
    options: FleetGrade,
    pool: PoolInput,
    workflow_id: str,
    take: Callable[[Any], None],
    note: Callable[[str], None],
) -> PoolSummary:
    from temporalio.client import WorkflowFailureError

    client = await connect(options.address, options.namespace, options.tls)
    started = await client.start_workflow(
        POOL_WORKFLOW, pool, id=workflow_id, task_queue=options.task_queue, result_type=PoolSummary
    )
    latest = client.get_workflow_handle(workflow_id)
    note(f"workflow {workflow_id} ({POOL_WORKFLOW}, kind grade) on {options.task_queue!r}")
    seen = 0
    waiting = asyncio.ensure_future(started.result())
    try:
        while not waiting.done():
            await asyncio.wait({waiting}, timeout=POLL_SECONDS)
            try:
                progress = await latest.query("progress", seen)
            except Exception:  # a transient look: the pages are what counts
                continue
            for item in progress.get("finished", []) if isinstance(progress, dict) else []:
                seen += 1
                take(item)
        result: PoolSummary = waiting.result()
        return result
    except asyncio.CancelledError:
        await latest.cancel()
        raise Interrupted("the evaluation was interrupted; its workflow is cancelled") from None
    except WorkflowFailureError as exc:
        raise InfrastructureError(
            f"the pool workflow {workflow_id} failed: {exc.cause or exc}"
        ) from None
    finally:
        waiting.cancel()
