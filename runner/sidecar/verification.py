"""One job's verification: its archive (the task as files, the request), the `verify` child
with the sidecar's options, its stage events as they come, and its answer from the report."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from runner.base.safeio import write_atomic
from runner.compile.taskdir import DEFINITION, GOLD_PATCH, INSTRUCTION, TEST_PATCH
from runner.model.layout import REPORT_FILE
from runner.model.settings import SharedSettings, child_environment
from runner.model.stages import STAGE_NAMES
from runner.run.events import LoggedEvent, read_events
from runner.run.state import PROGRESS
from runner.sidecar.answers import Answers
from runner.sidecar.engineops import EngineOps
from runner.sidecar.jobs import Job
from runner.sidecar.policy import RepositoryPolicy, RequestRefusedError
from runner.sidecar.request import JobState, TaskPayload, VerificationResponse
from runner.sidecar.store import Store
from runner.supervise.job import VERIFY_CODES, ChildResult, VerifyJob
from runner.supervise.launcher import Child, Launcher

POLL_SECONDS = 0.25
# Runs of one job a lost fork server may cost before its answer is an error (retryable by a
# Temporal worker's caller, final for serve's).
LOST_SERVER_RUNS = 3
_STAGE_STATUSES = frozenset({"running", "passed", "failed", "error", "skipped", PROGRESS})


def task_directory_files(task: TaskPayload) -> dict[str, str]:
    """A request's task as the task directory verify loads: instruction.md only when the request
    has one (else the definition's prompt stands for it, as in an authored task)."""
    files = {
        DEFINITION: json.dumps(task.definition, indent=2, ensure_ascii=False) + "\n",
        TEST_PATCH: task.test_patch,
        GOLD_PATCH: task.gold_patch,
    }
    if task.instruction is not None:
        files[INSTRUCTION] = task.instruction
    return files


class Verification:
    def __init__(
        self,
        *,
        store: Store,
        answers: Answers,
        launcher: Launcher,
        engine: EngineOps,
        policy: RepositoryPolicy,
        verify_settings: SharedSettings,
        stopping: Callable[[], bool],
        started: Callable[[str, Child], None],
    ) -> None:
        self.store = store
        self.answers = answers
        self.launcher = launcher
        self.engine = engine
        self.policy = policy
        self.verify_settings = verify_settings
        self.stopping = stopping
        self.started = started  # told the child of a job as soon as it runs (its cancel button)

    def _prepare_archive(self, job: Job) -> Path:
        archive = job.archive
        if archive.exists():
            # An earlier attempt of this job (the sidecar died during it): start clean.
            shutil.rmtree(archive)
        task = archive / "task"
        task.mkdir(parents=True)
        request = job.request
        write_atomic(archive / "request.json", request.to_json())
        # surrogatepass: text that is not UTF-8 reaches verify as the bytes it stands for, and
        # verify names the file that is not UTF-8 (as it would for an authored task).
        for name, text in task_directory_files(request.task).items():
            (task / name).write_bytes(text.encode("utf-8", "surrogatepass"))
        return archive

    def verify_job(self, job: Job, archive: Path, run_id: str) -> VerifyJob:
        """The verification of a job: its archive's task, the sidecar's options, and the few
        a request may set itself."""
        request = job.request
        own = {
            "pids_limit": request.options.pids_limit,
            "max_log_size": request.options.max_log_bytes,
        }
        settings = self.verify_settings.model_copy(
            update={name: value for name, value in own.items() if value is not None}
        )
        return VerifyJob(
            target=archive / "task",
            run_dir=archive / "run",
            run_id=run_id,
            events=archive / "events.jsonl",
            report=archive / REPORT_FILE,
            stderr=archive / "verify.stderr.log",
            repo=self.policy.repository(request),
            settings=settings,
            env=child_environment(),
        )

    def run(self, job: Job, run_id: str) -> None:
        try:
            archive = self._prepare_archive(job)
            verify = self.verify_job(job, archive, run_id)
        except RequestRefusedError as exc:
            self.answers.fail(job, exc.code, exc.message)
            return
        except OSError as exc:
            self.answers.fail(job, "archive", f"cannot write the archive: {exc.strerror or exc}")
            return
        child = self.launcher.start(verify)
        self.started(job.id, child)
        self.store.set_pid(job.id, child.pid)
        latest = self.store.get(job.id)
        if latest is not None and latest.cancel:  # cancelled while the process started
            child.send_signal(signal.SIGTERM)
        offset = 0
        while True:
            code = child.wait(POLL_SECONDS)
            events, offset = read_events(verify.events, offset)
            self.stage_events(job.id, events)
            if code is not None:
                break
        # The verification removes its own containers; a crash of it must not leave any.
        self.engine.remove_run(run_id)
        self._conclude(job.id, archive, child.result())

    def stage_events(self, job_id: str, events: Sequence[LoggedEvent]) -> None:
        # Only the report's stages and statuses: a line that names anything else did not come
        # from verify (and would become a status line and a metric label of its own).
        events = [e for e in events if e.stage in STAGE_NAMES and e.status in _STAGE_STATUSES]
        if not events:
            return
        self.store.add_events(job_id, list(events))
        if self.answers.metrics is not None:
            for event in events:
                if event.seconds is not None and event.status != "running":
                    self.answers.metrics.stage(event.stage, event.seconds)

    def _conclude(self, job_id: str, archive: Path, result: ChildResult) -> None:
        job = self.store.get(job_id)
        assert job is not None
        code = result.exit_code
        if job.cancel and (code not in VERIFY_CODES or result.interrupted):
            # Cancelled, whether the verification was interrupted or stopped before its own
            # handlers were in place.
            self.answers.finish(
                job, self.answers.cancelled(job), state=JobState.CANCELLED, verdict=None
            )
            return
        if result.lost:
            # The fork server died under it (the kernel stopped verify): the machine's
            # failure, not the task's. It runs again, on a new server, a few times at most.
            if self.stopping() or job.attempts < LOST_SERVER_RUNS:
                self.store.requeue(job.id)
                self.answers.event(job.id, "queued", f"{result.failure()}; it runs again")
            else:
                self.answers.fail(
                    job, "verify-failed", f"{result.failure()} ({job.attempts} times)"
                )
            return
        if result.interrupted:
            if self.stopping():
                self.store.requeue(job.id)
                self.answers.event(job.id, "queued", "interrupted by shutdown; requeued")
            else:
                self.answers.fail(job, "interrupted", "the verification was interrupted")
            return
        if not result.ended_on_its_terms or result.document is None or result.report is None:
            self.answers.fail(job, "verify-failed", result.failure())
            return
        response = VerificationResponse(
            id=job.id, status="done", report=result.document, archive=str(archive)
        )
        self.answers.finish(job, response, state=JobState.DONE, verdict=result.report.verdict.value)
