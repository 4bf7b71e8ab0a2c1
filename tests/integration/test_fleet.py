"""The fleet at scale, on a real Temporal server, real worker processes and a real store: a
`batch --temporal --store` on two workers with an S3 store (moto's server) or a shared
directory, whose runs another host reads (`logs`, `export`, `grade` with an empty cache and no
worker state); and a pool started from plain JSON with a manifest in a shared-directory store
that pages, continues as new, survives a worker killed with SIGKILL and records every verdict,
its histories small and replayed against the current workflow code; and a pool whose Temporal
frontend goes away and comes back while `batch --temporal` waits on it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.artifacts.store import open_store
from tests.integration.conftest import FAST, ROOT, run_cli
from tests.integration.test_batch import example_copy
from tests.s3 import s3_server
from tests.temporal import (
    await_workflow,
    dev_server,
    start_worker,
    stop_worker,
    temporal,
    temporal_server,
    workflow_result,
)

EXAMPLE = ROOT / "examples" / "bash-calc"
HISTORIES = ROOT / "tests" / "data" / "histories"


def _env(extra: dict[str, str], cache: Path) -> dict[str, str]:
    return {**os.environ, **extra, "SELFBENCH_CACHE_DIR": str(cache)}


def _fleet_key(tmp_path: Path) -> tuple[Path, str]:
    """The fleet's signing key (every worker seals with it) and its public text."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "fleet-config")}
    env.pop("SELFBENCH_SIGNING_KEY", None)
    shown = run_cli("key", env=env)
    assert shown.returncode == 0, shown.stderr
    return tmp_path / "fleet-config" / "selfbench-runner" / "signing-key", shown.stdout.strip()


