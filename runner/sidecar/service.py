"""The sidecar's engine room: admission (repository policy, payload digest, reuse), a scheduler
bounded by `--jobs`, workers that run each verification as a `selfbench-runner verify` child
process, cancellation, restart recovery and graceful stop.

Why a child process per verification: a verification installs signal handlers, logs to its
run directory through the root logger and may be interrupted; in a process of its own it
cannot disturb another one, SIGTERM is its cancel button (its own handler removes its
containers), and the kernel stops it if the sidecar dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fnmatch
import json
import logging
import os
import queue
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import __version__
from runner.base.children import process_is
from runner.base.errors import RunnerError
from runner.base.safeio import is_within, write_atomic
from runner.model.settings import child_environment
from runner.model.stages import STAGE_NAMES
from runner.run.events import LoggedEvent, read_events
from runner.sidecar.request import (
    ErrorBody,
    ErrorDetail,
    JobState,
    VerificationRequest,
    VerificationResponse,
    payload_digest,
)
from runner.sidecar.store import ConflictError, Job, Store
from runner.supervise.job import VERIFY_CODES, ChildResult, VerifyJob
from runner.supervise.launcher import Child, Launcher

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25
DIGEST_THREADS = 2
KILL_WAIT_SECONDS = 20.0  # how long a verification may take to remove its containers
SOURCE_HTTP = "http"
SOURCE_MAILBOX = "mailbox"
_STAGE_STATUSES = frozenset({"running", "passed", "failed", "error", "skipped"})


class RequestRefusedError(Exception):
    """The request is well formed but not allowed here (a repository outside the allowed
    roots, a taken id or archive, a stopping sidecar)."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def body(self) -> ErrorBody:
        return ErrorBody(
            code=self.code,
            message=self.message,
            problems=[ErrorDetail(field=self.field, message=self.message)] if self.field else [],
        )


