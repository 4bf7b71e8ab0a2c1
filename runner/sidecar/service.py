"""The sidecar's engine room: admission (repository policy, payload digest, reuse), a scheduler
bounded by `--jobs`, workers that run each verification as a `verify` child process (through
runner.supervise: a fork of a pre-imported server), cancellation, restart recovery and graceful
stop.

Why a child process per verification: a verification installs signal handlers, logs to its
run directory through the root logger and may be interrupted; in a process of its own it
cannot disturb another one, SIGTERM is its cancel button (its own handler removes its
containers), and the kernel stops it if the sidecar dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.children import process_is
from runner.model.settings import SharedSettings
from runner.sidecar.answers import Answers, Listener
from runner.sidecar.digests import PayloadDigests
from runner.sidecar.engineops import EngineOps
from runner.sidecar.fixes import Elsewhere, check_fix, green_of
from runner.sidecar.jobs import ConflictError, Job
from runner.sidecar.policy import RepositoryPolicy, RequestRefusedError
from runner.sidecar.request import (
    JobState,
    VerificationRequest,
)
from runner.sidecar.store import Store
from runner.sidecar.verification import Verification
from runner.supervise.launcher import Child, Launcher

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25
DIGEST_THREADS = 2
KILL_WAIT_SECONDS = 20.0  # how long a verification may take to remove its containers
SOURCE_HTTP = "http"
SOURCE_MAILBOX = "mailbox"


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    state_dir: Path
    jobs: int = 1
    # The sidecar's own verify settings, handed to each run.
    verify_settings: SharedSettings = field(default_factory=SharedSettings)
    digest_settings: dict[str, Any] = field(default_factory=dict)
    base_image: str | None = None  # its image id joins the digest
    allow_repo_roots: tuple[Path, ...] = ()
    allow_repo_urls: tuple[str, ...] = ()  # shell-style patterns of the whole URL
    grace_seconds: float = 30.0
    cache_budget: int | None = None  # bytes of task images kept, applied after each run
    python: str = sys.executable
    fork: bool | None = None  # children forked from a pre-imported server (default: env)


@dataclass(kw_only=True)
class _Running:
    job_id: str
    run_id: str
    thread: threading.Thread
    child: Child | None = None
    digest: str | None = None
    task_id: str | None = None
    started: float = field(default_factory=time.time)


def _wait_gone(pid: int, run_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_is(pid, run_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


class Service:
    def __init__(
        self,
        config: ServiceConfig,
        store: Store,
        *,
        engine: EngineOps | None = None,
        metrics: Any = None,
    ) -> None:
        self.config = config
        self.store = store
        self.engine = engine or EngineOps()
        self.launcher = Launcher(python=config.python, fork=config.fork)
        self.policy = RepositoryPolicy(roots=config.allow_repo_roots, urls=config.allow_repo_urls)
        self.digests = PayloadDigests(
            policy=self.policy,
            engine=self.engine,
            settings=config.digest_settings,
            base_image=config.base_image,
        )
        self.answers = Answers(store)
        self.answers.metrics = metrics
        self.verification = Verification(
            store=store,
            answers=self.answers,
            launcher=self.launcher,
            engine=self.engine,
            policy=self.policy,
            verify_settings=config.verify_settings,
            stopping=lambda: self.stopping,
            started=self._started,
        )
        # A fix's green verification where this store lacks it (a fleet's published run).
        self.green_elsewhere: Elsewhere | None = None
        self._wake = threading.Condition()
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._scheduler: threading.Thread | None = None
        # Digests need the repository (a fetch, for a URL): computed off the scheduler, so a
        # slow or hanging remote delays only its own request, never a reuse answer.
        self._digest_queue: queue.Queue[str] = queue.Queue()
        self._digesting: set[str] = set()

    @property
    def listeners(self) -> list[Listener]:
        """Called with each job as it finishes (the mailbox writes its response file)."""
        return self.answers.listeners

    @property
    def metrics(self) -> Any:
        return self.answers.metrics

    @metrics.setter
    def metrics(self, value: Any) -> None:
        self.answers.metrics = value

    # ---- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        """Start scheduling (call recover() first)."""
        self._scheduler = threading.Thread(target=self._schedule, name="scheduler", daemon=True)
        self._scheduler.start()
        for index in range(DIGEST_THREADS):
            threading.Thread(
                target=self._digest_worker, name=f"digest-{index}", daemon=True
            ).start()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def recover(self) -> int:
        """Requeue what was running when the last sidecar on this store died, after its
        verification process is gone and that run's containers are removed."""
        requeued = 0
        for job in self.store.running():
            if job.pid is not None and job.run_id and process_is(job.pid, job.run_id):
                log.info("stopping the orphaned verification of %s (pid %d)", job.id, job.pid)
                with contextlib.suppress(OSError):
                    os.kill(job.pid, signal.SIGTERM)
                if not _wait_gone(job.pid, job.run_id, KILL_WAIT_SECONDS):
                    with contextlib.suppress(OSError):
                        os.kill(job.pid, signal.SIGKILL)
                    _wait_gone(job.pid, job.run_id, 5.0)
            if job.run_id:
                removed = self.engine.remove_run(job.run_id)
                log.info("removed %d object(s) of the interrupted run %s", removed, job.run_id)
            self.store.requeue(job.id)
            self.answers.event(job.id, "queued", "requeued after the sidecar restarted")
            requeued += 1
        return requeued

    def stop(self, grace: float | None = None) -> None:
        """Take no more work; let running verifications finish within the grace period, then
        interrupt them (they remove their containers) and requeue them for the next start."""
        grace = self.config.grace_seconds if grace is None else grace
        deadline = time.monotonic() + grace
        self._stopping.set()
        self._notify()
        # Leave time for interrupted verifications to remove their containers.
        patience = max(0.0, grace - min(KILL_WAIT_SECONDS, grace / 2))
        while self._active() and time.monotonic() < deadline - (grace - patience):
            time.sleep(0.1)
        with self._lock:
            running = list(self._running.values())
        for entry in running:
            if entry.child is not None and entry.child.poll() is None:
                log.info("interrupting %s for shutdown", entry.job_id)
                entry.child.send_signal(signal.SIGTERM)
        for entry in running:
            entry.thread.join(max(0.1, deadline - time.monotonic()))
        for entry in running:
            if entry.child is not None and entry.child.poll() is None:
                entry.child.send_signal(signal.SIGKILL)
                entry.child.wait(5)
                self.engine.remove_run(entry.run_id)
                self.store.requeue(entry.job_id)
        if self._scheduler is not None:
            self._scheduler.join(5)
        self.launcher.close()
        self.engine.close()

    def _active(self) -> bool:
        with self._lock:
            return bool(self._running)

    # ---- requests ----------------------------------------------------------------------

    def submit(self, request: VerificationRequest, *, source: str) -> Job:
        """Record a request (committed before this returns) and wake the scheduler. Its
        archive (the task, the run, progress and report) is in the state directory, whatever
        channel it came through: nothing a sandbox writes can add to it."""
        if self.stopping:
            raise RequestRefusedError("stopping", "the sidecar is stopping; retry elsewhere")
        self.repository(request)
        if request.fix_of is None and request.fix_of_task is not None:
            raise RequestRefusedError(
                "fix-refused", "fixOfTask is the task of fixOf: give fixOf too", field="fixOfTask"
            )
        if request.fix_of is not None:
            check_fix(request, *green_of(self.store, request.fix_of, self.green_elsewhere))
        archive = self.config.state_dir / request.archive_path()
        try:
            job, new = self.store.add(request, source=source, archive=archive)
        except ConflictError as exc:
            raise RequestRefusedError("conflict", str(exc), field="id") from None
        if new:
            self.answers.event(job.id, "queued")
            self._notify()
        return job

    def repository(self, request: VerificationRequest) -> str | None:
        """The repository this request may use (runner.sidecar.policy)."""
        return self.policy.repository(request)

    def cancel(self, job_id: str) -> Job | None:
        job = self.store.request_cancel(job_id)
        if job is None or job.state.finished:
            return job
        if job.state is JobState.QUEUED:
            self.answers.finish(
                job, self.answers.cancelled(job), state=JobState.CANCELLED, verdict=None
            )
        else:
            with self._lock:
                entry = self._running.get(job_id)
            if entry is not None and entry.child is not None:
                entry.child.send_signal(signal.SIGTERM)
        self._notify()
        return self.store.get(job_id)

    def retry(self, job_id: str) -> bool:
        """Run a finished job again (a Temporal retry of an infrastructure failure)."""
        if not self.store.retry(job_id):
            return False
        self.answers.event(job_id, "queued", "retried")
        self._notify()
        return True

    def depth(self) -> tuple[int, int]:
        counts = self.store.counts()
        return counts.get(JobState.QUEUED.value, 0), counts.get(JobState.RUNNING.value, 0)

    # ---- scheduling --------------------------------------------------------------------

    def _notify(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def _schedule(self) -> None:
        while not self.stopping:
            try:
                self._admit()
            except Exception:
                log.exception("scheduler error")
            with self._wake:
                self._wake.wait(POLL_SECONDS * 4)

    def _admit(self) -> None:
        # The queue's light rows decide; a job's (possibly large) request is read only for
        # what needs it: a cancel's answer and a reuse.
        for entry in self.store.queue():
            if self.stopping:
                return
            if entry.cancel:
                job = self.store.get(entry.id)
                if job is not None and job.state is JobState.QUEUED:
                    self.answers.finish(
                        job, self.answers.cancelled(job), state=JobState.CANCELLED, verdict=None
                    )
                continue
            digest = entry.digest
            if digest is None:
                with self._lock:
                    if entry.id not in self._digesting:
                        self._digesting.add(entry.id)
                        self._digest_queue.put(entry.id)
                continue
            if digest:
                accepted = self.store.accepted_with(digest)
                if accepted is not None and accepted.id != entry.id:
                    job = self.store.get(entry.id)
                    if (
                        job is not None
                        and job.state is JobState.QUEUED
                        and self.answers.reuse(job, accepted)
                    ):
                        continue
            with self._lock:
                busy = list(self._running.values())
            if digest and any(r.digest == digest for r in busy):
                continue  # the same payload is running: its report may answer this one
            if entry.task_id and any(r.task_id == entry.task_id for r in busy):
                continue  # one build of a task's images at a time; this one hits the cache
            if len(busy) >= self.config.jobs:
                continue  # later ones may still be answered by reuse
            self._launch(entry.id, entry.task_id, digest)

    def _digest_worker(self) -> None:
        while not self.stopping:
            try:
                job_id = self._digest_queue.get(timeout=1.0)
            except queue.Empty:
                continue
            try:
                job = self.store.get(job_id)
                if job is not None and job.state is JobState.QUEUED and not job.cancel:
                    self.store.set_digest(job_id, self.digests.of(job))
            except Exception:
                log.exception("payload digest of %s failed", job_id)
                self.store.set_digest(job_id, "")
            finally:
                with self._lock:
                    self._digesting.discard(job_id)
                self._notify()

    def _launch(self, job_id: str, task_id: str | None, digest: str | None) -> None:
        from runner.run.pipeline import new_run_id

        run_id = new_run_id()
        if not self.store.start(job_id, run_id=run_id):
            return
        thread = threading.Thread(
            target=self._work, args=(job_id,), name=f"job-{job_id[:40]}", daemon=True
        )
        with self._lock:
            self._running[job_id] = _Running(
                job_id=job_id, run_id=run_id, thread=thread, digest=digest, task_id=task_id
            )
        self.answers.event(job_id, "running", f"run {run_id}")
        thread.start()

    # ---- one verification --------------------------------------------------------------

    def _work(self, job_id: str) -> None:
        try:
            job = self.store.get(job_id)
            assert job is not None and job.run_id is not None
            self.verification.run(job, job.run_id)
        except Exception as exc:
            log.exception("worker error for %s", job_id)
            job = self.store.get(job_id)
            if job is not None and not job.state.finished:
                self.answers.fail(job, "internal", f"the sidecar failed: {type(exc).__name__}")
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            self._notify()
            self._budget()

    def _budget(self) -> None:
        """The image cache budget, after a run: what the verifications still running use (or
        used since the oldest of them started) stays (runner.engine.cachebudget)."""
        if self.config.cache_budget is None or self.stopping:
            return
        with self._lock:
            since = min((r.started for r in self._running.values()), default=time.time())
        freed = self.engine.apply_budget(self.config.cache_budget, protect_since=since)
        if freed and self.metrics is not None:
            self.metrics.freed(freed)

    def _started(self, job_id: str, child: Child) -> None:
        with self._lock:
            self._running[job_id].child = child