@contextlib.contextmanager
def _store(kind: str, root: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The store's URL and the environment that reaches it: moto's S3 server, or a shared
    directory (as an NFS mount would be)."""
    if kind == "file":
        yield f"file://{root / 'shared-store'}", {}
        return
    with s3_server(root / "s3", "selfbench-fleet") as s3:
        yield "s3://selfbench-fleet/pools/test", s3


@pytest.mark.parametrize("backend", ["s3", "file"])
def test_a_pool_on_two_workers_is_read_from_another_host(
    tmp_path: Path, verify_options: list[str], backend: str
) -> None:
    example = json.loads((EXAMPLE / "definition.json").read_text())
    good = example_copy(tmp_path, "good")
    # Red at nop: a test command whose exit code says "passed" before any change.
    red = example_copy(
        tmp_path, "red", taskId="bash-calc-red", testCommand="bash tests/run.sh {tests} || true"
    )
    del example
    fleet_key, fleet_public = _fleet_key(tmp_path)
    with (
        temporal_server(tmp_path / "temporal") as server,
        _store(backend, tmp_path) as (store, s3),
    ):
        queue = f"fleet-{uuid.uuid4().hex[:8]}"
        workers = [
            start_worker(
                server,
                tmp_path / f"w{n}",
                queue,
                [*verify_options, *FAST, "--store", store],  # the store is the subject
                jobs=1,
                env={
                    **_env(s3, tmp_path / f"w{n}" / "cache"),
                    "SELFBENCH_SIGNING_KEY": str(fleet_key),
                },
            )
            for n in (1, 2)
        ]
        try:
            out = tmp_path / "out"
            ran = run_cli(
                "batch",
                str(good),
                str(red),
                "--temporal",
                server,
                "--task-queue",
                queue,
                "--jobs",
                "2",
                "--store",
                store,
                "--out",
                str(out),
                env=_env(s3, tmp_path / "client-cache"),
                timeout=900,
            )
        finally:
            for worker in workers:
                stop_worker(worker)
        logs = "".join(w.text() for w in workers)
        assert ran.returncode == 1, ran.stderr + logs
        document = json.loads((out / "batch.json").read_text())
        runs = {Path(t["target"]).name: t for t in document["tasks"]}
        assert {n: t["verdict"] for n, t in runs.items()} == {
            "good": "accepted",
            "red": "rejected",
        }
        # The runs are named in the store, not on a worker.
        for task in runs.values():
            assert task["runDir"].startswith(f"{store}/runs/"), task
            assert task["report"]["verdict"] == task["verdict"]
        # The store holds them: no worker kept a copy (no --keep-runs).
        for worker in workers:
            assert not list((worker.state / "runs").rglob("report.json")), worker.text()

        # Another host: its own empty cache and key, no worker state; the store's address only.
        # It trusts what the fleet sealed once it is given the fleet's key, and only then.
        untrusting = {**_env(s3, tmp_path / "other-host"), "XDG_CONFIG_HOME": str(tmp_path / "oc")}
        refused = run_cli(
            "export", str(out / "batch.json"), "-o", str(tmp_path / "no.tar.gz"), env=untrusting
        )
        assert refused.returncode == 2 and "does not trust" in refused.stderr, refused.stderr
        other = {**untrusting, "SELFBENCH_TRUSTED_KEYS": fleet_public}
        shown = run_cli("logs", runs["red"]["runDir"], "--stage", "nop", env=other)
        assert "fail_to_pass" in shown.stdout or "fail-to-pass" in shown.stdout, shown.stdout
        assert shown.returncode == 0, shown.stderr
        assert str(tmp_path / "other-host") in shown.stdout
        assert str(tmp_path / "w1") not in shown.stdout and str(tmp_path / "w2") not in shown.stdout
        exported = run_cli(
            "export", str(out / "batch.json"), "-o", str(tmp_path / "tasks.tar.gz"), env=other
        )
        assert exported.returncode == 0, exported.stderr
        assert "1 task(s)" in exported.stdout
        graded = run_cli(
            "grade",
            runs["good"]["runDir"],
            "--patch",
            str(EXAMPLE / "gold.patch"),
            "--json",
            "-q",
            "--logs",
            str(tmp_path / "grades"),
            *verify_options,
            env=other,
        )
        assert graded.returncode == 0, graded.stderr
        assert json.loads(graded.stdout)["reward"]["reward"] == 1


def _references(store_url: str, cache: Path, count: int) -> tuple[str, int]:
    """A manifest of `count` references to the example (as an orchestrator writes one with
    its own store client): its digest, and the size of the largest reference."""
    store = open_store(store_url, cache=cache)
    task = {
        "definition": json.loads((EXAMPLE / "definition.json").read_text()),
        "instruction": (EXAMPLE / "instruction.md").read_text(),
        "testPatch": (EXAMPLE / "test.patch").read_text(),
        "goldPatch": (EXAMPLE / "gold.patch").read_text(),
    }
    task_digest = store.put_json(task)
    bundle = store.put_file(EXAMPLE / "repo.bundle")
    references = [
        {
            "id": f"p-{index:04d}",
            "run": "pool",
            "stage": "candidates",
            "candidate": f"c{index}",
            "round": 0,
            "verify": index,
            "task": task_digest,
            "repoBlob": bundle,
        }
        for index in range(count)
    ]
    largest = max(len(json.dumps(r)) for r in references)
    # Two an orchestrator got wrong: each answered invalid, the pool goes on.
    hostile: list[Any] = ["not an object", {**references[0], "id": "p-bad", "task": "md5:0"}]
    return store.put_json([*references, *hostile]), largest


async def _histories(server: str, workflow_id: str) -> list[tuple[str, str, str]]:
    """Every run of a workflow id and of its children: (type, id, history JSON)."""
    from temporalio.client import Client

    client = await Client.connect(server)
    found: list[tuple[str, str, str]] = []
    async for execution in client.list_workflows():
        if execution.id != workflow_id and not execution.id.startswith(f"{workflow_id}/"):
            continue
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        found.append((str(execution.workflow_type), execution.id, history.to_json()))
    return found


async def _replay(histories: list[tuple[str, str, str]]) -> None:
    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

    from runner.worker.pool import GradeWorkflow, PoolWorkflow, TaskWorkflow
    from runner.worker.workflows import BatchWorkflow

    replayer = Replayer(workflows=[BatchWorkflow, PoolWorkflow, TaskWorkflow, GradeWorkflow])
    for _, workflow_id, text in histories:
        await replayer.replay_workflow(WorkflowHistory.from_json(workflow_id, text))


def test_a_long_pool_pages_continues_as_new_and_loses_nothing_to_a_killed_worker(
    tmp_path: Path, verify_options: list[str]
) -> None:
    # Sized for the subject, not for scale: four segments of eight make the pool continue as new
    # three times, pages of three make each segment read the manifest in three pages, and the
    # worker killed after three answers leaves most of them to hand over. (At 90 in segments
    # of 30 this test took 355 s of a CI run; the pool's bounds have their own unit tests.)
    count, segment = 24, 8
    total = count + 2  # and the two hostile references
    store_url = f"file://{tmp_path}/store"
    manifest, largest = _references(store_url, tmp_path / "client-cache", count)
    assert largest < 1024
    with temporal_server(tmp_path / "temporal") as server:
        queue = f"pool-{uuid.uuid4().hex[:8]}"
        workers = [
            start_worker(
                server,
                tmp_path / f"w{n}",
                queue,
                # Paging and the hand-over are the subject (in CI, under load, the first
                # full-gate verifications took minutes).
                [*verify_options, *FAST, "--store", store_url],
                jobs=2,
            )
            for n in (1, 2)
        ]
        try:
            pool = {
                "manifest": manifest,
                "total": total,
                "concurrency": 4,
                "segment": segment,
                "page": 3,
                "heartbeat_timeout_seconds": 10,
            }
            started = temporal(
                server,
                "workflow",
                "start",
                "--task-queue",
                queue,
                "--type",
                "selfbench.pool",
                "--workflow-id",
                "pool-1",
                "--input",
                json.dumps(pool),
            )
            assert started.returncode == 0, started.stderr
            # SIGKILL one worker once some tasks are answered: its activities time out and
            # run again on the other.
            for _ in range(600):
                if workers[0].text().count(" in ") >= 3:
                    break
                asyncio.run(asyncio.sleep(0.5))
            workers[0].process.send_signal(signal.SIGKILL)
            workers[0].process.wait(30)
            result = await_workflow(
                server, "pool-1", timeout=1200, what=lambda: workers[1].text()[-3000:]
            )
            # A new pool whose segment's summaries could pass the payload limit is refused
            # before it runs anything; a continuation (a pool started before the bound, past
            # its cursor 0) keeps its segment.
            for workflow_id, changes in (
                ("pool-big", {"segment": 600}),
                ("pool-old", {"segment": 600, "cursor": total}),
            ):
                given = {**pool, **changes}
                ran = temporal(
                    server,
                    "workflow",
                    "execute",
                    *("--task-queue", queue, "--type", "selfbench.pool"),
                    *("--workflow-id", workflow_id, "--input", json.dumps(given), "-o", "json"),
                    timeout=120,
                )
                if workflow_id == "pool-big":
                    assert ran.returncode != 0, ran.stdout
                    assert "segment 600 is over 500" in ran.stdout + ran.stderr, ran.stdout
                else:
                    assert ran.returncode == 0, ran.stdout + ran.stderr
                    assert workflow_result(json.loads(ran.stdout))["total"] == total
        finally:
            for worker in workers:
                stop_worker(worker)
        pages = -(-total // segment)
        assert result["total"] == total and len(result["pages"]) == pages, result
        assert result["counts"]["accepted"] == count and result["counts"]["invalid"] == 2, result
        store = open_store(store_url, cache=tmp_path / "reader-cache")
        summaries: list[dict[str, Any]] = []
        for page in result["pages"]:
            summaries.extend(store.get_json(page, limit=1 << 24))
        by_id = {s["id"]: s for s in summaries}
        assert sorted(by_id) == sorted(
            [f"p-{i:04d}" for i in range(count)] + [f"manifest-{count}", "p-bad"]
        )
        assert "field `task`" in by_id["p-bad"]["reason"], by_id["p-bad"]
        assert by_id[f"manifest-{count}"]["verdict"] == "invalid"
        accepted = [s for s in summaries if s["verdict"] == "accepted"]
        assert all(s["run"].startswith(f"{store_url}/runs/p-") for s in accepted)
        assert max(len(json.dumps(s)) for s in summaries) < 1024
        histories = asyncio.run(_histories(server, "pool-1"))
    kinds = [kind for kind, _, _ in histories]
    assert kinds.count("selfbench.pool") == pages  # continued as new after each segment
    assert kinds.count("selfbench.task") == total
    # Each pool run's history holds references and summaries only.
    largest_history = max(len(text) for kind, _, text in histories if kind == "selfbench.pool")
    assert largest_history < 2 * 1024 * 1024
    asyncio.run(_replay(histories))
    if os.environ.get("UPDATE_HISTORIES"):
        HISTORIES.mkdir(parents=True, exist_ok=True)
        # One run of each type (the ids are in the file names: replay needs them).
        for kind in ("selfbench.pool", "selfbench.task"):
            _, workflow_id, text = next(h for h in histories if h[0] == kind)
            name = f"{kind}--{workflow_id.replace('/', '--')}.json"
            (HISTORIES / name).write_text(text)


def test_a_pool_waits_out_a_frontend_that_goes_away_and_comes_back(
    tmp_path: Path, verify_options: list[str]
) -> None:
    """The server stopped (SIGTERM) once a task is answered and started again 20 s later on
    its ports and store, as an operator restarts a frontend: the client waits for it (past the
    SDK's own 10 s of retries), the worker carries on, and every verdict is recorded."""
    tasks = [example_copy(tmp_path, f"t{n}", taskId=f"bash-calc-{n}") for n in range(3)]
    store = f"file://{tmp_path / 'store'}"
    with dev_server(tmp_path / "temporal") as server:
        queue = f"outage-{uuid.uuid4().hex[:8]}"
        worker = start_worker(
            server.address,
            tmp_path / "w",
            queue,
            [*verify_options, *FAST, "--store", store],
            jobs=1,
            env=_env({}, tmp_path / "w" / "cache"),
        )
        log_path = tmp_path / "client.log"
        command = [sys.executable, "-m", "runner", "batch", *map(str, tasks)]
        command += ["--temporal", server.address, "--task-queue", queue, "--jobs", "1"]
        command += ["--store", store, "--out", str(tmp_path / "out")]
        try:
            with log_path.open("wb") as log:
                client = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                    env=_env({}, tmp_path / "client-cache"),
                )
            try:
                deadline = time.monotonic() + 600
                while " accepted in " not in worker.text():
                    assert client.poll() is None, log_path.read_text() + worker.text()
                    assert time.monotonic() < deadline, worker.text()
                    time.sleep(0.5)
                server.stop()
                time.sleep(20)
                assert client.poll() is None, log_path.read_text()
                server.start()
                client.wait(900)
            finally:
                if client.poll() is None:
                    client.terminate()
                    client.wait(60)
        finally:
            stop_worker(worker)
    shown = log_path.read_text()
    assert client.returncode == 0, shown + worker.text()[-3000:]
    assert f"Temporal at {server.address} does not answer" in shown, shown
    document = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert [t["verdict"] for t in document["tasks"]] == ["accepted"] * 3, document


@pytest.fixture(autouse=True)
def _no_leftover_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The S3 variables are given to each process by the test; none leak into this one.
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
