"""The sidecar without Docker: request documents, the job store, the repository policy, the
mailbox protocol and the HTTP API's guards (a real uvicorn server on a free port)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from runner.sidecar.mailbox import Mailbox, sidecar_name
from runner.sidecar.request import (
    JobState,
    VerificationRequest,
    VerificationResponse,
    payload_digest,
)
from runner.sidecar.service import RequestRefusedError, Service, ServiceConfig
from runner.sidecar.store import ConflictError, Store

ROOT = Path(__file__).resolve().parents[2]


def request_doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": "req-1",
        "run": "run-1",
        "stage": "authoring",
        "candidate": "cand-1",
        "round": 1,
        "verify": 1,
        "task": {
            "definition": {"taskId": "t-1", "repo": "https://git.invalid/x.git"},
            "instruction": "Do it.",
            "testPatch": "diff --git a/t b/t\n",
            "goldPatch": "diff --git a/g b/g\n",
        },
    }
    doc.update(overrides)
    return doc


def make_request(**overrides: Any) -> VerificationRequest:
    return VerificationRequest.model_validate(request_doc(**overrides))


# ---- documents ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [".", "..", "...", "", "a/b", "a b", "x" * 129, "é", "a\n"])
@pytest.mark.parametrize("field", ["id", "run", "stage", "candidate"])
def test_names_that_would_be_path_tricks_are_refused(field: str, bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        make_request(**{field: bad})
    assert caught.value.errors()[0]["loc"] == (field,)


def test_archive_path_is_the_seed_layout() -> None:
    request = make_request(run="r", stage="verification", candidate="c.2", round=3, verify=2)
    assert str(request.archive_path()) == "runs/r/verification/c.2/round-3/verify-2"


@pytest.mark.parametrize("repo", ["", "   ", "a\nb", "a\n", "a\x00b", "\u2028"])
def test_repo_must_be_one_printable_line(repo: str) -> None:
    with pytest.raises(ValidationError):
        make_request(repo=repo)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError):
        VerificationRequest.model_validate({**request_doc(), "priority": 1})


def test_payload_digest_ignores_addressing_and_sees_the_task() -> None:
    settings = {"baseImage": "b"}
    base = payload_digest(make_request(), base_tree="t", runner_version="1", settings=settings)
    moved = make_request(id="other", run="r2", candidate="c9", round=2, verify=3)
    assert payload_digest(moved, base_tree="t", runner_version="1", settings=settings) == base
    doc = request_doc()
    doc["task"]["instruction"] = "Do it well."
    changed = VerificationRequest.model_validate(doc)
    for other in (
        payload_digest(changed, base_tree="t", runner_version="1", settings=settings),
        payload_digest(make_request(), base_tree="t2", runner_version="1", settings=settings),
        payload_digest(make_request(), base_tree="t", runner_version="2", settings=settings),
        payload_digest(make_request(), base_tree="t", runner_version="1", settings={}),
        payload_digest(
            make_request(options={"pidsLimit": 256}),
            base_tree="t",
            runner_version="1",
            settings=settings,
        ),
    ):
        assert other != base


def test_lone_surrogates_survive_the_store(tmp_path: Path) -> None:
    doc = request_doc()
    doc["task"]["instruction"] = "bad \udc80 text"
    request = VerificationRequest.model_validate(doc)
    store = Store(tmp_path / "jobs.sqlite3")
    job, _ = store.add(request, source="http", archive=tmp_path / "a")
    assert job.request.task.instruction == "bad \udc80 text"


# ---- the store ---------------------------------------------------------------------------


def test_a_repeated_id_is_the_same_job_and_another_body_a_conflict(tmp_path: Path) -> None:
    store = Store(tmp_path / "jobs.sqlite3")
    first, new = store.add(make_request(), source="http", archive=tmp_path / "a1")
    assert new and first.state is JobState.QUEUED
    again, new = store.add(make_request(), source="http", archive=tmp_path / "a1")
    assert not new and again.id == first.id
    with pytest.raises(ConflictError, match="different request"):
        store.add(make_request(verify=2), source="http", archive=tmp_path / "a2")
    with pytest.raises(ConflictError, match="already the archive"):
        store.add(make_request(id="req-2"), source="http", archive=tmp_path / "a1")


def test_a_job_finishes_once_and_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    store = Store(path)
    store.add(make_request(), source="mailbox", archive=tmp_path / "a")
    assert store.start("req-1", run_id="run-x")
    assert not store.start("req-1", run_id="run-y")
    response = VerificationResponse(id="req-1", status="done", report={"verdict": "accepted"})
    assert store.finish("req-1", response, state=JobState.DONE, verdict="accepted")
    assert not store.finish("req-1", response, state=JobState.ERROR, verdict=None)
    store.close()
    reopened = Store(path)
    job = reopened.get("req-1")
    assert job is not None and job.state is JobState.DONE and job.run_id == "run-x"
    assert job.response == response
    assert [j.id for j in reopened.undelivered("mailbox")] == ["req-1"]
    reopened.set_digest("req-1", "d1")
    found = reopened.accepted_with("d1")
    assert found is not None and found.id == "req-1"
    assert reopened.accepted_with("") is None


def test_running_jobs_are_requeued_and_red_ones_never_reused(tmp_path: Path) -> None:
    store = Store(tmp_path / "jobs.sqlite3")
    store.add(make_request(), source="http", archive=tmp_path / "a")
    store.set_digest("req-1", "d")
    store.start("req-1", run_id="r1")
    assert [j.id for j in store.running()] == ["req-1"]
    store.requeue("req-1")
    assert [e.id for e in store.queue()] == ["req-1"]
    store.start("req-1", run_id="r2")
    red = VerificationResponse(id="req-1", status="done", report={"verdict": "rejected"})
    store.finish("req-1", red, state=JobState.DONE, verdict="rejected")
    assert store.accepted_with("d") is None
    job = store.get("req-1")
    assert job is not None and job.attempts == 2


# ---- the repository policy ---------------------------------------------------------------


def service_for(tmp_path: Path, roots: tuple[Path, ...] = ()) -> Service:
    return Service(
        ServiceConfig(state_dir=tmp_path / "state", allow_repo_roots=roots),
        Store(tmp_path / "state" / "jobs.sqlite3"),
    )


def test_remote_repositories_pass_and_local_ones_need_an_allowed_root(tmp_path: Path) -> None:
    allowed = tmp_path / "repos"
    (allowed / "x").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (allowed / "escape").symlink_to(outside)
    service = service_for(tmp_path, (allowed,))
    assert service.repository(make_request(repo="https://git.invalid/x.git")) is not None
    assert service.repository(make_request(repo=str(allowed / "x"))) == str(allowed / "x")
    assert service.repository(make_request(repo=f"file://{allowed / 'x'}")) == str(allowed / "x")
    for bad, words in [
        ("relative/path", "relative path"),
        (str(outside), "not under an --allow-repo-root"),
        (str(allowed / "escape"), "not under an --allow-repo-root"),
        (str(allowed / ".." / "outside"), "not under an --allow-repo-root"),
        ("file:///etc", "not under an --allow-repo-root"),
        ("ext::sh -c touch% /tmp/pwned", "relative path"),
    ]:
        with pytest.raises(RequestRefusedError, match=words) as caught:
            service.repository(make_request(repo=bad))
        assert caught.value.field == "repo"
    doc = request_doc()
    doc["task"]["definition"]["repo"] = str(outside)
    with pytest.raises(RequestRefusedError) as caught:
        service.repository(VerificationRequest.model_validate(doc))
    assert caught.value.field == "task.definition.repo"
    with pytest.raises(RequestRefusedError, match="allows no local repositories"):
        service_for(tmp_path / "n").repository(make_request(repo=str(allowed / "x")))


# ---- the mailbox -------------------------------------------------------------------------


def responses(mailbox: Path) -> dict[str, dict[str, Any]]:
    return {
        p.stem: json.loads(p.read_text()) for p in sorted((mailbox / "responses").glob("*.json"))
    }


def put(mailbox: Path, name: str, data: bytes) -> None:
    tmp = mailbox / "requests" / f".{name}.tmp"
    tmp.write_bytes(data)
    os.rename(tmp, mailbox / "requests" / name)


def test_malformed_requests_get_an_error_response_and_the_loop_goes_on(tmp_path: Path) -> None:
    box = tmp_path / "mb"
    service = service_for(tmp_path)
    mailbox = Mailbox(box, service)
    old = time.time() - 60
    put(box, "broken.json", b'{"id": "broken", ')
    os.utime(box / "requests" / "broken.json", (old, old))
    put(box, "wrong.json", json.dumps(request_doc(id="other")).encode())
    put(box, "bad-field.json", json.dumps(request_doc(id="bad-field", round=-1)).encode())
    put(box, "good.json", json.dumps(request_doc(id="good")).encode())
    put(box, "a b.json", b"{}")
    (box / "requests" / "..json").write_text("{}")  # dot files are writers' temporary files
    (box / "requests" / "link.json").symlink_to("/etc/passwd")
    (box / "requests" / "notes.txt").write_text("ignored")
    mailbox.poll()
    answers = responses(box)
    assert answers["broken"]["error"]["code"] == "invalid-request"
    assert answers["wrong"]["error"]["problems"][0]["field"] == "id"
    assert answers["bad-field"]["error"]["problems"][0]["field"] == "round"
    assert answers["link"]["error"]["code"] == "unreadable"
    assert "root:" not in json.dumps(answers["link"])
    assert "good" not in answers  # recorded, queued: answered when it has run
    job = service.store.get("good")
    assert job is not None and job.state is JobState.QUEUED
    assert job.archive == box.resolve() / "runs/run-1/authoring/cand-1/round-1/verify-1"
    assert next(p.name for p in (box / "rejected").iterdir()).endswith("a_b.json")
    assert sorted(os.listdir(box / "requests")) == ["..json", "notes.txt"]
    assert os.listdir(mailbox.claimed) == []


def test_a_request_still_being_written_is_not_answered_yet(tmp_path: Path) -> None:
    box = tmp_path / "mb"
    mailbox = Mailbox(box, service_for(tmp_path))
    (box / "requests" / "slow.json").write_text('{"id": "sl')
    mailbox.poll()
    assert responses(box) == {}
    with (mailbox.claimed / "slow.json").open("w") as handle:
        handle.write(json.dumps(request_doc(id="slow")))
    mailbox.poll()
    assert responses(box) == {}
    assert mailbox.service.store.get("slow") is not None


def test_two_sidecars_on_one_mailbox_never_take_the_same_request(tmp_path: Path) -> None:
    box = tmp_path / "mb"
    one = Mailbox(box, service_for(tmp_path / "one"))
    two = Mailbox(box, service_for(tmp_path / "two"))
    assert one.claimed != two.claimed
    ids = [f"r{i}" for i in range(60)]

    def feed() -> None:
        for i, request_id in enumerate(ids):
            doc = request_doc(id=request_id, verify=i)
            put(box, f"{request_id}.json", json.dumps(doc).encode())

    feeder = threading.Thread(target=feed)
    feeder.start()
    while feeder.is_alive() or os.listdir(box / "requests"):
        one.poll()
        two.poll()
    feeder.join()
    one.poll()
    two.poll()
    taken_one = {i for i in ids if one.service.store.get(i) is not None}
    taken_two = {i for i in ids if two.service.store.get(i) is not None}
    assert taken_one | taken_two == set(ids)
    assert taken_one & taken_two == set()


def test_a_repeated_mailbox_id_is_answered_from_the_store(tmp_path: Path) -> None:
    box = tmp_path / "mb"
    service = service_for(tmp_path)
    mailbox = Mailbox(box, service)
    put(box, "r.json", json.dumps(request_doc(id="r")).encode())
    mailbox.poll()
    service.store.start("r", run_id="x")
    done = VerificationResponse(id="r", status="done", report={"verdict": "rejected"})
    service.store.finish("r", done, state=JobState.DONE, verdict="rejected")
    put(box, "r.json", json.dumps(request_doc(id="r")).encode())
    mailbox.poll()
    assert responses(box)["r"]["report"] == {"verdict": "rejected"}


def test_sidecar_names_are_stable_per_state_directory(tmp_path: Path) -> None:
    assert sidecar_name(tmp_path / "a") == sidecar_name(tmp_path / "a")
    assert sidecar_name(tmp_path / "a") != sidecar_name(tmp_path / "b")


# ---- the HTTP API (a real server process) ------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(self, process: subprocess.Popen[str], url: str, log: Path) -> None:
        self.process, self.url, self.log = process, url, log


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    token = tmp_path / "token"
    token.write_text("s3cret-token-0123456789\n")
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runner",
                "serve",
                "--http",
                f"127.0.0.1:{port}",
                "--state-dir",
                str(tmp_path / "state"),
                "--token-file",
                str(token),
                "--max-body",
                "1MiB",
                "--grace-period",
                "5",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while "listening" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield Served(process, url, log)
    finally:
        process.terminate()
        process.wait(30)


AUTH = {"Authorization": "Bearer s3cret-token-0123456789"}


def test_http_needs_the_token(served: Served) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        answer = httpx.get(f"{served.url}/v1/verifications/x", headers=headers)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"
        assert answer.headers["www-authenticate"] == "Bearer"


def test_http_bad_requests_are_json_4xx(served: Served) -> None:
    post = f"{served.url}/v1/verifications"
    too_big = httpx.post(post, content=b"x" * (2 * 1024 * 1024), headers=AUTH)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "too-large"

    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b"y" * 65536

    chunked = httpx.post(post, content=chunks(), headers=AUTH)
    assert chunked.status_code == 413
    invalid = httpx.post(post, json=request_doc(id=".."), headers=AUTH)
    assert invalid.status_code == 422
    assert invalid.json()["error"]["problems"][0]["field"] == "id"
    not_json = httpx.post(
        post, content=b"{nope", headers={**AUTH, "Content-Type": "application/json"}
    )
    assert not_json.status_code in (400, 422)
    local = httpx.post(post, json=request_doc(repo="/etc"), headers=AUTH)
    assert local.status_code == 403 and local.json()["error"]["code"] == "repository-refused"
    unknown = httpx.get(f"{served.url}/v1/verifications/nope", headers=AUTH)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not-found"
    trick = httpx.get(f"{served.url}/v1/verifications/..%2F..", headers=AUTH)
    assert trick.status_code == 404
    allowed = httpx.request("PUT", f"{served.url}/v1/verifications/x", headers=AUTH)
    assert allowed.status_code == 405 and set(allowed.headers["allow"].split(", ")) == {
        "DELETE",
        "GET",
    }


@pytest.fixture
def silent_git() -> Iterator[str]:
    """A git URL whose server accepts and never answers: a request for it stays queued (its
    digest waits on the fetch) without holding up anything else."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/silent.git"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def test_http_records_once_conflicts_and_cancels(served: Served, silent_git: str) -> None:
    post = f"{served.url}/v1/verifications"
    first = httpx.post(post, json=request_doc(id="c1", repo=silent_git), headers=AUTH)
    assert first.status_code == 202 and first.headers["location"] == "/v1/verifications/c1"
    again = httpx.post(post, json=request_doc(id="c1", repo=silent_git), headers=AUTH)
    assert again.status_code == 200 and again.json()["id"] == "c1"
    other = httpx.post(post, json=request_doc(id="c1", repo=silent_git, verify=9), headers=AUTH)
    assert other.status_code == 409
    cancelled = httpx.delete(f"{served.url}/v1/verifications/c1", headers=AUTH)
    assert cancelled.status_code == 200
    deadline = time.monotonic() + 30
    while True:
        status = httpx.get(f"{served.url}/v1/verifications/c1", headers=AUTH).json()
        if status["status"] != "running" and status["status"] != "queued":
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert status["status"] == "cancelled"
    assert status["response"]["error"]["code"] == "cancelled"
    late = httpx.delete(f"{served.url}/v1/verifications/c1", headers=AUTH)
    assert late.status_code == 409
    metrics = httpx.get(f"{served.url}/metrics", headers=AUTH).text
    assert 'selfbench_verifications_total{verdict="cancelled"} 1.0' in metrics
    spec = httpx.get(f"{served.url}/openapi.json", headers=AUTH).json()
    assert "/v1/verifications/{verification_id}/events" in spec["paths"]


