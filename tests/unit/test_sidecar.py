"""The sidecar without Docker: request documents, the job store, the repository policy, the
mailbox protocol and the HTTP API's guards (a real uvicorn server on a free port)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
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

from runner.sidecar.engineops import EngineOps
from runner.sidecar.jobs import ConflictError
from runner.sidecar.mailbox import Mailbox, sidecar_name
from runner.sidecar.metrics import Metrics
from runner.sidecar.policy import RequestRefusedError
from runner.sidecar.request import (
    JobState,
    StageProgress,
    VerificationRequest,
    VerificationResponse,
    payload_digest,
)
from runner.sidecar.service import Service, ServiceConfig, _Running
from runner.sidecar.store import Store
from tests.helpers import free_port

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


def test_status_reads_never_touch_the_request(tmp_path: Path) -> None:
    """A GET (status, event stream) reads a summary: a request of any size is neither copied
    nor parsed again (here it is not even JSON any more, and the status still answers)."""
    store = Store(tmp_path / "jobs.sqlite3")
    store.add(make_request(id="big"), source="http", archive=tmp_path / "a")
    with sqlite3.connect(tmp_path / "jobs.sqlite3") as db:
        db.execute("UPDATE jobs SET request = 'x' WHERE id = 'big'")
    summary = store.summary("big")
    assert summary is not None and summary.state is JobState.QUEUED
    assert store.status(summary).id == "big"
    with pytest.raises(ValueError):
        store.get("big")


def test_a_running_stages_progress_lines_show_in_its_status_without_changing_it(
    tmp_path: Path,
) -> None:
    """verify's progress lines (events with the status `progress`) reach the status document
    as each stage's `progress`; the stage's own status is what its last stage event said."""
    from runner.run.events import LoggedEvent

    store = Store(tmp_path / "jobs.sqlite3")
    store.add(make_request(id="p"), source="http", archive=tmp_path / "a")

    def event(seq: int, stage: str, status: str, detail: str = "") -> LoggedEvent:
        return LoggedEvent(seq=seq, at="", stage=stage, status=status, detail=detail, seconds=None)

    store.add_events(
        "p",
        [
            event(1, "nop", "running"),
            event(2, "nop", "progress", "fail_to_pass: 3 passed, 1 failed"),
            event(3, "hack", "running"),
            event(4, "hack", "progress", "exploit 2 of 9: go-testmain"),
            event(5, "hack", "passed", "9 exploit(s) earned no reward"),
        ],
    )
    summary = store.summary("p")
    assert summary is not None
    stages = store.status(summary).document()["stages"]
    assert stages["nop"] == {
        "status": "running",
        "detail": "",
        "progress": "fail_to_pass: 3 passed, 1 failed",
    }
    assert stages["hack"]["status"] == "passed" and stages["hack"]["progress"] == ""


def test_the_worker_folds_each_polls_events_into_the_same_stages_as_the_status() -> None:
    """The heartbeat's stages come from the status document's own fold, taken a poll at a time:
    the job's events are no stage, a new attempt starts afresh, the latest stage is last."""
    from runner.run.events import LoggedEvent
    from runner.sidecar.jobs import fold_stages

    def event(seq: int, stage: str, status: str, detail: str = "") -> LoggedEvent:
        return LoggedEvent(seq=seq, at="", stage=stage, status=status, detail=detail, seconds=None)

    stages: dict[str, StageProgress] = {}
    fold_stages(stages, [event(1, "job", "running"), event(2, "build", "running")])
    fold_stages(stages, [event(3, "build", "failed", "setup")])
    assert list(stages) == ["build"] and stages["build"].status == "failed"
    fold_stages(
        stages,
        [
            event(4, "job", "running"),  # attempt 2
            event(5, "nop", "running"),
            event(6, "oracle", "running"),
            event(7, "nop", "passed"),
            event(8, "oracle", "progress", "fail_to_pass: 1 passed"),
        ],
    )
    assert list(stages) == ["oracle", "nop"]
    assert stages["oracle"].progress == "fail_to_pass: 1 passed"


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


