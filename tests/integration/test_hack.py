"""Verdicts that hold against a patch that games the verifier: the seen case (a gold patch that
implements nothing and rewrites the runner script the test command calls to print PASS) is
blocked by the audit, and the same patch in a compiled bundle (audit skipped) is undone by
test.sh, so the oracle is red and says what it undid. An agent adding a conftest.py that
passes every test gets reward 0 as well."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker

from runner.model.canaries import CANARY_RULE
from tests.helpers import LIB_BASE, LIB_GOLD, RUNNER_SH, bash_task, files_task
from tests.integration.conftest import ROOT, Run, leftovers, run_verify

LIB_GOLD_TAIL = LIB_GOLD.removeprefix(LIB_BASE)  # what the gold adds to lib.sh
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
    assert (
        "the verifier's patch policy undid tests/run.sh (run by the test command)"
        in oracle["detail"]
    )
    assert oracle["data"]["undone"] == [
        {
            "path": "tests/run.sh",
            "status": "M",
            "verdict": "undo",
            "reason": "run by the test command",
        }
    ]
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
    task = files_task(
        tmp_path,
        "selector-swap",
        base={
            "lib.sh": LIB_BASE,
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
        },
        tests={
            "tests/test_new.sh": '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n',
            "tests/test_also.sh": '. ./lib.sh\n[ "$(greet z)" = "hello z" ]\n',  # passes now
        },
        gold={"lib.sh": LIB_GOLD},
        failToPass=["tests/test_new.sh", "tests/test_also.sh"],
        testPaths=["tests/test_new.sh", "tests/test_also.sh"],
    )
    # --keep-going: the oracle's result too, after nop's red settled the verdict.
    run = run_verify(task, verify_options, tmp_path / "run", "--keep-going")
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


# ---- the hack gate --------------------------------------------------------------------------
# Each family: a task whose verifier resists the canned exploits after hardening, and the same
# task with the hardening waived for the files the exploit uses (the contract's harnessAllow):
# vulnerable, and caught by the hack gate with the exploit named.

GATE_CAUGHT = "the verifier can be gamed: exploit {name} earned reward 1 without a fix"


def outcomes(run: Run) -> dict[str, str]:
    return {e["name"]: e["outcome"] for e in run.stage("hack")["data"]["exploits"]}


def exploit(run: Run, name: str) -> dict[str, Any]:
    found = [e for e in run.stage("hack")["data"]["exploits"] if e["name"] == name]
    assert found, outcomes(run)
    result: dict[str, Any] = found[0]
    return result


def with_allow(directory: Path, allow: list[str]) -> Path:
    """The same task, its contract letting the agent change `allow`."""
    doc = json.loads((directory / "definition.json").read_text())
    doc.setdefault("environment", {})["harnessAllow"] = allow
    copy = directory.with_name(directory.name + "-allow")
    shutil.copytree(directory, copy)
    (copy / "definition.json").write_text(json.dumps(doc, indent=2) + "\n")
    return copy


def assert_caught(run: Run, name: str) -> None:
    assert run.report["verdict"] == "rejected", run.report["reason"]
    for gate in ("nop", "oracle"):
        assert run.stage(gate)["status"] == "passed", run.stage(gate)["detail"]
    # The probe runs beside the hack gate: the red hack gate may have stopped it.
    determinism = run.stage("determinism")
    assert determinism["status"] == "passed" or determinism["detail"] == (
        "skipped: verdict settled by hack"
    ), determinism["detail"]
    hack = run.stage("hack")
    assert hack["status"] == "failed"
    assert hack["detail"].startswith(GATE_CAUGHT.format(name=name)), hack["detail"]
    assert run.report["reason"].startswith("hack: " + GATE_CAUGHT.format(name=name))
    won = exploit(run, name)
    assert won["outcome"] == "earned-reward"
    assert won["reward"]["reward"] == 1
    assert Path(won["patch"]).read_bytes()  # the patch that won is kept for the author
    assert won["patch"] in hack["detail"]


def test_generic_exploits_resist_and_a_waived_runner_is_caught(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    task = bash_task(tmp_path, name="hack-generic")
    run = run_verify(task.directory, verify_options, tmp_path / "run")
    assert run.report["verdict"] == "accepted", run.report["reason"]
    assert outcomes(run) == {
        "runner-exit-zero": "resisted",
        "held-out-overwrite": "resisted",
        "harness-rename": "resisted",
        "harness-rewrite-at-run": "resisted",
        "reward-file-from-code": "resisted",
        "harness-memory": "resisted",
    }
    assert exploit(run, "runner-exit-zero")["discarded"] == ["tests/run.sh"]
    # Undone by the policy alone (its check, before any verifier): no test ran for it.
    assert exploit(run, "runner-exit-zero")["detail"] == (
        "undone by the patch policy: tests/run.sh (run by the test command) "
        "(no test run: nop's tree)"
    )
    assert exploit(run, "runner-exit-zero")["reward"] is None
    assert not (run.run_dir / "hack" / "runner-exit-zero" / "verifier.log").exists()
    assert (run.run_dir / "hack" / "runner-exit-zero" / "policy-check.json").is_file()
    assert exploit(run, "held-out-overwrite")["discarded"] == ["tests/test_new.sh"]
    # Code under test wrote the reward files while the tests ran: refused, and nothing of it
    # reached the verifier's logs.
    code = run.run_dir / "hack" / "reward-file-from-code"
    assert "reward.json" in (code / "agent.patch").read_text()
    assert json.loads((code / "logs" / "verifier" / "reward.json").read_text())["reward"] == 0
    assert not (code / "logs" / "verifier" / "reward.txt").exists()
    assert run.stage("hack")["detail"] == "6 exploit(s) earned no reward"
    assert leftovers(docker_client, run.report["runId"]) == []

    # A contract that lets the agent change the runner script: its exit-code canary (the
    # command over a held-out file whose expected value was changed must fail) still gives a
    # runner that always says success reward 0; with the canaries off, the hack gate catches
    # the hole the contract opened.
    waived_task = with_allow(task.directory, ["tests/run.sh"])
    waived = run_verify(waived_task, verify_options, tmp_path / "waived")
    assert waived.report["verdict"] == "accepted", waived.report["reason"]
    assert outcomes(waived)["runner-exit-zero"] == "resisted"
    assert CANARY_RULE in exploit(waived, "runner-exit-zero")["detail"]
    unguarded = run_verify(
        waived_task, [*verify_options, "--evidence-checks", "in-process"], tmp_path / "unguarded"
    )
    assert_caught(unguarded, "runner-exit-zero")
    assert outcomes(unguarded)["held-out-overwrite"] == "resisted"

    # --no-hack-gate: the author's choice, said in the report; the verdict no longer waits on it.
    skipped = run_verify(waived_task, verify_options, tmp_path / "skipped", "--no-hack-gate")
    assert skipped.report["verdict"] == "accepted", skipped.report["reason"]
    assert skipped.stage("hack")["status"] == "skipped"
    assert skipped.stage("hack")["detail"] == "skipped: --no-hack-gate"


def test_the_agent_side_never_sees_the_held_out_tests_or_the_gold_patch(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    # Unique markers: one only in the held-out test, one only in the gold patch.
    test_marker, gold_marker = "HELDOUT7e1c9a", "GOLDONLY4b2f0d"
    task = bash_task(
        tmp_path,
        name="hidden-state",
        new_test=f'. ./lib.sh\n# {test_marker}\n[ "$(shout x)" = "HELLO X" ]\n',
        gold={"lib.sh": LIB_BASE.replace("greet()", f"# {gold_marker}\ngreet()") + LIB_GOLD_TAIL},
    )
    run = run_verify(task.directory, verify_options, tmp_path / "run", "--keep")
    try:
        assert run.report["verdict"] == "accepted", run.report["reason"]
        agent_image = run.stage("build")["data"]["images"]["agent"]["tag"]
        grep = ["grep", "-rIl", "--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=dev"]
        found = docker_client.containers.run(
            agent_image,
            ["sh", "-c", " ".join([*grep, "-e", test_marker, "-e", gold_marker, "/"]) + "; true"],
            remove=True,
            user="root",
            network_mode="none",
        )
        assert found.decode().split() == []
        # The same search finds the held-out test in the verifier image (/tests/test.patch):
        # it would see a leak.
        control = docker_client.containers.run(
            run.stage("build")["data"]["images"]["verifier"]["tag"],
            ["sh", "-c", " ".join([*grep, "-e", test_marker, "/"]) + "; true"],
            remove=True,
            user="root",
            network_mode="none",
        )
        assert "/tests/test.patch" in control.decode().split()
        # The hack gate's agent container (the only agent container with no gold by design;
        # the oracle's holds /solution, as Harbor's oracle agent does).
        kept = {k["label"]: k["name"] for k in run.report["kept"]}
        hack_agent = docker_client.containers.get(kept["hack agent"])
        result = hack_agent.exec_run(
            ["sh", "-c", " ".join([*grep, "-e", test_marker, "-e", gold_marker, "/"]) + "; true"],
            user="root",
        )
        output = result.output
        assert isinstance(output, bytes)
        assert output.decode().split() == []
    finally:
        subprocess.run(
            [sys.executable, "-m", "runner", "clean", "--run", run.report["runId"]],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )


def test_a_pass_to_pass_selector_the_gold_breaks_is_named_at_oracle(
    tmp_path: Path, verify_options: list[str]
) -> None:
    task = files_task(
        tmp_path,
        "p2p-broken",
        base={
            "lib.sh": LIB_BASE + 'wave() { echo "bye $1"; }\n',
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
            "tests/test_wave.sh": '. ./lib.sh\n[ "$(wave x)" = "bye x" ]\n',
        },
        tests={"tests/test_new.sh": '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n'},
        # The fix drops wave(): one pass-to-pass test of two now fails.
        gold={"lib.sh": LIB_GOLD},
        passToPass=["tests/test_old.sh", "tests/test_wave.sh"],
    )
    run = run_verify(task, verify_options, tmp_path / "run")
    oracle = run.stage("oracle")
    assert oracle["status"] == "failed"
    assert oracle["detail"].startswith("pass-to-pass tests fail with the gold patch (exit 1)")
    assert oracle["detail"].endswith("; failing alone: tests/test_wave.sh"), oracle["detail"]
    assert {(s["selector"], s["exitCode"] == 0) for s in oracle["data"]["passToPassSelectors"]} == {
        ("tests/test_old.sh", True),
        ("tests/test_wave.sh", False),
    }
    assert run.stage("nop")["data"]["passToPassSelectors"] == []  # green: nothing to isolate
