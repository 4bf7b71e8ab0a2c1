"""Verdicts that hold against a patch that games the verifier: the seen case (a gold patch that
implements nothing and rewrites the runner script the test command calls to print PASS) is
blocked by the audit, and the same patch in a compiled bundle (audit skipped) is undone by
test.sh, so the oracle is red and says what it undid. An agent adding a conftest.py that
passes every test gets reward 0 as well."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import LIB_BASE, RUNNER_SH, bash_task
from tests.integration.conftest import ROOT, run_verify

# Implements nothing (22 comment lines, enough for the size rule) and makes the runner pass.
CHEAT_RUNNER = '#!/usr/bin/env bash\nfor t in "$@"; do echo "PASS $t"; done\n'
CHEAT_GOLD: dict[str, str | bytes | None] = {
    "lib.sh": LIB_BASE + "".join(f"# nothing {i}\n" for i in range(22)),
    "tests/run.sh": CHEAT_RUNNER,
}


def test_a_gold_patch_that_rewrites_the_runner_is_blocked_and_undone(
    tmp_path: Path, verify_options: list[str]
) -> None:
    assert RUNNER_SH != CHEAT_RUNNER
    task = bash_task(tmp_path, name="cheat", gold=CHEAT_GOLD)
    authored = run_verify(task.directory, verify_options, tmp_path / "authored")
    assert authored.report["verdict"] == "rejected"
    assert authored.stage("audit")["status"] == "failed"
    assert (
        "gold.patch changes tests/run.sh, which the test command runs: a reference solution "
        "must not change the test harness" in authored.stage("audit")["detail"]
    )

    bundle = tmp_path / "bundle"
    subprocess.run(
        [sys.executable, "-m", "runner", "compile", str(task.directory), "-o", str(bundle)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    compiled = run_verify(bundle, verify_options, tmp_path / "compiled")
    assert compiled.report["verdict"] == "rejected", compiled.report["reason"]
    oracle = compiled.stage("oracle")
    assert oracle["status"] == "failed"
    assert "test.sh undid the patch's changes to the test harness: tests/run.sh" in oracle["detail"]
    assert oracle["data"]["discarded"] == ["tests/run.sh"]
    assert oracle["data"]["details"]["discarded"] == 1
    details = json.loads(
        (tmp_path / "compiled" / "oracle" / "logs" / "verifier" / "details.json").read_text()
    )
    assert details["discarded"] == 1
    reward = json.loads(
        (tmp_path / "compiled" / "oracle" / "logs" / "verifier" / "reward.json").read_text()
    )
    assert set(reward) == {
        "reward",
        "patch_applied",
        "fail_to_pass",
        "pass_to_pass",
        "deterministic",
        "setup_completed",
    }  # diagnostics stay out of the reward (Harbor averages every key)
    assert reward["reward"] == 0


def test_an_agent_conftest_that_passes_everything_is_undone(
    tmp_path: Path, verify_options: list[str]
) -> None:
    # A pytest task whose gold is real; the "agent" here is a gold that also drops in a
    # conftest.py forcing every test to pass. The audit blocks it; compiled, it is undone and
    # the oracle still passes on the real fix (the harness change simply does not count).
    conftest = (
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n    outcome = yield\n"
        "    outcome.get_result().outcome = 'passed'\n"
    )
    task = bash_task(
        tmp_path,
        name="conftest-hack",
        gold={
            "lib.sh": LIB_BASE
            + 'shout() { echo "HELLO $1" | tr a-z A-Z; }\n'
            + "".join(f"# comment {i}\n" for i in range(21)),
            "tests/conftest.py": conftest,
        },
    )
    authored = run_verify(task.directory, verify_options, tmp_path / "authored")
    assert (
        "gold.patch changes tests/conftest.py, which configures the test runner"
        in (authored.stage("audit")["detail"])
    )
    bundle = tmp_path / "bundle"
    subprocess.run(
        [sys.executable, "-m", "runner", "compile", str(task.directory), "-o", str(bundle)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    compiled = run_verify(bundle, verify_options, tmp_path / "compiled")
    oracle = compiled.stage("oracle")
    assert oracle["status"] == "passed", oracle["detail"]
    assert oracle["data"]["discarded"] == ["tests/conftest.py"]


def test_a_fail_to_pass_selector_that_already_passes_is_named_at_nop(
    tmp_path: Path, verify_options: list[str]
) -> None:
    # Seen on a real task: one of four fail-to-pass tests swapped for one that already passes;
    # run together they still failed, so nop was green. Each selector now runs alone.
    from tests.helpers import LIB_GOLD, definition, diff_of, make_repo, write_task

    repo, commit = make_repo(
        tmp_path / "repo",
        {
            "lib.sh": LIB_BASE,
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
        },
    )
    test_patch = diff_of(
        repo,
        {
            "tests/test_new.sh": '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n',
            "tests/test_also.sh": '. ./lib.sh\n[ "$(greet z)" = "hello z" ]\n',  # passes now
        },
    )
    doc = definition(
        taskId="selector-swap",
        baseCommit=commit,
        repo=str(repo),
        failToPass=["tests/test_new.sh", "tests/test_also.sh"],
        testPaths=["tests/test_new.sh", "tests/test_also.sh"],
    )
    task = write_task(
        tmp_path / "task",
        doc,
        test_patch=test_patch,
        gold_patch=diff_of(repo, {"lib.sh": LIB_GOLD}),
    )
    run = run_verify(task, verify_options, tmp_path / "run")
    assert run.report["verdict"] == "rejected"
    nop = run.stage("nop")
    assert nop["status"] == "failed"
    assert nop["detail"] == (
        "fail-to-pass selector(s) already pass on the base snapshot when run alone: "
        "tests/test_also.sh"
    )
    assert {(s["selector"], s["exitCode"] == 0) for s in nop["data"]["selectors"]} == {
        ("tests/test_new.sh", False),
        ("tests/test_also.sh", True),
    }
    assert run.stage("oracle")["status"] == "passed"  # the gold still fixes what it should