def service_for(
    tmp_path: Path, roots: tuple[Path, ...] = (), urls: tuple[str, ...] = ("https://git.invalid/*",)
) -> Service:
    return Service(
        ServiceConfig(state_dir=tmp_path / "state", allow_repo_roots=roots, allow_repo_urls=urls),
        Store(tmp_path / "state" / "jobs.sqlite3"),
    )


class _BudgetOps(EngineOps):
    def __init__(self) -> None:
        super().__init__()
        self.passes: list[tuple[int, float]] = []

    def apply_budget(self, budget: int, *, protect_since: float) -> int:
        self.passes.append((budget, protect_since))
        return 123


def test_the_cache_budget_runs_after_each_run_and_spares_the_running_ones(
    tmp_path: Path,
) -> None:
    ops = _BudgetOps()
    config = ServiceConfig(state_dir=tmp_path / "state", cache_budget=5 << 20)
    service = Service(config, Store(tmp_path / "state" / "jobs.sqlite3"), engine=ops)
    metrics = Metrics(service.depth)
    service.metrics = metrics
    before = time.time()
    service._budget()  # nothing running: whatever is recorded from now on stays
    assert ops.passes[0][0] == 5 << 20 and ops.passes[0][1] >= before
    # Two verifications still running: what the older one used since it started stays.
    for job, started in (("j1", 1000.0), ("j2", 2000.0)):
        service._running[job] = _Running(
            job_id=job, run_id=job, thread=threading.Thread(), started=started
        )
    service._budget()
    assert ops.passes[1] == (5 << 20, 1000.0)
    assert b"selfbench_cache_freed_bytes_total 246.0" in metrics.render()
    unbounded = Service(
        ServiceConfig(state_dir=tmp_path / "other"), Store(tmp_path / "other.sqlite3"), engine=ops
    )
    unbounded._budget()
    assert len(ops.passes) == 2


