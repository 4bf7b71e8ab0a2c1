"""The verification round on a real engine: a green task's reviewer material (`review`), a fix
from the reviewer's work tree that tightens a held-out test and moves a pass-to-pass selector to
fail-to-pass, verified on its merits; fixes that cross the boundary refused naming what they
touch through the CLI, the HTTP sidecar and the Temporal activity; an identical resubmission
answered from the green report."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import LIB_BASE, LIB_GOLD, RUNNER_SH, definition, diff_of, make_repo, write_task
from tests.integration.conftest import FAST, run_cli, run_verify
from tests.integration.test_sidecar import Sidecar, payload
from tests.temporal import (
    Worker,
    batch_workflow,
    start_worker,
    stop_worker,
    temporal_server,
    workflow_result,
)

# A held-out test that passes at the base: the reviewer tightens it to exercise the feature
# (it then fails at the base), and moves it from pass-to-pass to fail-to-pass.
GREET_TEST = '. ./lib.sh\n[ "$(greet y)" = "hello y" ]\n'
TIGHTENED = GREET_TEST + '[ "$(shout y)" = "HELLO Y" ]\n'


def green_task(tmp: Path) -> tuple[Path, Path]:
    repo, commit = make_repo(
        tmp / "repo",
        {
            "lib.sh": LIB_BASE,
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
        },
    )
    tests = diff_of(
        repo,
        {
            "tests/test_new.sh": '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n',
            "tests/test_greet.sh": GREET_TEST,
        },
    )
    doc = definition(
        taskId="round-trip",
        baseCommit=commit,
        repo=str(repo),
        failToPass=["tests/test_new.sh"],
        passToPass=["tests/test_old.sh", "tests/test_greet.sh"],
        testPaths=["tests/test_new.sh", "tests/test_greet.sh"],
    )
    task = write_task(
        tmp / "task", doc, test_patch=tests, gold_patch=diff_of(repo, {"lib.sh": LIB_GOLD})
    )
    return task, repo


def reviewer_tree(tmp: Path, repo: Path, task: Path) -> Path:
    tree = tmp / "work"
    subprocess.run(["git", "clone", "-q", str(repo), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "apply", str(task / "test.patch")], check=True)
    return tree


def test_review_then_a_fix_verified_and_fixes_that_cross_the_boundary_refused(
    tmp_path: Path, verify_options: list[str]
) -> None:
    task, repo = green_task(tmp_path)
    green = run_verify(task, verify_options, tmp_path / "green", "--no-hack-gate")
    assert green.report["verdict"] == "accepted", green.report["reason"]

    # What the reviewer receives.
    review = tmp_path / "review"
    made = run_cli("review", str(tmp_path / "green"), "-o", str(review), "--json")
    assert made.returncode == 0, made.stderr
    index = json.loads((review / "index.json").read_text())
    names = {item["name"]: item for item in index["items"]}
    assert set(names) == {
        "instruction",
        "held-out test patch",
        "gold patch",
        "definition",
        "environment contract",
        "rendered files",
        "verification report",
        "coupling evidence",
    }
    assert (review / "test.patch").read_bytes() == (task / "test.patch").read_bytes()
    assert (review / "gold.patch").read_bytes() == (task / "gold.patch").read_bytes()
    assert json.loads((review / "report.json").read_text())["runId"] == green.report["runId"]
    contract = json.loads((review / "environment.json").read_text())
    assert contract["testCommand"] == "bash tests/run.sh {tests}" and "prompt" not in contract
    assert "task.toml" in names["rendered files"]["files"]
    assert "tests/test.sh" in names["rendered files"]["files"]
    assert all(o["path"].endswith("repo.tar.gz") for o in index["omitted"]) and index["omitted"]
    assert "evidence" in json.loads((review / "coupling.json").read_text())

    # The fix: the greet test tightened in the work tree, and moved to fail-to-pass.
    tree = reviewer_tree(tmp_path, repo, task)
    (tree / "tests/test_greet.sh").write_text(TIGHTENED)
    fix_dir = tmp_path / "fix"
    fix_dir.mkdir()
    (fix_dir / "definition.json").write_text(
        json.dumps(
            {
                "failToPass": ["tests/test_new.sh", "tests/test_greet.sh"],
                "passToPass": ["tests/test_old.sh"],
            }
        )
    )
    fixed = tmp_path / "fixed"
    done = run_cli(
        "fix", str(task), "--tree", str(tree), "--fix", str(fix_dir), "-o", str(fixed), "--json"
    )
    assert done.returncode == 0, done.stderr
    changes = json.loads(done.stdout)["changes"]
    assert changes["testFiles"]["modified"] == ["tests/test_greet.sh"]
    assert changes["failToPass"]["added"] == ["tests/test_greet.sh"]
    verified = run_verify(fixed, verify_options, tmp_path / "fixed-run", "--no-hack-gate")
    assert verified.report["verdict"] == "accepted", verified.report["reason"]

    # The same move without tightening the test: verified, and rejected on its merits (the
    # greet test passes at the base, so it cannot be fail-to-pass).
    plain_tree = reviewer_tree(tmp_path / "plain", repo, task)
    plain = tmp_path / "plain-fixed"
    done = run_cli(
        "fix", str(task), "--tree", str(plain_tree), "--fix", str(fix_dir), "-o", str(plain)
    )
    assert done.returncode == 0, done.stderr
    red = run_verify(plain, verify_options, tmp_path / "plain-run", "--no-hack-gate")
    assert red.report["verdict"] == "rejected"
    assert red.stage("nop")["status"] == "failed", red.report["reason"]

    # Across the boundary: the gold patch's file, a source file, the instruction.
    crossing = reviewer_tree(tmp_path / "crossing", repo, task)
    (crossing / "lib.sh").write_text(LIB_GOLD + "# and more\n")
    (crossing / "tests/run.sh").write_text(RUNNER_SH + "exit 0\n")
    bad_fix = tmp_path / "bad-fix"
    bad_fix.mkdir()
    (bad_fix / "instruction.md").write_text("Do something else.\n")
    refused = run_cli(
        "fix", str(task), "--tree", str(crossing), "--fix", str(bad_fix), "-o", str(tmp_path / "no")
    )
    assert refused.returncode == 2
    for words in (
        "instruction.md: a fix never changes the instruction",
        "field `lib.sh`",
        "field `tests/run.sh`",
    ):
        assert words in refused.stderr, refused.stderr
    assert not (tmp_path / "no").exists()


def fix_payload(request_id: str, verify: int, **changes: Any) -> dict[str, Any]:
    """The example's task as a verification round's request: its test patch with one more
    held-out test beside it (a pow check) in fail-to-pass, and `changes` over the task."""
    doc = payload(request_id, verify=verify)
    doc["stage"] = "verification"
    doc["round"] = 2
    extra = (
        "diff --git a/tests/test_pow.sh b/tests/test_pow.sh\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_pow.sh\n@@ -0,0 +1 @@\n"
        '+[ "$(bash calc.sh pow 3 3)" = 27 ]\n'
    )
    doc["task"]["testPatch"] += extra
    doc["task"]["definition"]["failToPass"] = ["tests/test_ops.sh", "tests/test_pow.sh"]
    for key, value in changes.items():
        doc["task"][key] = value
    return doc


@pytest.fixture
def sidecar(tmp_path: Path, verify_options: list[str]) -> Iterator[Sidecar]:
    # What a fix may change is the subject: no flakiness probe, no exploits.
    running = Sidecar(tmp_path / "state", tmp_path / "mailbox", [*verify_options, *FAST]).start()
    try:
        yield running
    finally:
        running.stop()


def test_the_sidecar_checks_a_fix_against_the_green_verification(sidecar: Sidecar) -> None:
    post = f"{sidecar.url}/v1/verifications"
    green = httpx.post(post, json=payload("green", verify=1), headers=sidecar.headers, timeout=30)
    assert green.status_code == 202, green.text
    assert sidecar.wait("green")["verdict"] == "accepted"

    crossing = fix_payload(
        "fix-bad",
        1,
        instruction="Another request.\n",
        goldPatch=payload("x")["task"]["goldPatch"] + "\n",
    )
    crossing["fixOf"] = "green"
    crossing["task"]["definition"]["difficulty"] = "hard"
    refused = httpx.post(post, json=crossing, headers=sidecar.headers, timeout=30)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "fix-refused"
    assert {p["field"] for p in error["problems"]} == {
        "task.goldPatch",
        "task.instruction",
        "task.definition.difficulty",
    }
    missing = httpx.get(f"{sidecar.url}/v1/verifications/fix-bad", headers=sidecar.headers)
    assert missing.status_code == 404  # nothing recorded, nothing built

    fix = fix_payload("fix-ok", 2)
    fix["fixOf"] = "green"
    accepted = httpx.post(post, json=fix, headers=sidecar.headers, timeout=30)
    assert accepted.status_code == 202, accepted.text
    status = sidecar.wait("fix-ok")
    assert status["verdict"] == "accepted", status
    assert "runs/run-1/verification/c1/round-2/verify-2" in status["response"]["archive"]

    # The green task resubmitted unchanged as round 2's fix: answered from the green report.
    same = payload("fix-same", verify=3)
    same.update(stage="verification", round=2, fixOf="green")
    again = httpx.post(post, json=same, headers=sidecar.headers, timeout=30)
    assert again.status_code == 202, again.text
    reused = sidecar.wait("fix-same")["response"]
    assert reused["reused"] is True
    assert reused["report"]["runId"] == sidecar.wait("green")["response"]["report"]["runId"]


@pytest.fixture
def worker(tmp_path: Path, verify_options: list[str]) -> Iterator[tuple[str, Worker]]:
    with temporal_server(tmp_path / "temporal") as server:
        running = start_worker(
            server, tmp_path, f"selfbench-{uuid.uuid4().hex[:8]}", [*verify_options, *FAST]
        )
        try:
            yield server, running
        finally:
            stop_worker(running)


def test_the_temporal_activity_refuses_a_fix_that_crosses_the_boundary(
    worker: tuple[str, Worker], tmp_path: Path
) -> None:
    server, running = worker
    green = payload("t-green", verify=1)
    first = batch_workflow(
        server, running.queue, "round-1", {"requests": [green]}, wait=True,
        input_file=tmp_path / "green.json",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr + running.text()
    assert workflow_result(json.loads(first.stdout))["tasks"][0]["verdict"] == "accepted"

    crossing = fix_payload("t-bad", 2, instruction="Another request.\n")
    crossing["fixOf"] = "t-green"
    fix = fix_payload("t-fix", 3)
    fix["fixOf"] = "t-green"
    # A fix of a verification this worker (and its fleet's store: none here) does not hold is
    # refused, whatever green task it carries: the requester's copy is never the reference.
    elsewhere = fix_payload("t-elsewhere", 4)
    elsewhere.update(fixOf="on-another-worker", fixOfTask=green["task"])
    batch = {"requests": [crossing, fix, elsewhere], "concurrency": 3}
    ran = batch_workflow(
        server, running.queue, "round-2", batch, wait=True, input_file=tmp_path / "in.json"
    )
    assert ran.returncode == 0, ran.stderr + running.text()
    tasks = {t["id"]: t for t in workflow_result(json.loads(ran.stdout))["tasks"]}
    for name, words in (
        ("t-bad", "task.instruction: a fix never changes the instruction"),
        ("t-elsewhere", "fixOf: no verification 'on-another-worker' is known here"),
    ):
        bad = tasks[name]
        assert bad["response"] is None and bad["error_type"] == "InvalidRequest", bad
        assert words in bad["error"], bad
    assert tasks["t-fix"]["verdict"] == "accepted", tasks["t-fix"]
