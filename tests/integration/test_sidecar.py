"""The sidecar on a real engine, as a real server process: the example task through the mailbox
and over HTTP gives verify's report, the event stream shows every stage, an identical payload
is answered from reuse, `kill -9` mid-build loses and duplicates nothing, and 20 requests at
once with --jobs 2 get 20 answers."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from tests.engines import private_engine
from tests.hostile_repos import arm
from tests.integration.conftest import FAST, ROOT, leftovers, run_verify
from tests.integration.test_batch import derived_base, example_copy

EXAMPLE = ROOT / "examples" / "bash-calc"
BLOB = "./configure && head -c 3000000 /dev/urandom > {name}"  # a setup that writes 3 MB
RUN_FIELDS = ("runId", "startedAt", "seconds", "runDir", "bundle")


def payload(
    request_id: str, *, verify: int = 1, candidate: str = "c1", **definition: Any
) -> dict[str, Any]:
    doc = json.loads((EXAMPLE / "definition.json").read_text())
    doc.update(definition)
    return {
        "id": request_id,
        "run": "run-1",
        "stage": "authoring",
        "candidate": candidate,
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


class Sidecar:
    def __init__(
        self,
        state: Path,
        mailbox: Path,
        options: list[str],
        jobs: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.state, self.mailbox, self.options, self.jobs = state, mailbox, options, jobs
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.headers: dict[str, str] = {}
        self.log = state.parent / f"serve-{state.name}.log"

    def start(self) -> Sidecar:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "runner",
                    "serve",
                    "--mailbox",
                    str(self.mailbox),
                    "--http",
                    "127.0.0.1:0",
                    "--state-dir",
                    str(self.state),
                    "--jobs",
                    str(self.jobs),
                    "--allow-repo-root",
                    str(ROOT / "examples"),
                    "--grace-period",
                    "20",
                    *self.options,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=self.env,
            )
        deadline = time.monotonic() + 60
        while True:
            text = self.log.read_text()
            ports = [ln.rsplit(":", 1)[1] for ln in text.splitlines() if "listening on" in ln]
            if ports:
                self.url = f"http://127.0.0.1:{ports[-1]}"
                # No --token-file on loopback: the sidecar made its own, its user's alone.
                token = self.state / "token"
                assert f"token: {token}" in text
                self.headers = {"Authorization": f"Bearer {token.read_text().strip()}"}
                return self
            assert self.process.poll() is None, text
            assert time.monotonic() < deadline, text
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def wait(self, request_id: str, timeout: float = 600) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = httpx.get(
                f"{self.url}/v1/verifications/{request_id}", timeout=30, headers=self.headers
            ).json()
            if status["status"] not in ("queued", "running"):
                return dict(status)
            assert time.monotonic() < deadline, status
            time.sleep(0.1)


@pytest.fixture
def sidecar(tmp_path: Path, verify_options: list[str]) -> Iterator[Sidecar]:
    """A sidecar for tests whose subject is the service (supervision, restarts): no flakiness
    probe, no exploits. The mailbox test runs one with the defaults."""
    car = Sidecar(tmp_path / "state", tmp_path / "mailbox", [*verify_options, *FAST])
    yield car
    car.stop()


@pytest.fixture
def default_sidecar(tmp_path: Path, verify_options: list[str]) -> Iterator[Sidecar]:
    """A sidecar whose verifications run every gate with its defaults, as verify's do."""
    car = Sidecar(tmp_path / "state", tmp_path / "mailbox", verify_options)
    yield car
    car.stop()


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without what differs between two runs of the same task (ids, times, paths)."""
    text = json.dumps({k: v for k, v in report.items() if k not in RUN_FIELDS})
    for key in ("runId", "runDir", "bundle"):
        if report.get(key):
            text = text.replace(str(report[key]), f"<{key}>")
    # The flakiness probe's hash seeds are drawn per run.
    data = json.loads(re.sub(r"PYTHONHASHSEED=\d+", "PYTHONHASHSEED=<seed>", text))
    for stage in data["stages"].values():
        stage.pop("seconds", None)
        stage.pop("logs", None)
        for key in ("data",):
            if isinstance(stage.get(key), dict):
                for volatile in ("seconds", "images", "bundle", "startupSeconds", "limits"):
                    stage[key].pop(volatile, None)
                details = stage[key].get("details")
                if isinstance(details, dict):
                    for name in [n for n in details if n.endswith("_ms")]:
                        details.pop(name)
        detail = stage.get("detail", "")
        if "compiled to" in detail or "(cached)" in detail or "built" in detail:
            stage["detail"] = "<varies>"
    return dict(data)


def put_request(mailbox: Path, doc: dict[str, Any]) -> None:
    (mailbox / "requests").mkdir(parents=True, exist_ok=True)
    tmp = mailbox / "requests" / f".{doc['id']}.tmp"
    tmp.write_text(json.dumps(doc))
    os.rename(tmp, mailbox / "requests" / f"{doc['id']}.json")


def wait_response(mailbox: Path, request_id: str, timeout: float = 600) -> dict[str, Any]:
    path = mailbox / "responses" / f"{request_id}.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no response {path}"
        time.sleep(0.1)
    return dict(json.loads(path.read_text()))


def test_mailbox_and_http_give_verify_report_with_events_and_reuse(
    tmp_path: Path, default_sidecar: Sidecar, verify_options: list[str]
) -> None:
    sidecar = default_sidecar
    # The sidecar's verifications probe flakiness with --repeat 3 by default.
    direct = run_verify(
        EXAMPLE,
        verify_options,
        tmp_path / "direct",
        "--repo",
        str(EXAMPLE / "repo.bundle"),
        "--repeat",
        "3",
    )
    assert direct.report["verdict"] == "accepted", direct.stderr
    sidecar.start()

    put_request(sidecar.mailbox, payload("m1"))
    mailed = wait_response(sidecar.mailbox, "m1")
    assert mailed["status"] == "done" and mailed["reused"] is False
    assert comparable(mailed["report"]) == comparable(direct.report)
    archive = Path(mailed["archive"])
    # Archived in the sidecar's state directory; the mailbox holds copies of responses only.
    assert archive == sidecar.state.resolve() / "runs/run-1/authoring/c1/round-1/verify-1"
    assert sorted(os.listdir(sidecar.mailbox)) == ["claimed", "rejected", "requests", "responses"]
    for name in ("request.json", "report.json", "response.json", "run/bundle", "task"):
        assert (archive / name).exists(), name
    assert json.loads((archive / "report.json").read_text()) == mailed["report"]

    # Over HTTP, a changed payload (a new instruction): verified, not reused; its stream
    # shows every stage start and end.
    changed = payload("h1", verify=2)
    changed["task"]["instruction"] += "\nAlso keep the usage message.\n"
    posted = httpx.post(
        f"{sidecar.url}/v1/verifications", json=changed, timeout=30, headers=sidecar.headers
    )
    assert posted.status_code == 202
    # The token is the state directory's, which no other local user can read; a verification
    # is read with it only (the liveness probe and the spec are open).
    assert httpx.get(f"{sidecar.url}/v1/verifications/h1").status_code == 401
    assert httpx.get(f"{sidecar.url}/healthz").status_code == 200
    assert (sidecar.state / "token").stat().st_mode & 0o777 == 0o600
    assert sidecar.state.stat().st_mode & 0o777 == 0o700
    seen: list[tuple[str, str]] = []
    with httpx.stream(
        "GET",
        f"{sidecar.url}/v1/verifications/h1/events",
        timeout=httpx.Timeout(30, read=600),
        headers=sidecar.headers,
    ) as stream:
        kind = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                seen.append((kind, f"{data['stage']}:{data['status']}"))
    stages = [entry for kind, entry in seen if kind == "stage"]
    for stage in ("compile", "audit", "build", "smoke", "nop", "oracle", "determinism"):
        assert f"{stage}:running" in stages and f"{stage}:passed" in stages, (stage, seen)
    assert seen[-1] == ("job", "job:done")
    # verify's progress lines come as events of their own (the first: compile's).
    assert ("progress", "compile:progress") in seen, seen
    status = sidecar.wait("h1")
    assert status["stages"]["determinism"]["status"] == "passed"
    http_report = status["response"]["report"]
    assert status["response"]["reused"] is False
    assert comparable(http_report) == comparable(direct.report)

    # The same payload as m1 again, under a new id: answered from reuse, at once.
    started = time.monotonic()
    again = httpx.post(
        f"{sidecar.url}/v1/verifications", json=payload("h2", verify=3), headers=sidecar.headers
    )
    assert again.status_code == 202
    reused = sidecar.wait("h2")
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, elapsed
    assert reused["response"]["reused"] is True
    assert reused["response"]["reusedFrom"] == mailed["report"]["runId"]
    assert reused["response"]["report"] == mailed["report"]
    metrics = httpx.get(f"{sidecar.url}/metrics", headers=sidecar.headers).text
    assert "selfbench_reuse_hits_total 1.0" in metrics
    assert 'selfbench_verifications_total{verdict="accepted"} 3.0' in metrics
    assert 'selfbench_stage_duration_seconds_count{stage="oracle"} 2.0' in metrics
    health = httpx.get(f"{sidecar.url}/healthz", headers=sidecar.headers).json()
    assert health == {"status": "ok", "engine": True, "queueDepth": 0, "running": 0}


def test_a_repository_s_git_settings_never_run_through_verify_or_serve(
    tmp_path: Path, verify_options: list[str]
) -> None:
    """The example's repository, cloned and armed with every command-running git setting:
    `verify --repo` and a served request naming it (inside --allow-repo-root) are accepted,
    and no marker appears on the host."""
    repos = tmp_path / "repos"
    repos.mkdir()
    armed = repos / "calc"
    subprocess.run(
        ["git", "clone", "-q", str(EXAMPLE / "repo.bundle"), str(armed)],
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    markers = tmp_path / "markers"
    names = arm(armed, markers)
    # The repository's settings are the subject: no flakiness probe, no exploits.
    options = [*verify_options, *FAST]
    direct = run_verify(EXAMPLE, options, tmp_path / "direct", "--repo", str(armed))
    assert direct.report["verdict"] == "accepted", direct.stderr
    car = Sidecar(
        tmp_path / "state", tmp_path / "mailbox", [*options, "--allow-repo-root", str(repos)]
    ).start()
    try:
        doc = payload("armed")
        doc["repo"] = str(armed)
        doc["task"]["instruction"] += "\nServed from an armed repository.\n"  # no reuse
        put_request(car.mailbox, doc)
        answer = wait_response(car.mailbox, "armed")
        assert answer["status"] == "done", answer
        assert answer["report"]["verdict"] == "accepted"
    finally:
        car.stop()
    assert os.listdir(markers) == [], names


def test_kill_9_mid_build_then_restart_answers_once_and_leaves_nothing(
    tmp_path: Path, sidecar: Sidecar, docker_client: docker.DockerClient
) -> None:
    nonce = uuid.uuid4().hex[:12]
    # A fresh setup step that takes a while: the kill lands while the image builds.
    doc = payload("k1", setupCommand=f"./configure && sleep 15 && echo {nonce} >/dev/null")
    sidecar.start()
    put_request(sidecar.mailbox, doc)
    store = sidecar.state / "jobs.sqlite3"
    deadline = time.monotonic() + 120
    run_id = pid = None
    while True:
        assert time.monotonic() < deadline
        with sqlite3.connect(store) as db:
            row = db.execute("SELECT run_id, pid, state FROM jobs WHERE id = 'k1'").fetchone()
        events = Path(sidecar.state / "runs/run-1/authoring/c1/round-1/verify-1/events.jsonl")
        if (
            row
            and row[1]
            and events.exists()
            and '"build", "status": "running"' in events.read_text()
        ):
            run_id, pid = row[0], row[1]
            break
        time.sleep(0.1)
    time.sleep(3)  # inside the build's sleep
    sidecar.kill()
    # The kernel stops the orphaned verification (parent-death signal); it removes its own.
    gone = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < gone:
        time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists()
    assert not (sidecar.mailbox / "responses" / "k1.json").exists()

    sidecar.start()
    answer = wait_response(sidecar.mailbox, "k1")
    assert answer["status"] == "done" and answer["report"]["verdict"] == "accepted"
    assert answer["report"]["runId"] != run_id
    assert leftovers(docker_client, run_id) == []
    assert sorted(p.name for p in (sidecar.mailbox / "responses").iterdir()) == ["k1.json"]
    with sqlite3.connect(store) as db:
        attempts = db.execute("SELECT attempts FROM jobs WHERE id = 'k1'").fetchone()[0]
    assert attempts == 2
    log = sidecar.log.read_text()
    assert "requeued 1 verification(s)" in log


def fork_server_of(parent: int) -> int:
    """The pid of the fork server a sidecar started (runner.supervise.launcher)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"runner.cli.forkserver" in cmdline:
            return int(entry.name)
    raise AssertionError(f"no fork server under {parent}")


