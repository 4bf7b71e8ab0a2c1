"""batch, export and gc on real engines: verdicts, JUnit XML, exit codes; a second engine started
by the test takes part and is then stopped mid-batch (its task moves to the first engine);
GitHub Actions outputs; an export round trip; the cache budget."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import docker

from tests.engines import private_engine
from tests.helpers import LIB_GOLD, bash_task, write_task
from tests.integration.conftest import FAST, ROOT, leftovers

EXAMPLE = ROOT / "examples" / "bash-calc"


def batch(
    args: list[str], *, env: dict[str, str] | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", "batch", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )


def example_copy(root: Path, name: str, **changes: Any) -> Path:
    target = root / name
    shutil.copytree(EXAMPLE, target)
    if changes:
        path = target / "definition.json"
        doc = json.loads(path.read_text())
        doc.update(changes)
        path.write_text(json.dumps(doc, indent=2))
    return target


def test_a_batch_gives_each_verdict_junit_and_the_exit_code(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    nop_red = bash_task(
        tmp_path, name="b-nop", new_test='. ./lib.sh\n[ "$(greet y)" = "hello y" ]\n'
    ).directory
    oracle_red = bash_task(
        tmp_path,
        name="b-oracle",
        gold={"lib.sh": LIB_GOLD.replace('shout() { shout_0 "$@"; }', "shout() { :; }")},
    ).directory
    invalid = write_task(
        tmp_path / "b-invalid",
        {"schemaVersion": 1, "taskId": "b-invalid"},
        test_patch=b"",
        gold_patch=b"",
    )
    listing = tmp_path / "tasks.json"
    listing.write_text(json.dumps([str(nop_red), str(oracle_red), str(invalid)]))
    out = tmp_path / "batch"
    junit = tmp_path / "junit.xml"
    result = batch(
        [
            str(EXAMPLE),
            "--from",
            str(listing),
            "--jobs",
            "2",
            "--out",
            str(out),
            "--junit",
            str(junit),
            *verify_options,
            # The verdicts and their files are the subject: no exploits (the flakiness probe
            # stays: a red oracle's is skipped).
            "--no-hack-gate",
        ]
    )
    assert result.returncode == 1, result.stderr
    document = json.loads((out / "batch.json").read_text())
    verdicts = {t["taskId"]: t["verdict"] for t in document["tasks"]}
    assert verdicts == {
        "bash-calc-ops": "accepted",
        "b-nop": "rejected",
        "b-oracle": "rejected",
        "b-invalid": "invalid",
    }
    assert document["totals"] == {
        "accepted": 1,
        "rejected": 2,
        "invalid": 1,
        "infrastructure_failed": 0,
    }
    firsts = {t["taskId"]: t["firstRed"] for t in document["tasks"]}
    assert firsts["b-nop"] == "nop" and firsts["b-oracle"] == "oracle"
    tree = ET.parse(junit)
    suites = tree.getroot()
    assert suites.tag == "testsuites"
    tasks = suites.find("testsuite[@name='selfbench.tasks']")
    assert tasks is not None and tasks.get("tests") == "4" and tasks.get("failures") == "3"
    nop_case = suites.find("testsuite[@name='selfbench.b-nop']/testcase[@name='nop']")
    assert nop_case is not None
    failure = nop_case.find("failure")
    assert failure is not None and "already pass" in (failure.get("message") or "")
    skipped = suites.find("testsuite[@name='selfbench.b-oracle']/testcase[@name='determinism']")
    assert skipped is not None and skipped.find("skipped") is not None
    assert "| b-nop | rejected | nop |" in (out / "batch.md").read_text()
    assert 'data-verdict="accepted"' in (out / "batch.html").read_text()
    for task in document["tasks"]:
        report = task["report"]
        assert leftovers(docker_client, report["runId"]) == []


def test_github_actions_outputs_annotations_and_summary(
    tmp_path: Path, verify_options: list[str]
) -> None:
    tasks = []
    for index in range(12):  # more red tasks than GitHub shows annotations
        tasks.append(
            str(
                write_task(
                    tmp_path / f"red-{index}",
                    {"schemaVersion": 1, "taskId": f"r{index}"},
                    test_patch=b"",
                    gold_patch=b"",
                )
            )
        )
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    env = {
        **os.environ,
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output),
    }
    result = batch([*tasks, "--out", str(tmp_path / "b"), *verify_options], env=env)
    assert result.returncode == 1
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("::error ")]
    assert len(errors) == 11  # 10 tasks and one line pointing at the rest
    assert "2 more red task(s)" in errors[-1]
    assert summary.stat().st_size <= 1024 * 1024
    assert "## selfbench batch" in summary.read_text()
    outputs = dict(ln.split("=", 1) for ln in output.read_text().splitlines())
    assert outputs["invalid"] == "12" and outputs["exit-code"] == "1"
    assert Path(outputs["batch-json"]).is_file()

    # verify alone: groups per stage, an annotation and a summary.
    single = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "verify",
            str(EXAMPLE),
            "--run-dir",
            str(tmp_path / "single"),
            *verify_options,
            *FAST,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr
    assert "::group::selfbench build" in single.stderr
    assert single.stderr.count("::group::") == single.stderr.count("::endgroup::")
    assert "bash-calc-ops" in summary.read_text()


def test_export_round_trip(tmp_path: Path, verify_options: list[str]) -> None:
    verify_options = [*verify_options, *FAST]  # the archive is the subject
    out = tmp_path / "batch"
    ran = batch([str(EXAMPLE), "--out", str(out), *verify_options])
    assert ran.returncode == 0, ran.stderr
    run_dir = json.loads((out / "batch.json").read_text())["tasks"][0]["runDir"]
    archives = [tmp_path / "a1.tar.gz", tmp_path / "a2.tar.gz"]
    for archive in archives:
        subprocess.run(
            [sys.executable, "-m", "runner", "export", run_dir, "-o", str(archive)],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    assert archives[0].read_bytes() == archives[1].read_bytes()  # deterministic
    # The batch's own batch.json: every accepted task in it, the same archive.
    whole = tmp_path / "batch.tar.gz"
    subprocess.run(
        [sys.executable, "-m", "runner", "export", str(out / "batch.json"), "-o", str(whole)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    assert whole.read_bytes() == archives[0].read_bytes()
    checked = subprocess.run(
        [sys.executable, "-m", "runner", "export", "--check", str(archives[0])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0 and "every digest matches" in checked.stdout
    unpacked = tmp_path / "unpacked"
    with tarfile.open(archives[0]) as tar:
        tar.extractall(unpacked, filter="data")
    manifest = json.loads((unpacked / "manifest.json").read_text())
    assert [t["taskId"] for t in manifest["tasks"]] == ["bash-calc-ops"]
    with tarfile.open(unpacked / "tasks" / "bash-calc-ops.tar.gz") as tar:
        names = tar.getnames()
        tar.extractall(unpacked, filter="data")
    assert not any("/.git/" in n or n.endswith("/.git") for n in names)
    assert not any(n.endswith(".log") for n in names)
    verified = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "verify",
            str(unpacked / "bash-calc-ops"),
            "--run-dir",
            str(tmp_path / "again"),
            "--json",
            *verify_options,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["verdict"] == "accepted"
    red = batch(
        [
            str(bash_task(tmp_path, name="x-nop", new_test="[ 1 = 1 ]\n").directory),
            "--out",
            str(tmp_path / "red"),
            *verify_options,
        ]
    )
    red_dir = json.loads((tmp_path / "red" / "batch.json").read_text())["tasks"][0]["runDir"]
    assert red.returncode == 1
    refused = subprocess.run(
        [sys.executable, "-m", "runner", "export", red_dir, "-o", str(tmp_path / "no.tar.gz")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2 and "accepted tasks only" in refused.stderr
    assert not (tmp_path / "no.tar.gz").exists()


def derived_base(verify_options: list[str]) -> str:
    plan = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "verify",
            str(EXAMPLE),
            "--plan",
            *verify_options,
            "--logs",
            "/tmp/selfbench-plan-only",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    tag = str(json.loads(plan.stdout)["base"]["derived"]["tag"])
    client = docker.from_env()
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        # Run alone, no earlier test has built it: the example's verify builds it (and any
        # other test that needs it finds it made; a build is idempotent).
        built = subprocess.run(
            [
                *(sys.executable, "-m", "runner", "verify", str(EXAMPLE), *FAST),
                *(*verify_options, "--logs", "/tmp/selfbench-derived-base"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        assert built.returncode == 0, built.stderr[-3000:]
    finally:
        client.close()
    return tag


def test_batch_over_two_engines_and_losing_one_mid_batch(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient, base_image: str
) -> None:
    # The derived base (CA, toolchain artifacts) is loaded into the second engine; the task
    # images are built there, over the host network.
    base = derived_base(verify_options)
    docker_client.images.get(base)
    options = [*verify_options, "--build-network", "host", *FAST]  # engines are the subject
    with private_engine(tmp_path / "engine", images=(base_image, base)) as second:
        main_url = "unix:///var/run/docker.sock"
        engines = ["--engine", f"{main_url}=1", "--engine", f"{second.url}=1"]
        tasks = [str(example_copy(tmp_path, f"t{i}")) for i in range(2)]
        out = tmp_path / "both"
        both = batch([*tasks, "--jobs", "2", *engines, "--out", str(out), *options])
        assert both.returncode == 0, both.stderr
        document = json.loads((out / "batch.json").read_text())
        assert {t["engine"] for t in document["tasks"]} == {main_url, second.url}
        assert all(t["verdict"] == "accepted" for t in document["tasks"])
        on_second = second.client().containers.list(
            all=True, filters={"label": "org.selfbench.runner=1"}
        )
        assert on_second == []

        # Now a slow task per engine, and the second engine stops while its task builds.
        nonce = uuid.uuid4().hex[:8]
        slow = [
            str(
                example_copy(
                    tmp_path, f"s{i}", setupCommand=f"./configure && sleep 20 && echo {nonce}"
                )
            )
            for i in range(2)
        ]
        out = tmp_path / "lose"
        killer_done = threading.Event()
        killed = threading.Event()

        def kill_second_when_busy() -> None:
            client = docker.DockerClient(base_url=second.url, timeout=10)
            deadline = time.monotonic() + 300
            try:
                while time.monotonic() < deadline:
                    # The low-level list: the high-level one inspects each container, and a
                    # build step removed in between raised NotFound here and ended this thread
                    # before it stopped the engine (seen in CI).
                    if client.api.containers(all=True):  # a build step or a gate is running
                        time.sleep(2)
                        # The engine shuts down (it stops its containers first): it stops
                        # answering while its task runs.
                        os.kill(second.pid, signal.SIGTERM)
                        killed.set()
                        return
                    time.sleep(0.2)
            finally:
                client.close()
                killer_done.set()

        killer = threading.Thread(target=kill_second_when_busy, daemon=True)
        killer.start()
        lost = batch(
            [*slow, "--jobs", "2", *engines, "--out", str(out), "--retries", "1", *options]
        )
        killer.join(10)
        assert killer_done.is_set() and killed.is_set(), "the second engine was never busy"
        assert lost.returncode == 0, lost.stderr
        document = json.loads((out / "batch.json").read_text())
        assert all(t["verdict"] == "accepted" for t in document["tasks"])
        assert {t["engine"] for t in document["tasks"]} == {main_url}
        assert document["moved"] == 1
        states = {e["engine"]: e["alive"] for e in document["engines"]}
        assert states == {main_url: True, second.url: False}
        assert "left the pool" in lost.stderr
        for task in document["tasks"]:
            assert leftovers(docker_client, task["report"]["runId"]) == []


def test_gc_keeps_the_cache_under_budget_and_spares_images_in_use(
    tmp_path: Path, verify_options: list[str], base_image: str
) -> None:
    base = derived_base(verify_options)
    options = [*verify_options, "--build-network", "host", *FAST]  # the budget is the subject
    with private_engine(tmp_path / "engine", images=(base_image, base)) as engine:
        # A cache of its own: the use records and holds are the host's, so a verification
        # another test runs meanwhile (on the main engine) would hold the images used since it
        # began, and gc would rightly keep them.
        env = {**engine.environ(), "SELFBENCH_CACHE_DIR": str(tmp_path / "cache")}
        tasks = [
            str(
                example_copy(
                    tmp_path,
                    f"g{i}",
                    taskId=f"gc-{i}",
                    setupCommand=f"./configure && head -c {i + 1}000000 /dev/urandom > blob",
                )
            )
            for i in range(3)
        ]
        first = batch([*tasks, "--out", str(tmp_path / "b"), *options], env=env)
        assert first.returncode == 0, first.stderr
        client = engine.client()
        tags = sorted(
            t
            for i in client.images.list(filters={"label": "org.selfbench.runner=1"})
            for t in i.tags
            if ":agent-" in t or ":verifier-" in t
        )
        assert len(tags) == 6
        # A container keeps gc-2's verifier image in use.
        verifier = next(t for t in tags if t.startswith("selfbench/gc-2:verifier"))
        holder = client.containers.create(verifier, command=["sleep", "60"])
        try:
            gc = subprocess.run(
                [sys.executable, "-m", "runner", "gc", "--cache-budget", "64KiB"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            assert gc.returncode == 0, gc.stderr
            left = sorted(
                t
                for i in client.images.list(filters={"label": "org.selfbench.runner=1"})
                for t in i.tags
                if ":agent-" in t or ":verifier-" in t
            )
            assert left == [verifier]
            assert "removed 5 image(s)" in gc.stderr
            assert base in [t for i in client.images.list() for t in i.tags]  # not a task image
        finally:
            holder.remove(force=True)
        client.close()