class EngineOps:
    """The few Docker calls the sidecar makes itself (through runner.engine.docker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: Any = None
        self._ping_at = 0.0
        self._ping_ok = False

    def _get(self) -> Any:
        from runner.engine.docker import connect

        if self._engine is None:
            self._engine = connect(timeout=30)
        return self._engine

    def reachable(self) -> bool:
        with self._lock:
            if time.monotonic() - self._ping_at < 2.0:
                return self._ping_ok
            try:
                self._get()._ping()
                self._ping_ok = True
            except Exception:
                self._ping_ok = False
                self._engine = None
            self._ping_at = time.monotonic()
            return self._ping_ok

    def remove_run(self, run_id: str) -> int:
        from runner.plan.types import LABEL_RUN, LABEL_RUNNER

        with self._lock:
            try:
                return int(self._get().cleanup({LABEL_RUNNER: "1", LABEL_RUN: run_id}))
            except (RunnerError, Exception) as exc:
                log.warning("could not remove the containers of run %s: %s", run_id, exc)
                self._engine = None
                return 0

    def image_id(self, ref: str) -> str | None:
        with self._lock:
            try:
                info = self._get().image(ref)
            except Exception:
                self._engine = None
                return None
            return str(info.id) if info is not None else None

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                with contextlib.suppress(Exception):
                    self._engine.close()
            self._engine = None


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    state_dir: Path
    jobs: int = 1
    verify_args: tuple[str, ...] = ()  # the sidecar's own verify options, passed to each run
    digest_settings: dict[str, Any] = field(default_factory=dict)
    base_image: str | None = None  # its image id joins the digest
    allow_repo_roots: tuple[Path, ...] = ()
    allow_repo_urls: tuple[str, ...] = ()  # shell-style patterns of the whole URL
    grace_seconds: float = 30.0
    python: str = sys.executable
    fork: bool | None = None  # children forked from a pre-imported server (default: env)


Listener = Callable[[Job], None]


@dataclass(kw_only=True)
class _Running:
    job_id: str
    run_id: str
    thread: threading.Thread
    child: Child | None = None
    digest: str | None = None
    task_id: str | None = None


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
        self.metrics = metrics
        self.listeners: list[Listener] = []
        self._wake = threading.Condition()
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._scheduler: threading.Thread | None = None
        self._digest_cache: dict[str, tuple[float, str | None]] = {}
        # Digests need the repository (a fetch, for a URL): computed off the scheduler, so a
        # slow or hanging remote delays only its own request, never a reuse answer.
        self._digest_queue: queue.Queue[str] = queue.Queue()
        self._digesting: set[str] = set()

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
            self._event(job.id, "queued", "requeued after the sidecar restarted")
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
        archive = self.config.state_dir / request.archive_path()
        try:
            job, new = self.store.add(request, source=source, archive=archive)
        except ConflictError as exc:
            raise RequestRefusedError("conflict", str(exc), field="id") from None
        if new:
            self._event(job.id, "queued")
            self._notify()
        return job

    def repository(self, request: VerificationRequest) -> str | None:
        """The repository this request may use: git URLs matching an --allow-repo-url
        pattern, local paths only (absolute and) under an allowed root, resolved through
        symbolic links."""
        from runner.compile.repository import is_remote

        spec = request.repo or request.definition_repo()
        where = "repo" if request.repo else "task.definition.repo"
        if spec is None:
            return None
        local = spec[len("file://") :] if spec.startswith("file://") else None
        if local is None and is_remote(spec):
            # Fetched from this host: only where the operator said requests may point.
            if any(fnmatch.fnmatchcase(spec, p) for p in self.config.allow_repo_urls):
                return spec
            allowed = (
                "it matches no --allow-repo-url pattern"
                if self.config.allow_repo_urls
                else "this sidecar allows no git URLs (start it with --allow-repo-url PATTERN)"
            )
            raise RequestRefusedError(
                "repository-refused", f"git URL {spec!r} refused: {allowed}", field=where
            )
        path = Path(local if local is not None else spec)
        if not path.is_absolute():
            raise RequestRefusedError(
                "repository-refused",
                f"{spec!r} is a relative path; the sidecar takes a git URL or an absolute "
                "path under an --allow-repo-root directory",
                field=where,
            )
        if not self.config.allow_repo_roots:
            raise RequestRefusedError(
                "repository-refused",
                f"local repository {spec!r} refused: this sidecar allows no local "
                "repositories (start it with --allow-repo-root DIR)",
                field=where,
            )
        real = Path(os.path.realpath(path))
        if not any(
            is_within(real, Path(os.path.realpath(r))) for r in self.config.allow_repo_roots
        ):
            raise RequestRefusedError(
                "repository-refused",
                f"local repository {spec!r} is not under an --allow-repo-root directory",
                field=where,
            )
        return str(real)

    def cancel(self, job_id: str) -> Job | None:
        job = self.store.request_cancel(job_id)
        if job is None or job.state.finished:
            return job
        if job.state is JobState.QUEUED:
            self._finish(job, self._cancelled(job), state=JobState.CANCELLED, verdict=None)
        else:
            with self._lock:
                entry = self._running.get(job_id)
            if entry is not None and entry.child is not None:
                entry.child.send_signal(signal.SIGTERM)
        self._notify()
        return self.store.get(job_id)

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
                    self._finish(job, self._cancelled(job), state=JobState.CANCELLED, verdict=None)
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
                        and self._reuse(job, accepted)
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
                    self.store.set_digest(job_id, self._digest(job))
            except Exception:
                log.exception("payload digest of %s failed", job_id)
                self.store.set_digest(job_id, "")
            finally:
                with self._lock:
                    self._digesting.discard(job_id)
                self._notify()

    def _digest(self, job: Job) -> str:
        """The payload digest, or "" when it cannot be known (no reuse then)."""
        from runner.compile.repository import resolve_repository, tree_of

        request = job.request
        commit = request.base_commit()
        try:
            spec = self.repository(request)
            if spec is None or commit is None or len(commit) != 40:
                return ""
            repo = resolve_repository(spec, spec, commit)
            tree = tree_of(repo, commit)
        except (RequestRefusedError, RunnerError) as exc:
            log.info("no payload digest for %s: %s", job.id, exc)
            return ""
        settings = dict(self.config.digest_settings)
        if self.config.base_image:
            settings["baseImageId"] = self._base_image_id(self.config.base_image)
        return payload_digest(
            request, base_tree=tree, runner_version=__version__, settings=settings
        )

    def _base_image_id(self, ref: str) -> str | None:
        cached = self._digest_cache.get(ref)
        if cached is not None and time.monotonic() - cached[0] < 10.0:
            return cached[1]
        value = self.engine.image_id(ref)
        self._digest_cache[ref] = (time.monotonic(), value)
        return value

    def _reuse(self, job: Job, accepted: Job) -> bool:
        source = accepted.response
        if source is None or source.report is None:
            return False
        report = source.report
        archive = job.archive
        with contextlib.suppress(OSError):
            archive.mkdir(parents=True, exist_ok=True)
            write_atomic(archive / "request.json", job.request.to_json())
            write_atomic(archive / "report.json", json.dumps(report, indent=2) + "\n")
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
        self._finish(
            job,
            response,
            state=JobState.DONE,
            verdict=str(report.get("verdict")),
            detail=f"{report.get('verdict')} (the report of {accepted.id}, reused)",
        )
        return True

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
        self._event(job_id, "running", f"run {run_id}")
        thread.start()

    # ---- one verification --------------------------------------------------------------

    def _work(self, job_id: str) -> None:
        try:
            job = self.store.get(job_id)
            assert job is not None and job.run_id is not None
            self._verify(job, job.run_id)
        except Exception as exc:
            log.exception("worker error for %s", job_id)
            job = self.store.get(job_id)
            if job is not None and not job.state.finished:
                self._finish(
                    job,
                    self._error(job, "internal", f"the sidecar failed: {type(exc).__name__}"),
                    state=JobState.ERROR,
                    verdict=None,
                )
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            self._notify()

    def _prepare_archive(self, job: Job) -> Path:
        archive = job.archive
        if archive.exists():
            # An earlier attempt of this job (the sidecar died during it): start clean.
            shutil.rmtree(archive)
        task = archive / "task"
        task.mkdir(parents=True)
        request = job.request
        write_atomic(archive / "request.json", request.to_json())
        definition = json.dumps(request.task.definition, indent=2, ensure_ascii=False) + "\n"
        # surrogatepass: text that is not UTF-8 reaches verify as the bytes it stands for, and
        # verify names the file that is not UTF-8 (as it would for an authored task).
        files = {
            "definition.json": definition,
            "instruction.md": request.task.instruction,
            "test.patch": request.task.test_patch,
            "gold.patch": request.task.gold_patch,
        }
        for name, text in files.items():
            (task / name).write_bytes(text.encode("utf-8", "surrogatepass"))
        return archive

    def verify_job(self, job: Job, archive: Path, run_id: str) -> VerifyJob:
        """The verification of a job: its archive's task, the sidecar's options, and the few
        a request may set itself."""
        request = job.request
        options = list(self.config.verify_args)
        repo = self.repository(request)
        if repo is not None:
            options += ["--repo", repo]
        if request.options.pids_limit is not None:
            options += ["--pids-limit", str(request.options.pids_limit)]
        if request.options.max_log_bytes is not None:
            options += ["--max-log-size", str(request.options.max_log_bytes)]
        return VerifyJob(
            target=archive / "task",
            run_dir=archive / "run",
            run_id=run_id,
            events=archive / "events.jsonl",
            report=archive / "report.json",
            stderr=archive / "verify.stderr.log",
            options=tuple(options),
            env=child_environment(),
        )

    def _verify(self, job: Job, run_id: str) -> None:
        try:
            archive = self._prepare_archive(job)
            verify = self.verify_job(job, archive, run_id)
        except RequestRefusedError as exc:
            self._finish(
                job, self._error(job, exc.code, exc.message), state=JobState.ERROR, verdict=None
            )
            return
        except OSError as exc:
            self._finish(
                job,
                self._error(job, "archive", f"cannot write the archive: {exc.strerror or exc}"),
                state=JobState.ERROR,
                verdict=None,
            )
            return
        child = self.launcher.start(verify)
        with self._lock:
            self._running[job.id].child = child
        self.store.set_pid(job.id, child.pid)
        latest = self.store.get(job.id)
        if latest is not None and latest.cancel:  # cancelled while the process started
            child.send_signal(signal.SIGTERM)
        offset = 0
        while True:
            code = child.wait(POLL_SECONDS)
            events, offset = read_events(verify.events, offset)
            self._stage_events(job.id, events)
            if code is not None:
                break
        # The verification removes its own containers; a crash of it must not leave any.
        self.engine.remove_run(run_id)
        self._conclude(job.id, archive, child.result())

    def _stage_events(self, job_id: str, events: Sequence[LoggedEvent]) -> None:
        # Only the report's stages and statuses: a line that names anything else did not come
        # from verify (and would become a status line and a metric label of its own).
        events = [e for e in events if e.stage in STAGE_NAMES and e.status in _STAGE_STATUSES]
        if not events:
            return
        self.store.add_events(job_id, list(events))
        if self.metrics is not None:
            for event in events:
                if event.seconds is not None and event.status != "running":
                    self.metrics.stage(event.stage, event.seconds)

    def _conclude(self, job_id: str, archive: Path, result: ChildResult) -> None:
        job = self.store.get(job_id)
        assert job is not None
        code = result.exit_code
        if job.cancel and (code not in VERIFY_CODES or result.interrupted):
            # Cancelled, whether the verification was interrupted or stopped before its own
            # handlers were in place.
            self._finish(job, self._cancelled(job), state=JobState.CANCELLED, verdict=None)
            return
        if result.interrupted:
            if self.stopping:
                self.store.requeue(job.id)
                self._event(job.id, "queued", "interrupted by shutdown; requeued")
            else:
                self._finish(
                    job,
                    self._error(job, "interrupted", "the verification was interrupted"),
                    state=JobState.ERROR,
                    verdict=None,
                )
            return
        if not result.ended_on_its_terms or result.document is None or result.report is None:
            self._finish(
                job,
                self._error(job, "verify-failed", result.failure()),
                state=JobState.ERROR,
                verdict=None,
            )
            return
        response = VerificationResponse(
            id=job.id, status="done", report=result.document, archive=str(archive)
        )
        self._finish(job, response, state=JobState.DONE, verdict=result.report.verdict.value)

    # ---- endings -----------------------------------------------------------------------

    def _error(self, job: Job, code: str, message: str) -> VerificationResponse:
        return VerificationResponse(
            id=job.id,
            status="error",
            archive=str(job.archive),
            error=ErrorBody(code=code, message=message),
        )

    def _cancelled(self, job: Job) -> VerificationResponse:
        return self._error(job, "cancelled", "cancelled (DELETE); its containers were removed")

    def _finish(
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
        self._event(job.id, state.value, detail)
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

    def _event(self, job_id: str, status: str, detail: str = "") -> None:
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