def test_a_fork_server_killed_alone_is_an_infrastructure_failure_run_again(
    tmp_path: Path, sidecar: Sidecar, docker_client: docker.DockerClient
) -> None:
    """The fork server dies under a running verification (the kernel stops verify, which
    removes its containers): the job runs again on a new server and gets its verdict, its
    event stream says why, and nothing of the lost run is left."""
    nonce = uuid.uuid4().hex[:12]
    sidecar.start()
    assert sidecar.process is not None
    put_request(
        sidecar.mailbox, payload("fs1", setupCommand=f"./configure && sleep 15 && echo {nonce}")
    )
    store = sidecar.state / "jobs.sqlite3"
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, sidecar.log.read_text()
        with sqlite3.connect(store) as db:
            row = db.execute("SELECT run_id, pid FROM jobs WHERE id = 'fs1'").fetchone()
        if row and row[1] and leftovers(docker_client, row[0]):
            run_id, pid = row
            break
        time.sleep(0.1)
    server = fork_server_of(sidecar.process.pid)
    os.kill(server, signal.SIGKILL)
    answer = wait_response(sidecar.mailbox, "fs1")
    assert answer["status"] == "done" and answer["report"]["verdict"] == "accepted", answer
    assert answer["report"]["runId"] != run_id
    assert not Path(f"/proc/{pid}").exists()
    assert leftovers(docker_client, run_id) == []
    with sqlite3.connect(store) as db:
        attempts = db.execute("SELECT attempts FROM jobs WHERE id = 'fs1'").fetchone()[0]
    assert attempts == 2
    events = httpx.get(
        f"{sidecar.url}/v1/verifications/fs1/events", timeout=30, headers=sidecar.headers
    ).text
    assert "the fork server was lost while verify ran" in events, events
    assert fork_server_of(sidecar.process.pid) != server
    assert "the fork server exited; starting another" in sidecar.log.read_text()


