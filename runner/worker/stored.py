"""The activities of payloads by reference: a task reference resolved from the artifact store
and verified (`selfbench.verify-stored`), and the pool's page and record calls.

A reference is a request document (runner.sidecar.request) whose `task` is the digest of the
task's files in the store (a TaskPayload JSON blob) and whose repository is a git URL or
`repoBlob`, the digest of a git bundle in the store. The worker fetches both by digest into its
cache (checked against the digest: a store written by someone else cannot change what a
reference means), verifies as `selfbench.verify` does, publishes the run's archive to the store
under the request's id, and answers with a summary of a few hundred bytes. The store then holds
the run: the worker's own copy is removed (unless `--keep-runs`), so its disk holds only what
is running and its caches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from runner.artifacts.address import DIGEST
from runner.artifacts.cachebound import BoundedBlobs
from runner.artifacts.runs import publish_run, published_request, run_record
from runner.artifacts.store import ArtifactStore, StoreError
from runner.sidecar.jobs import Job
from runner.sidecar.request import (
    ARCHIVE_GLOB,
    ARCHIVES,
    JobState,
    TaskPayload,
    VerificationRequest,
)
from runner.worker.activities import (
    MAX_REASON_BYTES,
    VerifyActivities,
    clip,
    failure_details,
    invalid_request,
    outcome,
)
from runner.worker.pool import MAX_REASON, PAGE_ACTIVITY, RECORD_ACTIVITY, VERIFY_STORED_ACTIVITY

log = logging.getLogger(__name__)
MAX_TASK_BYTES = 64 * 1024 * 1024  # a task's files, as the sidecar takes them (MAX_REQUEST_BYTES)
MAX_MANIFEST_BYTES = 512 * 1024 * 1024
MAX_SUMMARIES = 5000


def invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type="InvalidRequest", non_retryable=True)


def store_failure(exc: StoreError) -> ApplicationError:
    # Retried: a store that did not answer, or an object not yet visible, may be there next time.
    return ApplicationError(clip(str(exc), MAX_REASON_BYTES), type="StoreUnavailable")


def resolve(store: ArtifactStore, reference: Any) -> dict[str, Any]:
    """The request document a reference stands for: its task's files and its repository bundle
    fetched and checked (a local path in this worker's cache). Shape errors are InvalidRequest."""
    if not isinstance(reference, dict):
        raise invalid("the reference is not an object")
    task = reference.get("task")
    if not isinstance(task, str) or not DIGEST.fullmatch(task):
        raise invalid("field `task`: a reference's task is a digest (sha256:<64 hex>)")
    request = {k: v for k, v in reference.items() if k != "repoBlob"}
    request["task"] = store.get_json(task, limit=MAX_TASK_BYTES)
    bundle = reference.get("repoBlob")
    if bundle is not None:
        if not isinstance(bundle, str) or not DIGEST.fullmatch(bundle):
            raise invalid("field `repoBlob`: a digest (sha256:<64 hex>) of a git bundle")
        if reference.get("repo") is not None:
            raise invalid("field `repo`: give a repository or repoBlob, not both")
        request["repo"] = str(store.fetch(bundle))
    return request


def summary_of(job: Job, record: dict[str, Any]) -> dict[str, Any]:
    """The few hundred bytes a task's workflow keeps of a verification."""
    response = job.response
    report = (response.report if response is not None else None) or {}
    return {
        "id": job.id,
        "verdict": job.verdict or "infrastructure_failed",
        "reason": str(report.get("reason") or "")[:MAX_REASON],
        "runId": report.get("runId"),
        "seconds": report.get("seconds"),
        "reused": bool(response is not None and response.reused),
        "run": record["run"],
        "report": record["report"],
        "worker": socket.gethostname(),
    }


class StoredActivities:
    """The by-reference activities of one worker: its verify activities and its store."""

    def __init__(
        self,
        verify: VerifyActivities,
        store: ArtifactStore,
        *,
        keep_runs: bool = False,
        blobs: BoundedBlobs | None = None,
    ) -> None:
        self.verify = verify
        self.store = store
        self.keep_runs = keep_runs
        # The cache of fetched blobs under its budget (None: unbounded).
        self.blobs = blobs

    def _using(self, *digests: Any) -> contextlib.AbstractContextManager[None]:
        if self.blobs is None:
            return contextlib.nullcontext()
        return self.blobs.using(d for d in digests if isinstance(d, str))

    def green(self, fix_of: str) -> tuple[TaskPayload, str | None] | None:
        """The task and verdict of verification `fix_of` as the fleet published it (its run
        in the shared store, by the worker that verified it): where a fix's green verification
        ran on another worker. None when the store holds none."""
        found = published_request(self.store, fix_of)
        if found is None:
            return None
        raw, record = found
        try:
            request = VerificationRequest.model_validate_json(raw)
        except ValidationError:
            return None
        if request.id != fix_of:
            return None
        verdict = record.get("verdict")
        return request.task, verdict if isinstance(verdict, str) else None

    def _prune(self) -> None:
        if self.blobs is None:
            return
        pruned = self.blobs.prune()
        if pruned.removed:
            log.info(
                "store cache: removed %d blob(s), %.2f GB freed, %.2f GB kept",
                pruned.removed,
                pruned.freed_bytes / 1e9,
                pruned.kept_bytes / 1e9,
            )

    def _publish(self, job: Job) -> dict[str, Any]:
        archive = job.archive
        summary = {"id": job.id, "verdict": job.verdict, "runId": job.run_id}
        if not archive.is_dir():
            if job.run_id is not None:
                # Published and removed already: an activity retried after its answer was lost
                # finds the finished job, and the store's record is that run's.
                try:
                    existing = run_record(self.store, job.id)
                except StoreError:
                    existing = {}
                if existing.get("runId") == job.run_id:
                    return existing
            archive.mkdir(parents=True, exist_ok=True)
            if job.response is not None:
                (archive / "response.json").write_text(job.response.to_json() + "\n")
        record = publish_run(self.store, job.id, archive, summary)
        if not self.keep_runs:
            shutil.rmtree(archive, ignore_errors=True)
        return record

    def sweep(self) -> int:
        """Remove the archives a stop left; the number removed. Called when nothing runs (before
        the scheduler starts and after it stops): each is a run interrupted and handed back, or
        one that ended after its worker was killed and before it was published. Temporal runs
        each again, here or on another worker, and that run is the one published (publishing
        this one later could overwrite it); a retry that finds its finished job here publishes
        the job's recorded response (_publish). With --keep-runs every archive stays."""
        runs = self.verify.service.config.state_dir / ARCHIVES
        if self.keep_runs or not runs.is_dir():
            return 0
        left = sum(1 for p in runs.glob(ARCHIVE_GLOB) if p.is_dir())
        shutil.rmtree(runs, ignore_errors=True)
        return left

    @activity.defn(name=VERIFY_STORED_ACTIVITY)
    async def verify_stored(self, reference: Any) -> dict[str, Any]:
        held = reference if isinstance(reference, dict) else {}
        # Held before they are fetched: a pass of the cache's budget keeps them until the
        # verification that reads them has ended.
        try:
            with self._using(held.get("task"), held.get("repoBlob")):
                return await self._verify_stored(reference)
        finally:
            await asyncio.to_thread(self._prune)

    async def _verify_stored(self, reference: Any) -> dict[str, Any]:
        try:
            document = await asyncio.to_thread(resolve, self.store, reference)
        except StoreError as exc:
            raise store_failure(exc) from None
        try:
            parsed = VerificationRequest.model_validate(document)
        except ValidationError as exc:
            raise invalid_request(exc) from None
        job = await self.verify.follow(parsed)
        try:
            record = await asyncio.to_thread(self._publish, job)
        except StoreError as exc:
            raise store_failure(exc) from None
        if job.state is JobState.DONE and job.verdict != "infrastructure_failed":
            return summary_of(job, record)
        try:
            outcome(job)
        except ApplicationError as error:
            # The worker's archive path means nothing elsewhere: the details name the run in
            # the store instead.
            details = failure_details({}, [])
            if error.details and isinstance(error.details[0], dict):
                details = dict(error.details[0])
            details.pop("archive", None)
            details.update(run=record["run"], runId=job.run_id)
            placed = ApplicationError(
                error.message, details, type=error.type, non_retryable=error.non_retryable
            )
            return self.verify.answer(job, placed)
        raise AssertionError("outcome() answers a failed job with an error")  # pragma: no cover

    @activity.defn(name=PAGE_ACTIVITY)
    async def page(self, ask: Any) -> list[Any]:
        """References [offset, offset + limit) of a pool's manifest."""
        if not isinstance(ask, dict):
            raise invalid("the page request is not an object")
        manifest, offset, limit = ask.get("manifest"), ask.get("offset"), ask.get("limit")
        if not isinstance(manifest, str) or not DIGEST.fullmatch(manifest):
            raise invalid("field `manifest`: a digest (sha256:<64 hex>)")
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit < 1:
            raise invalid("fields `offset` and `limit`: an offset from 0 and a limit from 1")
        try:
            with self._using(manifest):
                references = await asyncio.to_thread(
                    self.store.get_json, manifest, limit=MAX_MANIFEST_BYTES
                )
        except StoreError as exc:
            raise store_failure(exc) from None
        if not isinstance(references, list):
            raise invalid(f"the manifest {manifest} is not a JSON list of references")
        return list(references[offset : offset + limit])

    @activity.defn(name=RECORD_ACTIVITY)
    async def record(self, ask: Any) -> str:
        """A segment's summaries as one blob in the store: its digest."""
        summaries = ask.get("summaries") if isinstance(ask, dict) else None
        if not isinstance(summaries, list) or len(summaries) > MAX_SUMMARIES:
            raise invalid(f"field `summaries`: a list of at most {MAX_SUMMARIES} summaries")
        try:
            return await asyncio.to_thread(self.store.put_json, summaries)
        except StoreError as exc:
            raise store_failure(exc) from None
