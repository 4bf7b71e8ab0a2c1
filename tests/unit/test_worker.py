"""The worker's activity without Temporal's server: what each finished job becomes (a result,
or the error Temporal retries or not), a malformed request's error naming its field, and a
retried infrastructure failure running again from the same store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from runner.artifacts.store import open_store
from runner.sidecar.request import (
    ErrorBody,
    JobState,
    VerificationRequest,
    VerificationResponse,
)
from runner.sidecar.store import Store
from runner.worker.activities import (
    FAILURE_DETAILS_BYTES,
    HANDED_BACK,
    MAX_REASON_BYTES,
    MAX_TAIL_LINE_BYTES,
    VerifyActivities,
    counted,
    failures_before,
    invalid_request,
    outcome,
)
from runner.worker.stored import StoredActivities
from tests.unit.test_sidecar import make_request, request_doc, service_for


def finished(
    tmp_path: Path,
    *,
    state: JobState,
    verdict: str | None,
    report: dict[str, Any] | None = None,
    error: ErrorBody | None = None,
) -> tuple[Store, Any]:
    store = Store(tmp_path / "jobs.sqlite3")
    request = make_request()
    job, new = store.add(request, source="temporal", archive=tmp_path / "archive")
    assert new
    response = VerificationResponse(
        id=job.id, status="error" if error else "done", report=report, error=error
    )
    assert store.finish(job.id, response, state=state, verdict=verdict)
    found = store.get(job.id)
    assert found is not None
    return store, found


@pytest.mark.parametrize("verdict", ["accepted", "rejected", "invalid"])
def test_a_verdict_is_a_result(tmp_path: Path, verdict: str) -> None:
    _, job = finished(tmp_path, state=JobState.DONE, verdict=verdict, report={"verdict": verdict})
    document = outcome(job)
    assert document["status"] == "done" and document["report"]["verdict"] == verdict


def test_an_infrastructure_failure_is_a_retryable_error_with_the_build_tail(
    tmp_path: Path,
) -> None:
    report = {
        "verdict": "infrastructure_failed",
        "reason": "build: the engine is gone",
        "stages": {"build": {"data": {"tail": [f"line {i}" for i in range(30)]}}},
    }
    _, job = finished(tmp_path, state=JobState.DONE, verdict="infrastructure_failed", report=report)
    with pytest.raises(ApplicationError) as caught:
        outcome(job)
    error = caught.value
    assert error.type == "InfrastructureFailure" and not error.non_retryable
    assert error.message == "build: the engine is gone"
    details = error.details[0]
    assert details["buildLogTail"] == [f"line {i}" for i in range(10, 30)]
    assert details["runId"] is None and details["archive"] is None  # none in this report


# An infrastructure failure far past every budget of a failed attempt's error: a long reason of
# two-byte characters, a wide build log (here, and on a real server in test_worker_failures).
WIDE_FAILURE = {
    "verdict": "infrastructure_failed",
    "runId": "20261202T000000Z-abcdef",
    "reason": "build: " + "é" * 5000,
    "stages": {"build": {"data": {"tail": [f"{i:03d} " + "x" * 900 for i in range(200)]}}},
}


def test_a_failed_attempt_stays_small_enough_for_temporal_to_keep_whole(tmp_path: Path) -> None:
    """Temporal's server keeps a retried attempt's failure only up to a few KB: a long reason
    and a wide build log are clipped, the newest lines kept."""
    _, job = finished(
        tmp_path, state=JobState.DONE, verdict="infrastructure_failed", report=WIDE_FAILURE
    )
    with pytest.raises(ApplicationError) as caught:
        outcome(job)
    error = caught.value
    message = error.message.encode()
    assert MAX_REASON_BYTES - 4 < len(message) <= MAX_REASON_BYTES and message.endswith(
        "é…".encode()
    )
    details = error.details[0]
    assert len(json.dumps(details)) <= FAILURE_DETAILS_BYTES
    assert details["runId"] == "20261202T000000Z-abcdef"
    tail = details["buildLogTail"]
    assert tail and tail[-1].startswith("199 ") and len(tail[-1].encode()) == MAX_TAIL_LINE_BYTES
    assert [line[:3] for line in tail] == [f"{i:03d}" for i in range(200 - len(tail), 200)]


@pytest.mark.parametrize(
    ("code", "retryable"),
    [("verify-failed", True), ("internal", True), ("repository-refused", False)],
)
def test_a_sidecar_error_is_retried_unless_the_request_caused_it(
    tmp_path: Path, code: str, retryable: bool
) -> None:
    _, job = finished(
        tmp_path, state=JobState.ERROR, verdict=None, error=ErrorBody(code=code, message="m")
    )
    with pytest.raises(ApplicationError) as caught:
        outcome(job)
    assert caught.value.non_retryable is not retryable
    assert caught.value.message == f"{code}: m"


def test_a_cancelled_job_is_a_final_error(tmp_path: Path) -> None:
    _, job = finished(
        tmp_path,
        state=JobState.CANCELLED,
        verdict=None,
        error=ErrorBody(code="cancelled", message="cancelled"),
    )
    with pytest.raises(ApplicationError) as caught:
        outcome(job)
    assert caught.value.type == "Cancelled" and caught.value.non_retryable


def test_a_malformed_request_names_its_field_and_is_never_retried() -> None:
    document = request_doc()
    del document["stage"]
    with pytest.raises(ValidationError) as caught:
        VerificationRequest.model_validate(document)
    error = invalid_request(caught.value)
    assert error.type == "InvalidRequest" and error.non_retryable
    assert error.message == "invalid request: field `stage`: Field required"
    assert error.details[0]["problems"][0]["field"] == "stage"


def test_a_retried_job_is_queued_again_with_its_response_dropped(tmp_path: Path) -> None:
    store, job = finished(
        tmp_path,
        state=JobState.DONE,
        verdict="infrastructure_failed",
        report={"verdict": "infrastructure_failed"},
    )
    assert store.retry(job.id)
    again = store.get(job.id)
    assert again is not None
    assert again.state is JobState.QUEUED and again.response is None and again.verdict is None
    assert not store.retry(job.id)  # only a finished job goes back


def test_a_task_directory_becomes_a_request_the_sidecar_takes(tmp_path: Path) -> None:
    from runner.worker.client import task_request
    from tests.helpers import bash_task

    task = bash_task(tmp_path, name="my-task")
    moved = task.directory.with_name("my task (copy)")
    task.directory.rename(moved)
    repo = moved / json.loads((moved / "definition.json").read_text())["repo"]
    document = task_request(moved, run="batch-1.x", index=3)
    request = VerificationRequest.model_validate(document)
    assert request.id == "batch-1.x-0003" and request.verify == 3
    assert request.candidate == "my-task--copy-"
    assert request.repo == str(repo.resolve())
    assert request.task.test_patch == (moved / "test.patch").read_text()


def test_a_bad_task_directory_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from runner.base.errors import InvalidTaskError
    from runner.worker.client import task_request
    from tests.helpers import bash_task

    task = bash_task(tmp_path)
    (task.directory / "definition.json").write_text("{}")
    with pytest.raises(InvalidTaskError) as caught:
        task_request(task.directory, run="b", index=0)
    assert "definition.json" in caught.value.one_line()


def _pem_file(path: Path, text: str = "-----BEGIN CERTIFICATE-----\nAA==\n") -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", ["worker", "batch"])
def test_tls_options_are_checked_before_anything_starts(tmp_path: Path, command: str) -> None:
    from tests.unit.test_cli import run

    task = tmp_path / "task"  # never read: the options are refused first
    head = ["worker"] if command == "worker" else ["batch", str(task), "--out", str(tmp_path / "o")]
    cert = _pem_file(tmp_path / "cert.pem")
    not_pem = _pem_file(tmp_path / "ca.txt", "just text\n")
    cases = [
        (["--tls-cert", str(cert)], "--tls-cert and --tls-key go together"),
        (["--tls-ca", str(not_pem)], "is not PEM (no -----BEGIN line)"),
        (["--tls-server-name", "bad name"], "'bad name' is not a DNS name"),
        (["--tls-ca", str(tmp_path / "missing.pem")], "missing.pem"),
    ]
    for extra, words in cases:
        code, out, err = run(*head, "--temporal", "127.0.0.1:7233", *extra)
        assert code == 2 and out == "", (extra, err)
        assert words in err and len(err.splitlines()) == 1, (extra, err)
    assert not (tmp_path / "o").exists()  # the batch directory is not made either


def test_batch_tls_options_go_with_temporal(tmp_path: Path) -> None:
    from tests.helpers import bash_task
    from tests.unit.test_cli import run

    task = bash_task(tmp_path)
    ca = _pem_file(tmp_path / "ca.pem")
    code, out, err = run("batch", str(task.directory), "--tls-ca", str(ca), "--out", "o")
    assert code == 2 and out == ""
    assert "the --tls-* options go with --temporal" in err


def test_tls_options_make_one_tls_config(tmp_path: Path) -> None:
    from runner.cli.worker import _tls

    assert _tls(None, None, None, None) is None
    cert, key = _pem_file(tmp_path / "c.pem"), _pem_file(tmp_path / "k.pem", "-----BEGIN KEY\n")
    config = _tls(cert, key, None, "temporal.example")
    assert config.domain == "temporal.example" and config.server_root_ca_cert is None
    assert config.client_cert == cert.read_bytes() and config.client_private_key.startswith(
        b"-----BEGIN KEY"
    )
    # A server name alone turns TLS on with the system's CAs.
    named = _tls(None, None, None, "temporal.example")
    assert named is not None and named.client_cert is None


def test_a_task_that_failed_for_good_points_at_its_archive_on_the_worker() -> None:
    from runner.batch.model import TaskOutcome
    from runner.worker.client import _outcome

    failed = _outcome(
        TaskOutcome(target="t"),
        "infrastructure_failed",
        None,
        "build: no Docker engine answers at unix:///x",
        {"runId": "r1", "archive": "/var/lib/w/runs/a", "buildLogTail": []},
    )
    assert failed.verdict == "infrastructure_failed" and failed.report is None
    assert failed.reason == "build: no Docker engine answers at unix:///x"
    assert failed.run_dir == "/var/lib/w/runs/a/run"
    answered = _outcome(
        TaskOutcome(target="t"),
        "accepted",
        {"archive": "/w/b", "report": {"reason": "", "seconds": 2.5}},
        None,
        None,
    )
    assert answered.run_dir == "/w/b/run" and answered.seconds == 2.5


def test_a_store_worker_removes_the_unpublished_archives_a_stop_left(tmp_path: Path) -> None:
    """With --store a worker's disk holds only what runs: the archive of a run a SIGKILL
    interrupted (parked) or ended unpublished goes when the worker starts again; with
    --keep-runs it stays; a worker with nothing left removes nothing."""
    service = service_for(tmp_path)
    activities = VerifyActivities(service)
    job = service.submit(make_request(repo="https://git.invalid/x.git"), source="temporal")
    (job.archive / "run").mkdir(parents=True)
    (job.archive / "run" / "runner.log").write_text("interrupted\n")
    assert activities.park_queued() == 1
    store = open_store(f"file://{tmp_path}/store", cache=tmp_path / "cache")
    assert StoredActivities(activities, store, keep_runs=True).sweep() == 0
    assert (job.archive / "run" / "runner.log").is_file()
    assert StoredActivities(activities, store).sweep() == 1
    assert not job.archive.exists() and not (service.config.state_dir / "runs").exists()
    assert StoredActivities(activities, store).sweep() == 0
    # The job's record stays: Temporal's retry that comes back here runs it again.
    parked = service.store.get(job.id)
    assert parked is not None and parked.state is JobState.ERROR


def test_what_a_stop_left_queued_is_parked_for_temporal_and_runs_only_when_given_back(
    tmp_path: Path,
) -> None:
    """A worker's store never runs a verification on its own: what a SIGKILL left (recovered
    into the queue) is answered `handed-back` before the scheduler starts, on disk, so a
    second restart does not run it either; when Temporal gives it back, it is queued again."""
    service = service_for(tmp_path)
    activities = VerifyActivities(service)
    request = make_request(repo="https://git.invalid/x.git")
    job = service.submit(request, source="temporal")
    assert job.state is JobState.QUEUED
    assert activities.park_queued() == 1
    parked = service.store.get(job.id)
    assert parked is not None and parked.state is JobState.ERROR
    assert parked.response is not None and parked.response.error is not None
    assert parked.response.error.code == HANDED_BACK
    # The record is the store's: a new process on the same store finds nothing to run.
    again = VerifyActivities(service_for(tmp_path))
    assert again.park_queued() == 0 and again.service.store.queue() == []
    # Given back (another workflow, its first attempt): it runs again.
    given = again._submit(request, attempt=1)
    assert given.state is JobState.QUEUED and given.response is None


@pytest.mark.parametrize(
    ("details", "count"),
    [
        ((), 0),  # a first attempt
        (({"seq": 4, "stages": {}, "infrastructureFailures": 2},), 2),  # a lost attempt's beat
        (({"infrastructureFailures": 1},), 1),  # the beat a failed attempt ends with
        (({"infrastructureFailures": True},), 0),  # not this worker's
        (({"infrastructureFailures": -3},), 0),
        (("text",), 0),
        (None, 0),
    ],
)
def test_the_failures_in_a_row_are_read_from_the_last_heartbeat(details: Any, count: int) -> None:
    assert failures_before(details) == count


def test_the_third_infrastructure_failure_in_a_row_is_final_and_others_pass() -> None:
    error = ApplicationError("build: no engine", {"runId": "r"}, type="InfrastructureFailure")
    assert counted(error, 2, 3) is error
    final = counted(error, 3, 3)
    assert final.non_retryable and final.type == "InfrastructureFailure"
    assert final.message == "build: no engine (infrastructure failure 3 in a row: not retried)"
    assert final.details == ({"runId": "r"},)
    for other in (
        ApplicationError("stop", type="WorkerStopping"),
        ApplicationError("bad", type="InvalidRequest", non_retryable=True),
    ):
        assert counted(other, 9, 3) is other


def test_a_fix_s_green_task_is_read_from_the_run_the_fleet_published(tmp_path: Path) -> None:
    """A fleet's worker that did not verify fixOf reads that verification's request from the
    run its worker published to the shared store, with the verdict the record holds; a run
    the store does not hold, or whose archive holds no request of that id, is no reference."""
    from runner.artifacts.runs import publish_run

    request = make_request(repo="https://git.invalid/x.git")
    archive = tmp_path / "archive"
    (archive / "run").mkdir(parents=True)
    (archive / "request.json").write_text(request.to_json())
    store = open_store(f"file://{tmp_path}/store", cache=tmp_path / "cache")
    publish_run(store, request.id, archive, {"id": request.id, "verdict": "accepted"})
    activities = VerifyActivities(service_for(tmp_path / "w"))
    stored = StoredActivities(activities, store)
    assert stored.green(request.id) == (request.task, "accepted")
    assert stored.green("never-published") is None
    # A run published under another id than its request's: not that verification's task.
    publish_run(store, "renamed", archive, {"id": "renamed", "verdict": "accepted"})
    assert stored.green("renamed") is None
    # An archive without its request.
    (archive / "request.json").unlink()
    publish_run(store, "bare", archive, {"id": "bare", "verdict": "accepted"})
    assert stored.green("bare") is None