def test_twenty_requests_at_once_with_two_jobs(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    # Scheduling and reuse are the subject.
    car = Sidecar(tmp_path / "state", tmp_path / "mailbox", [*verify_options, *FAST], jobs=2)
    car.start()
    try:
        # 10 identical payloads and 10 of another task (its own setup, so its own images).
        nonce = uuid.uuid4().hex[:12]
        docs = [payload(f"a{i}", verify=i) for i in range(10)] + [
            payload(
                f"b{i}",
                verify=i,
                candidate="c2",
                taskId=f"bash-calc-{nonce}",
                setupCommand=f"./configure && echo {nonce} >/dev/null",
            )
            for i in range(10)
        ]
        with httpx.Client(timeout=60, headers=car.headers) as client:
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(20) as pool:
                codes = list(
                    pool.map(
                        lambda d: client.post(f"{car.url}/v1/verifications", json=d).status_code,
                        docs,
                    )
                )
        assert codes == [202] * 20
        results = {d["id"]: car.wait(d["id"]) for d in docs}
        assert all(r["status"] == "done" for r in results.values())
        assert all(r["response"]["report"]["verdict"] == "accepted" for r in results.values())
        for group in ("a", "b"):
            members = [r for i, r in results.items() if i.startswith(group)]
            ran = [r for r in members if not r["response"]["reused"]]
            assert len(ran) == 1, [r["response"]["reused"] for r in members]
            assert all(
                r["response"]["reusedFrom"] == ran[0]["response"]["report"]["runId"]
                for r in members
                if r["response"]["reused"]
            )
        assert car.process is not None
        with open(f"/proc/{car.process.pid}/status") as handle:
            rss = next(int(ln.split()[1]) for ln in handle if ln.startswith("VmHWM:"))
        print(f"sidecar peak RSS after 20 requests: {rss / 1024:.0f} MiB")
        assert rss < 400 * 1024, rss
    finally:
        car.stop()
    for result in results.values():
        assert leftovers(docker_client, result["response"]["report"]["runId"]) == []


def test_sigterm_stops_within_the_grace_period_and_requeues(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    car = Sidecar(
        tmp_path / "state", tmp_path / "mailbox", [*verify_options, "--grace-period", "8"]
    )
    car.start()
    nonce = uuid.uuid4().hex[:12]
    put_request(car.mailbox, payload("g1", setupCommand=f"./configure && sleep 30 && echo {nonce}"))
    store = car.state / "jobs.sqlite3"
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline
        with sqlite3.connect(store) as db:
            row = db.execute("SELECT run_id, pid FROM jobs WHERE id = 'g1'").fetchone()
        if row and row[1]:
            run_id, pid = row
            break
        time.sleep(0.1)
    time.sleep(3)
    assert car.process is not None
    stopped = time.monotonic()
    car.process.send_signal(signal.SIGTERM)
    car.process.wait(60)
    took = time.monotonic() - stopped
    assert took < 8 + 3, took  # the grace period, and a little for the process itself
    assert car.process.returncode == 0
    assert not Path(f"/proc/{pid}").exists()
    assert leftovers(docker_client, run_id) == []
    with sqlite3.connect(store) as db:
        state = db.execute("SELECT state FROM jobs WHERE id = 'g1'").fetchone()[0]
    assert state == "queued"
    assert not (car.mailbox / "responses" / "g1.json").exists()
    assert "stopping (SIGTERM)" in car.log.read_text()


def test_a_sidecar_keeps_its_task_images_under_its_cache_budget(
    tmp_path: Path, verify_options: list[str], base_image: str
) -> None:
    """`serve --cache-budget` (and `worker`, the same service) removes the least recently used
    task images after each verification: on a private engine, so no other test's images go."""
    from runner.engine.cachebudget import footprint
    from runner.engine.images import task_images

    base = derived_base(verify_options)
    nonce = uuid.uuid4().hex[:8]
    with private_engine(tmp_path / "engine", images=(base_image, base)) as engine:
        client = engine.client()

        def tags(**filters: str) -> list[str]:
            # The API's list alone: docker-py's images.list() inspects each image after listing,
            # and an image the budget removes in between is a 404.
            listed = client.api.images(filters=filters or None)
            return sorted(t for i in listed for t in (i.get("RepoTags") or []))

        def task_tags() -> list[str]:
            found = tags(label="org.selfbench.runner=1")
            return [t for t in found if ":agent-" in t or ":verifier-" in t]

        def gone(*names: str) -> None:
            # The budget's pass runs after the answer is written: wait for its removals.
            deadline = time.monotonic() + 60
            while any(name in t for t in task_tags() for name in names):
                assert time.monotonic() < deadline, task_tags()
                time.sleep(0.5)

        # A cache of its own: use records and holds are the host's, and a verification another
        # test runs meanwhile would hold every image used since it began.
        env = {**engine.environ(), "SELFBENCH_CACHE_DIR": str(tmp_path / "cache")}
        build_options = [*verify_options, *FAST, "--build-network", "host"]

        # Every task image carries the runtime layers above the derived base (the apt packages,
        # the toolchains: 260 MB here), shared by all the tasks and freed only with the last of
        # them; and a task whose setup writes 3 MB holds about 12 MB of its own (the file, its
        # git object, the layers above). Two tasks verified without the sidecar measure both:
        # one with no file (the shared part) and one with it (its own part).
        def verify(name: str, setup: str) -> None:
            task = example_copy(tmp_path, name, taskId=f"{name}-{nonce}", setupCommand=setup)
            done = subprocess.run(
                [sys.executable, "-m", "runner", "verify", str(task), *build_options],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=900,
            )
            assert done.returncode == 0, done.stderr[-3000:]

        verify("cb-a", "./configure")
        shared = footprint(task_images(client.api))
        verify("cb-b", BLOB.format(name="blob"))
        own = footprint(task_images(client.api)) - shared
        assert own > 3_000_000, own
        # The shared part and one task's own part fit; a second task's does not.
        budget = shared + own * 3 // 2
        car = Sidecar(
            tmp_path / "state",
            tmp_path / "mailbox",
            [*build_options, "--cache-budget", str(budget)],
            env=env,
        )
        car.start()
        try:
            for index in (1, 2):
                # Each task's setup writes 3 MB: one task's images fit the budget, two do not.
                doc = payload(
                    f"cb{index}",
                    candidate=f"c{index}",
                    taskId=f"cb-{index}-{nonce}",
                    setupCommand=BLOB.format(name=f"blob{index}"),
                )
                put_request(car.mailbox, doc)
                answer = wait_response(car.mailbox, f"cb{index}")
                assert answer["report"]["verdict"] == "accepted", answer
                if index == 1:
                    # Over budget: the two tasks verified before go, least recently used
                    # first, and the rest fits.
                    gone(f"/cb-a-{nonce}:", f"/cb-b-{nonce}:")
                    assert len(task_tags()) == 2, task_tags()
            gone(f"/cb-1-{nonce}:")
            # The last task's images stay, and so do the shared layers below them.
            assert [t.split(":")[0] for t in task_tags()] == [f"selfbench/cb-2-{nonce}"] * 2
            left = footprint(task_images(client.api))
            assert shared < left <= budget, (shared, left, budget)
            metrics = httpx.get(f"{car.url}/metrics", headers=car.headers, timeout=30).text
            freed = next(
                float(line.split()[1])
                for line in metrics.splitlines()
                if line.startswith("selfbench_cache_freed_bytes_total ")
            )
            assert freed >= 3_000_000, metrics
            assert base in tags()  # not a task image
        finally:
            car.stop()
            client.close()
        log = car.log.read_text()
        assert "cache budget: removed 4 image(s)" in log, log
        assert "cache budget: removed 2 image(s)" in log, log
