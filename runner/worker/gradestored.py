"""`selfbench.grade-stored`: one prediction of an evaluation graded on a worker (`evaluate
--temporal --store`). The reference names a sealed bundle (its export archive, a blob) and a
patch (a blob) by digest; the worker fetches both into its cache (checked against the digest),
unpacks the bundle (regular files and directories under its task's folder only, bounded), and
runs `grade` on it as a child of its own, with the worker's build options: the seal is checked
with the keys this worker trusts (a fleet trusts the key that sealed its tasks), and the grade is
the one `grade` gives. The grade's run directory is published to the store under the
reference's id and its grade.json put beside it; the answer is a summary of a few hundred bytes.

A grade that could not run (its build, its engine) is an infrastructure failure, retried by the
workflow's policy; a cancellation or the worker's shutdown stops the child (it removes its
containers)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from runner.artifacts.runs import publish_run
from runner.artifacts.store import ArtifactStore, StoreError
from runner.base.errors import InvalidTaskError
from runner.batch.evalresults import grade_report
from runner.batch.evalsources import unpack_bundle_archive
from runner.run.grading import GRADE_FILE, GradeReport
from runner.supervise.job import GradeJob
from runner.supervise.launcher import Launcher
from runner.worker.activities import INFRASTRUCTURE, clip
from runner.worker.pool import GRADE_STORED_ACTIVITY, MAX_REASON, grade_reference_problem
from runner.worker.stored import invalid, store_failure

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5
MAX_BUNDLE_BLOB_BYTES = 8 * 1024**3
MAX_PATCH_BLOB_BYTES = 512 * 1024 * 1024
# What a grade's verdict is in the pool's words (its counts): rewarded is the prediction's win.
POOL_VERDICT = {
    "rewarded": "accepted",
    "not-rewarded": "rejected",
    "invalid": "invalid",
    "infrastructure_failed": "infrastructure_failed",
}


class GradeActivities:
    """A worker's grade activity: its store, where grades run, and grade's options."""

    def __init__(
        self,
        store: ArtifactStore,
        work: Path,
        grade_options: tuple[str, ...],
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.work = work
        self.grade_options = grade_options
        self.env = env or {}
        self.launcher = Launcher()

    @activity.defn(name=GRADE_STORED_ACTIVITY)
    async def grade_stored(self, reference: Any) -> dict[str, Any]:
        problem = grade_reference_problem(reference)
        if problem is not None:
            raise invalid(f"the grade's reference: {problem}")
        started = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{reference['id'][:40]}.", dir=self.work))
        try:
            try:
                bundle, patch = await asyncio.to_thread(self._fetch, reference, work)
            except StoreError as exc:
                raise store_failure(exc) from None
            report = await self._grade(reference, bundle, patch, work / "run")
            if report is None or report.verdict == "infrastructure_failed":
                why = report.detail if report is not None else "grade left no result"
                raise ApplicationError(clip(why, MAX_REASON), type=INFRASTRUCTURE)
            try:
                return await asyncio.to_thread(
                    self._publish, reference, report, work / "run", time.monotonic() - started
                )
            except StoreError as exc:
                raise store_failure(exc) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _fetch(self, reference: dict[str, Any], work: Path) -> tuple[Path, Path]:
        """The bundle unpacked below `work` and the patch, each fetched by its digest."""
        blob = self.store.fetch(reference["bundle"], limit=MAX_BUNDLE_BLOB_BYTES)
        patch = self.store.fetch(reference["patch"], limit=MAX_PATCH_BLOB_BYTES)
        try:
            bundle = unpack_bundle_archive(blob, reference["taskId"], work / "bundle")
        except InvalidTaskError as exc:
            raise invalid(f"the bundle {reference['bundle']}: {exc.message}") from None
        return bundle, patch

    async def _grade(
        self, reference: dict[str, Any], bundle: Path, patch: Path, run_dir: Path
    ) -> GradeReport | None:
        options = list(self.grade_options)
        # The evaluation's way of judging, over the worker's own (the last one given counts).
        options += ["--evidence-checks", str(reference.get("evidenceChecks", "all"))]
        if reference.get("rewardOnly"):
            options.append("--reward-only")
        job = GradeJob(
            target=bundle,
            patch=patch,
            run_dir=run_dir,
            run_id=f"fleet-grade-{reference['id'][:16]}-{uuid.uuid4().hex[:10]}",
            stderr=run_dir.with_name("grade.stderr.log"),
            options=tuple(options),
            env=self.env,
        )
        child = await asyncio.to_thread(self.launcher.start, job)
        try:
            while await asyncio.to_thread(child.wait, POLL_SECONDS) is None:
                activity.heartbeat({"id": reference["id"]})
        except asyncio.CancelledError:
            what = f"grade {reference['id'][:16]} ({job.run_id})"
            log.info("%s: cancelled; it stops and removes its containers", what)
            child.send_signal(signal.SIGTERM)  # it removes its containers
            ended = await asyncio.to_thread(child.wait, 60)
            log.info("%s: stopped (exit %s)", what, ended)
            if activity.is_worker_shutdown():
                raise ApplicationError(
                    "this worker stopped before the grade ended; another worker takes it",
                    type="WorkerStopping",
                ) from None
            raise
        report = grade_report(run_dir)
        log.info(
            "grade %s (%s): %s (exit %s)",
            reference["id"][:16],
            job.run_id,
            report.verdict if report is not None else "no result",
            child.poll(),
        )
        return report

    def _publish(
        self, reference: dict[str, Any], report: GradeReport, run_dir: Path, seconds: float
    ) -> dict[str, Any]:
        """The grade's run in the store under the reference's id, its grade.json beside it."""
        shutil.rmtree(run_dir / "bundle", ignore_errors=True)  # the reference names it
        graded = self.store.put_file(run_dir / GRADE_FILE)
        summary = {"id": reference["id"], "verdict": POOL_VERDICT[report.verdict]}
        record = publish_run(self.store, reference["id"], run_dir, summary)
        return {
            **summary,
            "gradeVerdict": report.verdict,
            "reason": report.detail[:MAX_REASON],
            "gradeReport": graded,
            "run": record["run"],
            "seconds": round(seconds, 3),
            "worker": socket.gethostname(),
        }

    def close(self) -> None:
        self.launcher.close()
