"""verify on a real engine: every verdict, timeouts, caching, cleanup. No mocked Docker."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest

from runner.compile.taskdir import load_authored_task
from runner.model.settings import CompileOptions
from tests.helpers import (
    LIB_BASE,
    LIB_GOLD,
    bash_task,
    compiled,
    definition,
    diff_of,
    write_task,
)
from tests.integration.conftest import FAST, ROOT, leftovers, run_verify

SETUP_STEP = re.compile(r"^Step \d+/\d+ : RUN chmod 0755 /opt/selfbench-environment/setup.sh")


def step_was_cached(log: Path, pattern: re.Pattern[str]) -> bool:
    lines = log.read_text().splitlines()
    for index, line in enumerate(lines):
        if pattern.match(line):
            following = [ln.strip() for ln in lines[index + 1 :] if ln.strip()]
            return following[0] == "---> Using cache"
    raise AssertionError(f"{pattern.pattern} not in {log}")


def test_accepted_then_cached(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    # setup writes a file git does not ignore: it must not reach the agent's patch (0.3.8).
    # A fresh setup command, so nothing of this task is in the engine's cache yet.
    nonce = uuid.uuid4().hex
    task = bash_task(tmp_path, setupCommand=f"echo {nonce} > generated.txt")
    first = run_verify(task.directory, verify_options, tmp_path / "run1")
    assert first.code == 0, first.stderr
    assert first.report["verdict"] == "accepted"
    assert set(first.statuses().values()) == {"passed"}
    assert first.stage("nop")["data"]["reward"]["fail_to_pass"] == 0
    oracle = first.stage("oracle")["data"]
    assert oracle["reward"]["reward"] == 1
    patch = (tmp_path / "run1" / "oracle" / "agent.patch").read_text()
    assert "diff --git a/lib.sh b/lib.sh" in patch
    assert "generated.txt" not in patch
    assert (tmp_path / "run1" / "nop" / "agent.patch").read_bytes() == b""
    # The setup command ran once for both images: the verifier reused the agent's layer.
    assert not step_was_cached(tmp_path / "run1" / "build" / "agent.log", SETUP_STEP)
    assert step_was_cached(tmp_path / "run1" / "build" / "verifier.log", SETUP_STEP)
    assert (tmp_path / "run1" / "report.json").is_file()
    assert first.report["settings"]["storageLimit"].startswith("enforced by the")
    assert leftovers(docker_client, first.report["runId"]) == []

    second = run_verify(task.directory, verify_options, tmp_path / "run2", *FAST)
    assert second.code == 0
    images = second.stage("build")["data"]["images"]
    assert images["agent"]["cached"] and images["verifier"]["cached"]
    assert images["agent"]["id"] == first.stage("build")["data"]["images"]["agent"]["id"]
    assert leftovers(docker_client, second.report["runId"]) == []


def test_a_step_another_cache_committed_is_found_on_the_engine(
    tmp_path: Path, verify_options: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another user's cache (or a wiped one) on the same engine: its first lookup it cannot
    # answer reads the engine's step images into its index, and the setup step is not run again.
    setup = f"echo {uuid.uuid4().hex} > generated.txt"
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(tmp_path / "cache-a"))
    task = bash_task(tmp_path, setupCommand=setup)
    first = run_verify(task.directory, verify_options, tmp_path / "run1", *FAST)
    assert first.code == 0, first.stderr
    assert not step_was_cached(tmp_path / "run1" / "build" / "agent.log", SETUP_STEP)
    # A second task of the repository (its own test): new images, the same setup step.
    doc = definition(
        taskId="second-task", baseCommit=task.commit, repo=str(task.repo), setupCommand=setup
    )
    second_task = write_task(
        tmp_path / "second-task",
        doc,
        test_patch=diff_of(
            task.repo, {"tests/test_new.sh": '. ./lib.sh\n[ "$(shout y)" = "HELLO Y" ]\n'}
        ),
        gold_patch=diff_of(task.repo, {"lib.sh": LIB_GOLD}),
    )
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(tmp_path / "cache-b"))
    second = run_verify(second_task, verify_options, tmp_path / "run2", *FAST)
    assert second.code == 0, second.stderr
    assert second.report["verdict"] == "accepted", second.report["reason"]
    assert not second.stage("build")["data"]["images"]["agent"]["cached"]
    assert step_was_cached(tmp_path / "run2" / "build" / "agent.log", SETUP_STEP)
    learned = [p for p in (tmp_path / "cache-b" / "build-steps").iterdir() if p.name[0] != "."]
    assert learned, "the engine's steps were not read into the second cache's index"


def test_compiled_bundle_is_verified_as_it_is(tmp_path: Path, verify_options: list[str]) -> None:
    task = bash_task(tmp_path, name="bundle-task")
    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=CompileOptions()
    )
    before = (bundle / "tests" / "expected-tests.json").read_bytes()
    run = run_verify(bundle, verify_options, tmp_path / "run", "--no-hack-gate")
    assert run.code == 0, run.stderr
    assert run.stage("audit")["status"] == "skipped"
    # The census is sealed into a copy in the run directory; the input is never changed.
    assert run.report["bundle"] == str(tmp_path / "run" / "bundle")
    assert (bundle / "tests" / "expected-tests.json").read_bytes() == before
    sealed = json.loads((tmp_path / "run" / "bundle" / "tests" / "expected-tests.json").read_text())
    assert sealed["sealed"] is True and sealed["failToPass"]["mode"] == "exit-code"
    manifest = json.loads((tmp_path / "run" / "bundle" / ".selfbench-manifest.json").read_text())
    assert manifest["census"]["file"] == "tests/expected-tests.json"
    # Both bundles build the same images: the census is not an input of the verifier's tag.
    again = run_verify(
        tmp_path / "run" / "bundle",
        verify_options,
        tmp_path / "again",
        *FAST,  # the images are what this run is about
    )
    assert again.code == 0, again.stderr
    assert again.stage("build")["data"]["images"]["verifier"]["cached"] is True


def test_nop_red_when_new_tests_already_pass(tmp_path: Path, verify_options: list[str]) -> None:
    task = bash_task(
        tmp_path, name="nop-red", new_test='. ./lib.sh\n[ "$(greet y)" = "hello y" ]\n'
    )
    run = run_verify(task.directory, verify_options, tmp_path / "run")
    assert run.code == 1
    assert run.report["verdict"] == "rejected"
    assert run.stage("nop")["status"] == "failed"
    assert run.stage("nop")["detail"] == "fail-to-pass tests already pass on the base snapshot"
    assert run.report["reason"].startswith("nop: ")


def test_oracle_red_when_gold_does_not_fix(tmp_path: Path, verify_options: list[str]) -> None:
    wrong = LIB_GOLD.replace('shout() { shout_0 "$@"; }', "shout() { echo nope; }")
    task = bash_task(tmp_path, name="oracle-red", gold={"lib.sh": wrong})
    # --keep-going: nop runs beside the red oracle, and an oracle that ends first would settle
    # the verdict and stop nop (skipped), which is right but not what this test asserts.
    run = run_verify(task.directory, verify_options, tmp_path / "run", "--keep-going")
    assert run.code == 1
    assert run.stage("nop")["status"] == "passed"
    assert run.stage("oracle")["status"] == "failed"
    assert run.stage("oracle")["detail"].startswith(
        "fail-to-pass tests still fail with the gold patch (exit 1)"
    )
    assert run.stage("determinism")["status"] == "skipped"
    log = (tmp_path / "run" / "oracle" / "logs" / "verifier" / "fail_to_pass.log").read_text()
    assert "FAIL tests/test_new.sh" in log


def test_gold_that_does_not_apply_is_caught_at_audit_and_at_oracle(
    tmp_path: Path, verify_options: list[str]
) -> None:
    task = bash_task(tmp_path, name="gold-conflict")
    bundle = compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "bundle")
    gold = (task.directory / "gold.patch").read_text()
    broken = gold.replace(' greet() { echo "hello $1"; }', ' greet() { echo "hi $1"; }')
    (task.directory / "gold.patch").write_text(broken)
    # Authored: `git apply --check` at compile time finds it before any Docker work.
    early = run_verify(task.directory, verify_options, tmp_path / "early")
    assert early.code == 1
    assert early.stage("audit")["status"] == "failed"
    assert "gold.patch does not apply to baseCommit" in early.stage("audit")["detail"]
    assert early.stage("build")["status"] == "skipped"
    # A compiled bundle is verified as it is: the oracle's solve.sh says the same.
    (bundle / "solution" / "gold.patch").write_text(broken)
    run = run_verify(bundle, verify_options, tmp_path / "run")
    assert run.code == 1
    oracle = run.stage("oracle")
    assert oracle["status"] == "failed"
    assert oracle["detail"].startswith("solution/solve.sh exited 1: the gold patch does not apply")
    assert "patch does not apply" in (tmp_path / "run" / "oracle" / "agent.log").read_text()


def test_determinism_red_when_second_run_fails(tmp_path: Path, verify_options: list[str]) -> None:
    # No literal on the right of the comparison: no canary, so /tmp keeps what a run leaves
    # (an exit-code task with a canary starts each run from the lockdown's /tmp).
    flaky = (
        '. ./lib.sh\n[ "$(shout x)" = "$(echo HELLO X)" ] || exit 1\n'
        "[ ! -e /tmp/ran-once ] || exit 1\ntouch /tmp/ran-once\n"
    )
    task = bash_task(tmp_path, name="flaky", new_test=flaky)
    run = run_verify(task.directory, verify_options, tmp_path / "run")
    assert run.code == 1
    assert run.stage("oracle")["status"] == "passed"
    assert run.stage("determinism")["status"] == "failed"
    assert run.stage("determinism")["data"]["repeatExitCode"] == 1
    assert run.stage("oracle")["data"]["details"]["fail_to_pass_repeat_exit_code"] == 1
    assert run.report["verdict"] == "rejected"


def test_setup_failure_is_red_not_infrastructure(tmp_path: Path, verify_options: list[str]) -> None:
    task = bash_task(tmp_path, name="setup-red", setupCommand="echo broken setup >&2; exit 3")
    run = run_verify(task.directory, verify_options, tmp_path / "run")
    assert run.code == 1
    assert run.report["verdict"] == "rejected"
    build = run.stage("build")
    assert build["status"] == "failed"
    assert build["data"]["exitCode"] == 3
    assert "/opt/selfbench-environment/setup.sh" in build["data"]["failedStep"]
    assert any("broken setup" in line for line in build["data"]["tail"])
    assert "agent.log" in build["detail"]
    # The step by name and its cause, the RUN line only in the data.
    assert build["detail"].startswith(
        "agent image: the setup command (setupCommand) failed (exit 3): broken setup; see "
    ), build["detail"]
    assert "RUN " not in build["detail"]
    assert run.stage("smoke")["status"] == "skipped"


def test_hanging_test_is_killed_at_the_verifier_timeout(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    task = bash_task(
        tmp_path,
        name="hang",
        new_test="sleep 600\n",
        timeouts={"setupSeconds": 4, "testsSeconds": 4},
    )
    started = time.monotonic()
    # --keep-going: both gates' timeouts (the first would settle the verdict and stop the other).
    run = run_verify(task.directory, verify_options, tmp_path / "run", "--keep-going")
    elapsed = time.monotonic() - started
    assert run.code == 1
    for gate in ("nop", "oracle"):
        assert run.stage(gate)["status"] == "failed"
        assert run.stage(gate)["detail"] == "verifier timed out after 8s; the runner stopped it"
        assert 8 <= run.stage(gate)["seconds"] < 60
    assert elapsed < 240
    assert leftovers(docker_client, run.report["runId"]) == []


def test_a_red_nop_settles_the_verdict_and_stops_the_oracle(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    """The fail-to-pass test already passes on the base (nop red at once); with the gold patch
    it takes 120 s. The verdict is settled by nop: the oracle's verifier is stopped under it, and
    the stages it would have started say why, in no time."""
    slow_with_gold = ". ./lib.sh\nif type shout >/dev/null 2>&1; then sleep 120; fi\ntrue\n"
    task = bash_task(tmp_path, name="settled", new_test=slow_with_gold)
    started = time.monotonic()
    run = run_verify(task.directory, verify_options, tmp_path / "run")
    elapsed = time.monotonic() - started
    assert run.code == 1
    assert run.report["verdict"] == "rejected"
    assert run.stage("nop")["status"] == "failed"
    assert run.report["reason"].startswith("nop: fail-to-pass tests already pass"), run.report
    for gate in ("oracle", "determinism", "hack"):
        assert run.stage(gate)["status"] == "skipped", gate
        assert run.stage(gate)["detail"] == "skipped: verdict settled by nop", gate
    assert run.stage("determinism")["seconds"] == 0.0
    assert run.report["settings"]["keepGoing"] is False
    assert elapsed < 100
    assert leftovers(docker_client, run.report["runId"]) == []


def test_memory_limit_applies(tmp_path: Path, verify_options: list[str]) -> None:
    hog = '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\nhead -c 400m /dev/zero | tail > /dev/null\n'
    task = bash_task(tmp_path, name="hog", new_test=hog, resources={"memoryMb": 64})
    run = run_verify(task.directory, verify_options, tmp_path / "run")
    assert run.stage("oracle")["status"] == "failed"
    detail = run.stage("oracle")["detail"]
    # The kernel's OOM killer acted (read from the cgroup), and the reason says so.
    assert "the OOM killer ended" in detail and "64 MB memory limit" in detail, detail
    assert run.stage("oracle")["data"]["details"]["oom_kills"] >= 1


@pytest.mark.serial  # acts on every runner container or image of the engine
def test_sigterm_removes_what_the_run_created(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    task = bash_task(
        tmp_path,
        name="interrupted",
        new_test="sleep 600\n",
        timeouts={"setupSeconds": 300, "testsSeconds": 300},
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "verify",
            str(task.directory),
            "--run-dir",
            str(tmp_path / "run"),
            "--json",
            "--report",
            str(tmp_path / "report.json"),
            *verify_options,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    try:
        log = tmp_path / "run" / "nop" / "verifier.log"
        while time.monotonic() < deadline:
            if log.is_file() and "running fail_to_pass" in log.read_text():
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the nop verifier never started")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted" in err
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    # This run's containers, every kind (other tests run beside it on the same engine).
    assert leftovers(docker_client, report["runId"]) == []
    assert report["verdict"] == "infrastructure_failed"
    assert report["interrupted"] is True
    assert report["reason"].startswith("interrupted (SIGTERM)")
    # --json and --report are honoured on an interrupt too.
    assert json.loads(out)["runId"] == report["runId"]
    assert json.loads((tmp_path / "report.json").read_text())["runId"] == report["runId"]


@pytest.mark.serial  # acts on every runner container or image of the engine
def test_clean_removes_leftovers_by_label(
    tmp_path: Path,
    verify_options: list[str],
    docker_client: docker.DockerClient,
    fresh_cache: Path,
) -> None:
    task = bash_task(tmp_path, name="kept")
    run = run_verify(task.directory, verify_options, tmp_path / "run", "--keep")
    assert run.code == 0
    kept = leftovers(docker_client, run.report["runId"])
    # The oracle's agent and both verifiers (nop needs no agent container, and the default
    # smoke check runs in the nop verifier); the hack gate's agent, its policy check's verifier
    # and one verifier per exploit the policy left something of (runner-exit-zero and
    # held-out-overwrite it undoes entirely); the flakiness probe's verifier (its early run,
    # beside the oracle's verifier: `-early` after the run's suffix).
    assert sorted(
        k.removesuffix("-early").rsplit("-", 1)[0].removeprefix("selfbench-kept-") for k in kept
    ) == [
        "hack-agent",
        "hack2-verifier",
        "hack3-verifier",
        "hack4-verifier",
        "hack5-verifier",
        "hackpolicy-verifier",
        "nop-verifier",
        "oracle-agent",
        "oracle-verifier",
        "probe1-verifier",
    ]
    assert "kept oracle agent (selfbench-kept-oracle-agent-" in run.stderr
    assert "docker exec -it selfbench-kept-oracle-agent-" in run.stderr
    assert {k["label"] for k in run.report["kept"]} == {
        "determinism/probe-1 verifier",
        "hack agent",
        "hack policy",
        "hack/harness-memory verifier",
        "hack/harness-rename verifier",
        "hack/harness-rewrite-at-run verifier",
        "hack/reward-file-from-code verifier",
        "nop verifier",
        "oracle agent",
        "oracle verifier",
    }
    # The kept verifier holds the state the tests ran in.
    verifier = next(k for k in run.report["kept"] if k["label"] == "oracle verifier")
    listing = docker_client.containers.get(verifier["name"]).exec_run(["ls", "/logs/verifier"])
    assert b"reward.json" in listing.output
    result = subprocess.run(
        [sys.executable, "-m", "runner", "clean"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert leftovers(docker_client, run.report["runId"]) == []


def test_rm_images_removes_the_task_images(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    task = bash_task(tmp_path, name="rm-images", setupCommand=f"echo {uuid.uuid4().hex}")
    run = run_verify(
        task.directory, verify_options, tmp_path / "run", "--rm-images", "--repeat", "0"
    )
    assert run.code == 0, run.stderr
    for image in run.stage("build")["data"]["images"].values():
        try:
            docker_client.images.get(image["tag"])
        except docker.errors.ImageNotFound:
            continue
        raise AssertionError(f"{image['tag']} was not removed")


def test_missing_base_image_names_the_script(tmp_path: Path, verify_options: list[str]) -> None:
    task = bash_task(tmp_path, name="no-base")
    options = [*verify_options, "--base-image", "selfbench/does-not-exist:never"]
    run = run_verify(task.directory, options, tmp_path / "run")
    assert run.code == 3
    assert run.report["verdict"] == "infrastructure_failed"
    assert run.stage("build")["status"] == "error"
    assert "scripts/make-base-image.sh" in run.stage("build")["detail"]


def test_example_task_is_accepted(tmp_path: Path, verify_options: list[str]) -> None:
    run = run_verify(ROOT / "examples" / "bash-calc", verify_options, tmp_path / "run")
    assert run.code == 0, run.stderr
    assert run.report["taskId"] == "bash-calc-ops"
    assert LIB_BASE  # helpers imported for the other tests


def test_image_without_the_agent_user_is_infrastructure_with_a_reason(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    """Seen: a Docker API error at container start exited 1 with a traceback, and the report
    said infrastructure_failed with an empty reason and the gate "not run"."""
    task = bash_task(tmp_path, name="no-agent-user")
    bundle = compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "b")
    dockerfile = bundle / "environment" / "Dockerfile"
    text = dockerfile.read_text()
    text = text.replace("RUN useradd --create-home --shell /bin/bash agent \\", "RUN true \\")
    text = text.replace("chown -R agent:agent /app /home/agent", "true")
    text = text.replace("USER agent", "USER root")
    dockerfile.write_text(text)
    run = run_verify(bundle, verify_options, tmp_path / "run")
    assert run.code == 3, run.stderr
    assert "Traceback" not in run.stderr
    assert run.report["verdict"] == "infrastructure_failed"
    oracle = run.stage("oracle")
    assert oracle["status"] == "error"
    assert "agent" in oracle["detail"] and oracle["detail"] != "not run"
    assert run.report["reason"] == f"oracle: {oracle['detail']}"
    assert leftovers(docker_client, run.report["runId"]) == []