def test_serve_refuses_a_public_bind_without_a_token(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "serve",
            "--http",
            "0.0.0.0:0",
            "--state-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "SELFBENCH_SIDECAR_TOKEN"},
        check=False,
    )
    assert result.returncode == 2
    assert "needs a token" in result.stderr
    assert "Traceback" not in result.stderr


def test_schema_prints_the_request_and_response_schemas() -> None:
    for flag, field in (("--request", "task"), ("--response", "reusedFrom")):
        result = subprocess.run(
            [sys.executable, "-m", "runner", "schema", flag],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        assert field in json.loads(result.stdout)["properties"]


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    served: Served, tmp_path: Path
) -> None:
    """Property-based requests from the served OpenAPI document, stateful sequences included.
    `use_after_free` is left out on purpose: DELETE cancels a verification and its record
    stays readable (status `cancelled`), as its documentation says."""
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("st")),
            "run",
            f"{served.url}/openapi.json",
            "--checks",
            "all",
            "--exclude-checks",
            "use_after_free",
            "--max-examples",
            "20",
            "--header",
            f"Authorization: {AUTH['Authorization']}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,  # its cache directory goes there, not into the checkout
    )
    assert result.returncode == 0, result.stdout[-6000:]
    assert "Failures:" not in result.stdout and "generated" in result.stdout
    assert "Traceback" not in served.log.read_text()