def test_git_urls_need_an_allowed_pattern(tmp_path: Path) -> None:
    """The sidecar fetches from its host: a URL nobody allowed is never fetched."""
    closed = service_for(tmp_path / "closed", urls=())
    with pytest.raises(RequestRefusedError, match="allows no git URLs") as caught:
        closed.repository(make_request(repo="https://git.invalid/x.git"))
    assert caught.value.code == "repository-refused" and caught.value.field == "repo"
    doc = request_doc()  # definition.repo is a URL too
    with pytest.raises(RequestRefusedError, match="allows no git URLs") as caught:
        closed.repository(VerificationRequest.model_validate(doc))
    assert caught.value.field == "task.definition.repo"
    team = service_for(tmp_path / "team", urls=("https://git.invalid/team/*",))
    assert team.repository(make_request(repo="https://git.invalid/team/x.git")) is not None
    for other in (
        "https://git.invalid/other/x.git",
        "https://git.invalid.evil.example/team/x.git",
        "ssh://git.invalid/team/x.git",
        "http://169.254.169.254/team/x.git",
    ):
        with pytest.raises(RequestRefusedError, match="matches no --allow-repo-url"):
            team.repository(make_request(repo=other))


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
    # Archived in the state directory: the mailbox holds copies of responses only.
    assert job.archive == tmp_path / "state/runs/run-1/authoring/cand-1/round-1/verify-1"
    assert not (box / "runs").exists()
    rejected = sorted(p.name for p in (box / "rejected").iterdir())
    assert [name.rsplit("-", 1)[1] for name in rejected] == ["a_b.json", "link.json"]
    assert os.path.islink(box / "rejected" / next(n for n in rejected if "link" in n))
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


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry below `root` (links as their target text), to see nothing changed."""
    seen: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            seen[key] = "-> " + os.readlink(path)
        elif path.is_file():
            seen[key] = path.read_bytes()
        else:
            seen[key] = "dir"
    return seen


def finish(service: Service, request_id: str, verdict: str = "rejected") -> None:
    """The job ends as the service ends it (its listeners, the mailbox's answer, run)."""
    job = service.store.get(request_id)
    assert job is not None
    service.store.start(request_id, run_id="x")
    done = VerificationResponse(id=request_id, status="done", report={"verdict": verdict})
    service.answers.finish(job, done, state=JobState.DONE, verdict=verdict)


@pytest.mark.parametrize("swapped", ["responses", "claimed", "claimed/<sidecar>", "rejected"])
def test_a_mailbox_directory_swapped_for_a_link_is_never_followed(
    tmp_path: Path, swapped: str
) -> None:
    """The sandbox replaces one of the mailbox's directories with a link to a directory
    outside: the sidecar writes, reads and removes nothing there, and keeps answering."""
    box = tmp_path / "mb"
    service = service_for(tmp_path)
    mailbox = Mailbox(box, service)
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file.txt").write_text("precious")
    (outside / "victim.json").write_text(json.dumps(request_doc(id="victim")))
    (outside / "r.json").mkdir()  # a directory named like the response and the request
    before = snapshot(outside)
    target = box / swapped.replace("<sidecar>", mailbox.name)
    os.rename(target, tmp_path / "moved-away")
    target.symlink_to(outside, target_is_directory=True)
    put(box, "r.json", json.dumps(request_doc(id="r")).encode())
    put(box, "bad name.json", b"{}")
    mailbox.poll()
    finish(service, "r")
    assert snapshot(outside) == before
    assert service.store.get("victim") is None
    assert responses(box)["r"]["report"] == {"verdict": "rejected"}
    assert not (box / swapped.replace("<sidecar>", mailbox.name)).is_symlink()
    displaced = [p for p in target.parent.iterdir() if p.name.startswith(".displaced-")]
    assert [os.readlink(p) for p in displaced] == [str(outside)]


def test_entries_that_are_not_files_are_answered_and_moved_aside_never_emptied(
    tmp_path: Path,
) -> None:
    box = tmp_path / "mb"
    mailbox = Mailbox(box, service_for(tmp_path))
    (box / "requests" / "dir.json" / "inner").mkdir(parents=True)
    (box / "requests" / "dir.json" / "inner" / "data.json").write_text("{}")
    os.mkfifo(box / "requests" / "fifo.json")
    with (box / "requests" / "huge.json").open("wb") as handle:
        handle.truncate(65 * 1024 * 1024)  # sparse: larger than a request may be
    (box / "requests" / "loop.json").symlink_to("loop.json")
    put(box, "after.json", json.dumps(request_doc(id="after")).encode())
    mailbox.poll()
    answers = responses(box)
    assert {k: v["error"]["code"] for k, v in answers.items()} == {
        "dir": "unreadable",
        "fifo": "unreadable",
        "huge": "unreadable",
        "loop": "unreadable",
    }
    assert "a directory" in answers["dir"]["error"]["message"]
    assert "FIFO" in answers["fifo"]["error"]["message"]
    assert "too large" in answers["huge"]["error"]["message"]
    assert "symbolic link" in answers["loop"]["error"]["message"]
    assert mailbox.service.store.get("after") is not None  # the loop went on
    kept = {p.name.rsplit("-", 1)[1]: p for p in (box / "rejected").iterdir()}
    assert set(kept) == {"dir.json", "fifo.json", "loop.json"}
    assert (kept["dir.json"] / "inner" / "data.json").read_text() == "{}"
    assert os.listdir(mailbox.claimed) == []


def test_a_response_is_final_a_later_file_with_its_id_is_answered_apart(tmp_path: Path) -> None:
    box = tmp_path / "mb"
    service = service_for(tmp_path)
    mailbox = Mailbox(box, service)
    put(box, "r.json", json.dumps(request_doc(id="r")).encode())
    mailbox.poll()
    finish(service, "r", verdict="accepted")
    final = (box / "responses" / "r.json").read_bytes()
    # Another body, the same body again, something that is not a request, all with id r.
    put(box, "r.json", json.dumps(request_doc(id="r", verify=7)).encode())
    mailbox.poll()
    put(box, "r.json", json.dumps(request_doc(id="r")).encode())
    mailbox.poll()
    (box / "responses" / "r.json").unlink()  # the sandbox removed the answer meanwhile
    put(box, "r.json", b"not json")
    mailbox.poll()
    assert (box / "responses" / "r.json").read_bytes() == final
    apart = sorted((box / "responses").glob("r+conflict-*.json"))
    assert [p.name for p in apart] == [f"r+conflict-{n}.json" for n in (1, 2, 3)]
    assert {json.loads(p.read_text())["error"]["code"] for p in apart} == {"conflict"}
    assert os.listdir(mailbox.claimed) == []


def test_one_id_through_http_and_the_mailbox_is_one_job_answered_in_each(tmp_path: Path) -> None:
    box = tmp_path / "mb"
    service = service_for(tmp_path)
    mailbox = Mailbox(box, service)
    service.submit(make_request(id="both"), source="http")
    put(box, "both.json", json.dumps(request_doc(id="both")).encode())
    mailbox.poll()
    assert responses(box) == {}  # recorded, not run twice, not dropped
    finish(service, "both", verdict="accepted")
    assert responses(box)["both"]["report"] == {"verdict": "accepted"}
    assert service.store.undelivered("mailbox") == []
    # Finished through HTTP first, then asked through the mailbox: answered at once.
    service.submit(make_request(id="late", verify=2), source="http")
    finish(service, "late")
    put(box, "late.json", json.dumps(request_doc(id="late", verify=2)).encode())
    mailbox.poll()
    assert responses(box)["late"]["report"] == {"verdict": "rejected"}


def test_progress_that_names_no_report_stage_is_dropped(tmp_path: Path) -> None:
    """Only the report's stages and statuses become a job's progress (and metric labels)."""
    from runner.run.events import LoggedEvent

    service = service_for(tmp_path)
    service.submit(make_request(id="p"), source="http")

    def event(stage: str, status: str) -> LoggedEvent:
        return LoggedEvent(seq=1, at="2026-01-01T00:00:00Z", stage=stage, status=status,
                           detail="x", seconds=1.0)  # fmt: skip

    service.verification.stage_events(
        "p",
        [
            event("oracle", "passed"),
            event("job", "done"),
            event('oracle"} 1\nforged', "passed"),
            event("nop", "green"),
        ],
    )
    job = service.store.summary("p")
    assert job is not None
    assert {k: v.status for k, v in service.store.status(job).stages.items()} == {
        "oracle": "passed"
    }


def test_sidecar_names_are_stable_per_state_directory(tmp_path: Path) -> None:
    assert sidecar_name(tmp_path / "a") == sidecar_name(tmp_path / "a")
    assert sidecar_name(tmp_path / "a") != sidecar_name(tmp_path / "b")


# ---- the HTTP API (a real server process) ------------------------------------------------


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
                "--allow-repo-url",
                "http://127.0.0.1:*/silent.git",
                "--allow-repo-url",
                "https://git.invalid/*",
                "--header-timeout",
                "1.5",
                "--max-connections",
                "16",
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


def raw_exchange(served: Served, data: bytes, *, wait: float = 10.0) -> tuple[bytes, float]:
    """Send raw bytes on a fresh connection; everything the server sends until it closes the
    connection (or `wait` passes), and how long that took."""
    host, port = served.url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass
    return received, time.monotonic() - started


def test_http_refuses_a_body_framed_twice(served: Served) -> None:
    """Content-Length says a few bytes, chunked framing carries far more: refused before any
    of it is read, whatever order the headers come in."""
    body = b"4000000\r\n" + b"z" * 4096  # a 64 MiB chunk announced, only the start sent
    for framing in (
        b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 10\r\n",
    ):
        request = (
            b"POST /v1/verifications HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: {AUTH['Authorization']}\r\n".encode()
            + b"Content-Type: application/json\r\n"
            + framing
            + b"\r\n"
            + body
        )
        answer, _ = raw_exchange(served, request)
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"connection: close" in head.lower()
        assert b"Content-Length and Transfer-Encoding" in payload
    twice = (
        b"POST /v1/verifications HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: {AUTH['Authorization']}\r\n".encode()
        + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
    )
    answer, _ = raw_exchange(served, twice)
    assert answer.startswith(b"HTTP/1.1 400")


def test_http_headers_that_never_finish_are_timed_out(served: Served) -> None:
    """Half a request line, or headers trickling in: 408 and closed after --header-timeout
    (1.5 s here), on a fresh connection and on a kept-alive one after a first answer."""
    answer, took = raw_exchange(served, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    assert answer.startswith(b"HTTP/1.1 408") and 1.0 < took < 8, (answer, took)
    answer, took = raw_exchange(served, b"")
    assert answer.startswith(b"HTTP/1.1 408") and took < 8
    auth = f"Authorization: {AUTH['Authorization']}\r\n".encode()
    kept = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\nGET /healthz HTTP/1.1\r\n"
    answer, took = raw_exchange(served, kept)
    assert answer.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 408" in answer and took < 8
    # A body that stops coming: 408 after three times the header timeout.
    stalled = (
        b"POST /v1/verifications HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: {AUTH['Authorization']}\r\n".encode()
        + b"Content-Length: 100\r\n\r\n{"
    )
    answer, took = raw_exchange(served, stalled)
    assert answer.startswith(b"HTTP/1.1 408") and 4.0 < took < 12, (answer[:100], took)
    assert httpx.get(f"{served.url}/healthz", headers=AUTH).status_code == 200


def test_http_connections_are_bounded(served: Served) -> None:
    """At most --max-connections (16 here) are open: past it, a new connection takes the place
    of the one that has waited longest for its headers (408), so slow clients never lock a new
    one out (a wave of them used to, for about 13 s each)."""
    host, port = served.url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(40)]
    try:
        time.sleep(0.5)
        # Served at once while 40 slow connections are held.
        started = time.monotonic()
        assert httpx.get(f"{served.url}/healthz", headers=AUTH, timeout=5).status_code == 200
        assert time.monotonic() - started < 2
        ended = 0
        for sock in idle:
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                data = sock.recv(64)
                ended += data == b"" or data.startswith(b"HTTP/1.1 408")
        assert ended >= 40 - 16
    finally:
        for sock in idle:
            sock.close()


def test_http_bad_requests_are_json_4xx(served: Served) -> None:
    post = f"{served.url}/v1/verifications"
    # Twenty times: the answer must reach the client although the server refuses the body
    # (without lingering, the close reset the connection about one time in thirty).
    for _ in range(20):
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
    # A body sent without a JSON Content-Type: the answer names the body and what to send.
    plain = httpx.post(post, content=json.dumps(request_doc()).encode(), headers=AUTH)
    assert plain.status_code == 422
    (problem,) = plain.json()["error"]["problems"]
    assert problem["field"] == "body"
    assert "Content-Type: application/json" in problem["message"]
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
    # A base commit: its payload digest waits on the silent fetch, so the job is still there to
    # cancel (a request without one would run at once, and a forked verify of this invalid
    # task ends in milliseconds).
    task = request_doc()["task"]
    task["definition"]["baseCommit"] = "ab" * 20
    first = httpx.post(post, json=request_doc(id="c1", repo=silent_git, task=task), headers=AUTH)
    assert first.status_code == 202 and first.headers["location"] == "/v1/verifications/c1"
    again = httpx.post(post, json=request_doc(id="c1", repo=silent_git, task=task), headers=AUTH)
    assert again.status_code == 200 and again.json()["id"] == "c1"
    other = httpx.post(
        post, json=request_doc(id="c1", repo=silent_git, task=task, verify=9), headers=AUTH
    )
    assert other.status_code == 409
    # A status document has every key of its own, null until known.
    queued = httpx.get(f"{served.url}/v1/verifications/c1", headers=AUTH).json()
    assert queued["status"] == "queued"
    assert {"verdict", "startedAt", "finishedAt", "response"} <= queued.keys()
    assert queued["verdict"] is None and queued["finishedAt"] is None
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


def test_event_streams_are_bounded_so_other_requests_find_a_connection(
    served: Served, silent_git: str
) -> None:
    """A token holder opened a stream per connection (190 were measured) and every new client
    was reset. At most half of --max-connections (8 of 16 here) streams are open at once; the
    next gets 429 with Retry-After, other requests are served, and a stream closed makes room."""
    task = request_doc()["task"]
    task["definition"]["baseCommit"] = "ab" * 20  # waits on the silent fetch: the job stays
    posted = httpx.post(
        f"{served.url}/v1/verifications",
        json=request_doc(id="s1", repo=silent_git, task=task),
        headers=AUTH,
    )
    assert posted.status_code == 202
    host, port = served.url.removeprefix("http://").split(":")
    ask = (
        "GET /v1/verifications/s1/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: {AUTH['Authorization']}\r\n\r\n"
    ).encode()

    def stream() -> tuple[socket.socket, bytes]:
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(ask)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        return sock, head

    opened = [stream() for _ in range(8)]
    try:
        assert all(head.startswith(b"HTTP/1.1 200") for _, head in opened)
        refused = httpx.get(f"{served.url}/v1/verifications/s1/events", headers=AUTH, timeout=5)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
        assert refused.json()["error"]["code"] == "too-many-streams"
        assert httpx.get(f"{served.url}/healthz", headers=AUTH, timeout=5).status_code == 200
        status = httpx.get(f"{served.url}/v1/verifications/s1", headers=AUTH, timeout=5)
        assert status.status_code == 200
        # A stream whose client went away is noticed at its next poll: its place is free.
        first, _ = opened.pop(0)
        first.close()
        deadline = time.monotonic() + 10
        while True:
            again, head = stream()
            if head.startswith(b"HTTP/1.1 200"):
                opened.append((again, head))
                break
            again.close()
            assert time.monotonic() < deadline, head
            time.sleep(0.2)
    finally:
        for sock, _ in opened:
            sock.close()
        httpx.delete(f"{served.url}/v1/verifications/s1", headers=AUTH)


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


def test_an_early_refusal_reaches_a_client_still_sending(served: Served) -> None:
    """No token, or a body framed twice, answered before the body is read: the body still
    coming is read and dropped first (bounded), so the close does not reset the answer away."""
    post = f"{served.url}/v1/verifications"
    for _ in range(10):
        refused = httpx.post(post, content=b"x" * (900 * 1024))
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


def test_a_request_may_omit_the_instruction_as_a_task_directory_may(tmp_path: Path) -> None:
    """Without `task.instruction` the request is valid, its archive has no instruction.md, and
    verify's loader takes the definition's prompt, as for an authored task; a fix compares the
    same instruction."""
    from runner.compile.taskdir import load_authored_task, normalize_instruction
    from runner.sidecar.fixes import task_files
    from runner.sidecar.verification import task_directory_files
    from tests.helpers import bash_task

    authored = bash_task(tmp_path)
    definition = json.loads((authored.directory / "definition.json").read_text())
    doc = request_doc()
    doc["task"] = {
        "definition": definition,
        "testPatch": (authored.directory / "test.patch").read_text(),
        "goldPatch": (authored.directory / "gold.patch").read_text(),
    }
    request = VerificationRequest.model_validate(doc)
    assert request.task.instruction is None
    files = task_directory_files(request.task)
    assert "instruction.md" not in files
    archive = tmp_path / "archive"
    archive.mkdir()
    for name, text in files.items():
        (archive / name).write_text(text)
    loaded = load_authored_task(archive)
    assert loaded.instruction == normalize_instruction(definition["prompt"])
    assert task_files(request.task)["instruction.md"] == definition["prompt"]
    doc["task"]["instruction"] = "Do it."
    assert task_directory_files(VerificationRequest.model_validate(doc).task)["instruction.md"] == (
        "Do it."
    )


def test_a_probe_and_the_spec_need_no_token_and_the_spec_says_what_does(served: Served) -> None:
    """A kubelet's probe carries no secret: /healthz answers without the token, and so does the
    spec, which declares the bearer scheme every other operation needs. No page loads its
    scripts from a CDN (it was blank offline)."""
    assert httpx.get(f"{served.url}/healthz").status_code == 200
    assert httpx.head(f"{served.url}/healthz").status_code in (200, 405)
    spec = httpx.get(f"{served.url}/openapi.json").json()
    assert spec["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    assert spec["security"] == [{"bearer": []}]
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert "security" not in spec["paths"]["/v1/verifications"]["post"]
    for closed in ("/metrics", "/v1/verifications/nobody"):
        refused = httpx.get(f"{served.url}{closed}")
        assert refused.status_code == 401, closed
    assert httpx.post(f"{served.url}/healthz").status_code == 401  # only reads are open
    for page in ("/docs", "/redoc"):
        assert httpx.get(f"{served.url}{page}", headers=AUTH).status_code == 404


def test_a_run_s_report_and_logs_are_served_below_its_run_directory_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /v1/verifications/{id}/run/<path>: report.html and the logs its relative links name;
    never a link out of the run directory, a FIFO, a directory, `..`, or past the size cap."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from runner.sidecar import files
    from runner.sidecar.jobs import JobSummary
    from runner.sidecar.request import JobState

    archive = tmp_path / "archives" / "job-1"
    run = archive / "run"
    (run / "oracle" / "logs" / "verifier").mkdir(parents=True)
    (run / "report.html").write_text('<a href="oracle/logs/verifier/fail_to_pass.log">log</a>')
    (run / "oracle" / "logs" / "verifier" / "fail_to_pass.log").write_text("E   assert 5 == 6\n")
    (run / "oracle" / "leak.log").symlink_to("/etc/passwd")
    (run / "oracle" / "linked").symlink_to("/etc")
    os.mkfifo(run / "oracle" / "pipe.log")
    (run / "big.log").write_bytes(b"x" * 2048)
    monkeypatch.setattr(files, "MAX_FILE", 1024)
    job = JobSummary(
        id="job-1", source="http", archive=archive, task_id="t", digest=None,
        state=JobState.DONE, run_id="r", pid=None, attempts=1, cancel=False, created=0.0,
        started=None, finished=None, verdict="rejected", response=None,
    )  # fmt: skip
    from runner.sidecar.http import _error_handlers

    app = FastAPI()
    _error_handlers(app)
    files.run_file_routes(app, lambda: job, {})
    client = TestClient(app)
    page = client.get("/v1/verifications/job-1/run/report.html")
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    log = client.get("/v1/verifications/job-1/run/oracle/logs/verifier/fail_to_pass.log")
    assert log.status_code == 200 and log.text == "E   assert 5 == 6\n"
    for path, words in {
        "oracle/leak.log": "symbolic link",
        "oracle/linked/passwd": "symbolic link",
        "oracle/pipe.log": "FIFO",
        "oracle": "directory",
        "big.log": "too large",
        "missing.log": "no file",
    }.items():
        refused = client.get(f"/v1/verifications/job-1/run/{path}")
        assert refused.status_code == 404, path
        assert words in str(refused.json()), (path, refused.json())
    climbing = client.get("/v1/verifications/job-1/run/%2E%2E/%2E%2E/etc/passwd")
    assert climbing.status_code == 404
