"""`evaluate` on a real engine: an export of six real-shaped tasks on three runners (pytest, go,
a bash script judged by exit codes), graded with mixed predictions (the real fix, an empty
patch, a broken fix, a patch that rewrites the held-out test, one that does not apply, and bad
lines), interrupted by SIGINT halfway and resumed: each result and the summary are right,
nothing is graded twice, the interrupted grade left no container, and the page works in
headless Chromium."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker

from runner.plan.labels import LABEL_RUN
from tests.helpers import diff_of
from tests.integration.conftest import FAST, ROOT, run_cli, run_verify
from tests.integration.test_debug import chromium, in_chromium
from tests.realistic import (
    BASH_RUNNER,
    GO_MULTI,
    GO_VENDORED,
    PDM,
    SETUPTOOLS,
    UV_MONOREPO,
    Built,
    build,
)

# A patch that rewrites the go task's held-out test to pass whatever the code does.
NO_TEST = (
    'package perimeter\n\nimport "testing"\n\n'
    "func TestSquare(t *testing.T) {}\n\nfunc TestTable(t *testing.T) {}\n"
)
PROJECTS = (UV_MONOREPO, SETUPTOOLS, PDM, GO_VENDORED, GO_MULTI, BASH_RUNNER)
OPTIONS = ["--toolchain-source", "go=registry", "--build-network", "host"]
# What each prediction must come to: the real fix resolves, the rest do not.
EXPECTED = {
    "real-uv": "resolved",
    "real-setuptools": "empty-patch",
    "real-pdm": "unresolved",
    "real-go": "unresolved",  # its held-out test rewritten: the policy undid it
    "real-go-multi": "resolved",
    "real-bash": "not-applied",
}


def accepted_export(tmp_path: Path, options: list[str]) -> tuple[Path, dict[str, Built]]:
    """The six tasks verified (two at a time) and exported as one archive."""
    built = {p.name: build(tmp_path, p) for p in PROJECTS}
    assert sorted(built) == sorted(EXPECTED)

    def verify(name: str) -> Path:
        run = run_verify(built[name].task, [*options, *OPTIONS], tmp_path / f"run-{name}", *FAST)
        assert run.report["verdict"] == "accepted", (name, run.report["reason"])
        return run.run_dir

    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(verify, built))
    archive = tmp_path / "export.tar.gz"
    done = run_cli("export", *map(str, runs), "-o", str(archive))
    assert done.returncode == 0, done.stderr
    return archive, built


def predictions(tmp_path: Path, built: dict[str, Built]) -> Path:
    go = built["real-go"]
    (held_out,) = go.project.tests
    lines: list[dict[str, Any]] = [
        {"instance_id": "real-uv", "model_patch": diff_of(built["real-uv"].repo, UV_MONOREPO.gold)},
        {"instance_id": "real-setuptools", "model_patch": ""},
        {
            "instance_id": "real-pdm",
            "model_patch": diff_of(built["real-pdm"].repo, PDM.broken_gold),
        },
        {
            "instance_id": "real-go",
            "model_patch": diff_of(go.repo, {held_out: NO_TEST}),
        },
        {
            "instance_id": "real-go-multi",
            "model_patch": diff_of(built["real-go-multi"].repo, GO_MULTI.gold),
        },
        {
            "instance_id": "real-bash",
            "model_patch": "--- a/lib.sh\n+++ b/lib.sh\n@@ -1,1 +1,1 @@\n-no such line\n+x\n",
        },
        {"instance_id": "no-such-task", "model_patch": "x"},
    ]
    path = tmp_path / "preds.jsonl"
    with path.open("w") as handle:
        for item in lines:
            patch = item["model_patch"]
            item["model_patch"] = patch.decode() if isinstance(patch, bytes) else patch
            handle.write(json.dumps({**item, "model_name_or_path": "agent-x"}) + "\n")
        handle.write("{not json\n")
        again = {"instance_id": "real-uv", "model_name_or_path": "agent-x", "model_patch": "x"}
        handle.write(json.dumps(again) + "\n")
    return path


def results_of(out: Path) -> dict[str, tuple[str, float]]:
    """Each result file by name: its content's status and its modification time."""
    found = {}
    for path in sorted((out / "results").glob("*.json")):
        found[path.name] = (json.loads(path.read_text())["status"], path.stat().st_mtime)
    return found


def in_flight(out: Path, client: docker.DockerClient) -> str | None:
    """The run id of a grade that has started and has no result yet, once a container of it
    runs (its plan.json names the run)."""
    graded = {path.name[:12] for path in (out / "results").glob("*.json")}
    for plan in (out / "runs").glob("*/plan.json"):
        if plan.parent.name.rsplit("-", 1)[-1] in graded:
            continue
        try:
            run_id = str(json.loads(plan.read_text())["runId"])
        except (OSError, ValueError):
            continue  # being written
        if client.containers.list(filters={"label": f"{LABEL_RUN}={run_id}"}):
            return run_id
    return None


def interrupted_halfway(
    command: list[str], out: Path, client: docker.DockerClient
) -> tuple[dict[str, Any], str]:
    """Evaluate, and SIGINT it once two predictions are graded (beside the empty patch's
    result, written at once) and a third grade's container runs; returns the summary the
    interrupted run wrote and the run id of the grade it stopped."""
    log = out.with_suffix(".log")
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 900
        stopped = None
        while stopped is None:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            if len(list((out / "results").glob("*.json"))) >= 3:
                stopped = in_flight(out, client)
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        assert process.wait(180) == 130, log.read_text()[-3000:]
    summary: dict[str, Any] = json.loads((out / "evaluation.json").read_text())
    return summary, stopped


def test_an_agent_s_run_is_evaluated_interrupted_and_resumed(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    archive, built = accepted_export(tmp_path, verify_options)
    preds = predictions(tmp_path, built)
    out = tmp_path / "eval"
    command = [
        sys.executable,
        "-m",
        "runner",
        "evaluate",
        str(archive),
        "--predictions",
        str(preds),
        "-o",
        str(out),
        *verify_options,
        *OPTIONS,
    ]
    first, stopped = interrupted_halfway([*command, "--jobs", "1"], out, docker_client)
    assert first["notGraded"] >= 1, first
    assert stopped.startswith(f"eval-{first['evaluationId']}-")
    # The grade that was running when SIGINT came removed its containers, and left no result.
    assert (
        docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={stopped}"}) == []
    )
    before = results_of(out)
    assert len(before) == 6 - first["notGraded"]
    assert stopped.split("-")[2] not in {name[:10] for name in before}
    assert all(status != "error" for status, _ in before.values()), before

    done = subprocess.run(
        [*command, "--jobs", "2", "--json", "-q"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # every prediction graded but bad lines
    summary = json.loads(done.stdout)
    after = results_of(out)
    # Nothing graded twice: what the first run graded is as it left it, the rest graded now.
    assert {name: after[name] for name in before} == before
    assert summary["gradedNow"] == 6 - len(before) == len(after) - len(before)
    statuses = {row["instanceId"]: row["status"] for row in summary["rows"]}
    assert statuses == EXPECTED, summary["rows"]
    assert (summary["instances"], summary["resolved"], summary["resolvedRate"]) == (6, 2, 0.3333)
    assert (summary["tasks"], summary["resolvedOfTasks"]) == (6, 0.3333)
    assert (summary["emptyPatches"], summary["notApplied"], summary["errors"]) == (1, 1, 0)
    assert summary["tampered"] == 1 and summary["models"] == ["agent-x"]
    assert (
        summary["byRepository"] and sum(t["total"] for t in summary["byDifficulty"].values()) == 6
    )
    where = [(p["where"], p["field"]) for p in summary["inputProblems"]]
    assert where == [
        (f"{preds}:7", "instance_id"),
        (f"{preds}:8", None),
        (f"{preds}:9", "instance_id"),
    ]
    results = {
        r["instanceId"]: json.loads((out / r["result"]).read_text()) for r in summary["rows"]
    }
    go = results["real-go"]
    assert go["reward"] == 0 and any("perimeter/perimeter_test.go" in t for t in go["tampering"])
    assert results["real-uv"]["reward"] == 1 and results["real-uv"]["failToPass"] is True
    assert results["real-uv"]["evidence"]["mode"] == "per-test"
    assert results["real-pdm"]["failToPass"] is False and results["real-pdm"]["tampering"] == []
    for name, result in results.items():
        for log in result["logs"]:
            assert (out / log).is_file(), (name, log)
    junit = (out / "junit.xml").read_text()
    assert 'tests="9"' in junit and 'failures="4"' in junit and 'errors="3"' in junit

    # A third run grades nothing; a changed prediction is graded again.
    preds.write_text(
        preds.read_text().replace(
            '"instance_id": "real-setuptools", "model_patch": ""',
            '"instance_id": "real-setuptools", "model_patch": "x"',
        )
    )
    again = subprocess.run(
        [*command, "--json", "-q"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    third = json.loads(again.stdout)
    assert third["gradedNow"] == 1, third
    assert {r["instanceId"]: r["status"] for r in third["rows"]}["real-setuptools"] == "not-applied"

    browser = chromium()
    dom = in_chromium(browser, out / "index.html", tmp_path / "eval.png", "1280,1400")
    assert 'data-sortable="yes"' in dom  # its script ran under the page's own policy
    for name in EXPECTED:
        assert f'data-value="{name}"' in dom, name
    assert "no-such-task" in dom and (tmp_path / "eval.png").stat().st_size > 10_000


def test_an_evaluation_is_graded_by_the_fleet_and_its_histories_replay(
    tmp_path: Path, verify_options: list[str]
) -> None:
    """`evaluate --temporal --store`: a real Temporal server, a worker process with a key of
    its own that trusts this host's seals, a shared-directory store. The predictions are graded
    on the worker; each result names its run in the store; a second run grades nothing; the
    pool's and the grade's histories replay on the current workflow code."""
    import asyncio
    import os
    import uuid

    from tests.integration.test_batch import example_copy
    from tests.integration.test_fleet import HISTORIES, _fleet_key, _histories, _replay
    from tests.temporal import start_worker, stop_worker, temporal_server

    task = example_copy(tmp_path, "fleet-task")
    run = run_verify(task, verify_options, tmp_path / "run", *FAST)
    assert run.report["verdict"] == "accepted", run.report["reason"]
    task_id = run.report["taskId"]
    host_key = run_cli("key")
    assert host_key.returncode == 0, host_key.stderr
    fleet_key, _ = _fleet_key(tmp_path)
    preds = tmp_path / "preds.jsonl"
    unrelated = "--- /dev/null\n+++ b/NOTES\n@@ -0,0 +1 @@\n+a note, not a fix\n"
    preds.write_text(
        "".join(
            json.dumps({"instance_id": task_id, "model_name_or_path": model, "model_patch": patch})
            + "\n"
            for model, patch in (
                ("gold", (ROOT / "examples" / "bash-calc" / "gold.patch").read_text()),
                ("unrelated", unrelated),
                ("nothing", ""),
            )
        )
    )
    out = tmp_path / "eval"
    store = f"file://{tmp_path / 'store'}"
    queue = f"evaluate-{uuid.uuid4().hex[:8]}"
    command = ["evaluate", str(run.run_dir), "--predictions", str(preds), "-o", str(out)]
    fleet = ["--temporal", "", "--task-queue", queue, "--store", store, "--jobs", "2"]
    with temporal_server(tmp_path / "temporal") as server:
        fleet[1] = server
        worker = start_worker(
            server,
            tmp_path / "worker",
            queue,
            [*verify_options, "--store", store],
            env={
                **os.environ,
                "SELFBENCH_CACHE_DIR": str(tmp_path / "worker-cache"),
                "SELFBENCH_SIGNING_KEY": str(fleet_key),
                "SELFBENCH_TRUSTED_KEYS": host_key.stdout.strip(),
            },
        )
        try:
            done = run_cli(*command, *fleet, "--json", "-q", timeout=900)
        finally:
            stop_worker(worker)
        assert done.returncode == 0, done.stderr[-3000:] + worker.text()[-3000:]
        summary = json.loads(done.stdout)
        workflow_id = f"evaluate-{summary['evaluationId']}"
        histories = asyncio.run(_histories(server, workflow_id))
    statuses = {row["model"]: row["status"] for row in summary["rows"]}
    assert statuses == {"gold": "resolved", "unrelated": "unresolved", "nothing": "empty-patch"}
    for row in summary["rows"]:
        result = json.loads((out / row["result"]).read_text())
        if row["status"] != "empty-patch":
            assert result["runDir"].startswith(f"{store}/runs/"), result["runDir"]
            assert result["evidence"]["mode"] == "exit-code", result["evidence"]
    assert summary["gradeOptions"] == ["fleet", "--evidence-checks", "all"]
    # Everything has its result: a second run grades nothing (no worker, no Temporal needed).
    again = run_cli(*command, *fleet, "--json", "-q")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["gradedNow"] == 0

    kinds = sorted(kind for kind, _, _ in histories)
    assert kinds == ["selfbench.grade", "selfbench.grade", "selfbench.pool"], kinds
    asyncio.run(_replay(histories))
    if os.environ.get("UPDATE_HISTORIES"):
        for kind in ("selfbench.pool", "selfbench.grade"):
            _, found_id, text = next(h for h in histories if h[0] == kind)
            label = "selfbench.pool-grade" if kind == "selfbench.pool" else kind
            (HISTORIES / f"{label}--{found_id.replace('/', '--')}.json").write_text(text)


def test_ctrl_c_cancels_the_fleet_s_evaluation_and_leaves_no_container(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    """`evaluate --temporal`, SIGINT while a worker grades a prediction: the command ends 130
    with its summary written (what was not graded counted), the pool workflow is cancelled, and
    the worker's grades stop and remove their containers (found by this test's own task id)."""
    import os
    import uuid

    from tests.integration.test_batch import example_copy
    from tests.integration.test_fleet import _fleet_key
    from tests.temporal import start_worker, stop_worker, temporal, temporal_server

    task_id = f"fleet-cancel-{uuid.uuid4().hex[:8]}"
    task = example_copy(tmp_path, "fleet-cancel", taskId=task_id)
    run = run_verify(task, verify_options, tmp_path / "run", *FAST)
    assert run.report["verdict"] == "accepted", run.report["reason"]
    host_key = run_cli("key")
    assert host_key.returncode == 0, host_key.stderr
    fleet_key, _ = _fleet_key(tmp_path)
    slow = _slow_gold(tmp_path)  # the fix, each calc.sh call 2 s longer: a grade of minutes
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "".join(
            json.dumps({"instance_id": task_id, "model_name_or_path": f"m{n}", "model_patch": slow})
            + "\n"
            for n in range(3)
        )
    )
    out = tmp_path / "eval"
    store = f"file://{tmp_path / 'store'}"
    queue = f"evaluate-{uuid.uuid4().hex[:8]}"
    ours = {"label": f"org.selfbench.task={task_id}"}
    with temporal_server(tmp_path / "temporal") as server:
        worker = start_worker(
            server,
            tmp_path / "worker",
            queue,
            [*verify_options, "--store", store],
            jobs=1,
            env={
                **os.environ,
                "SELFBENCH_CACHE_DIR": str(tmp_path / "worker-cache"),
                "SELFBENCH_SIGNING_KEY": str(fleet_key),
                "SELFBENCH_TRUSTED_KEYS": host_key.stdout.strip(),
            },
        )
        try:
            command = [sys.executable, "-m", "runner", "evaluate", str(run.run_dir)]
            command += ["--predictions", str(preds), "-o", str(out), "--json", "-q"]
            command += ["--temporal", server, "--task-queue", queue, "--store", store]
            stdout, stderr = tmp_path / "evaluate.out", tmp_path / "evaluate.err"
            with stdout.open("wb") as out_file, stderr.open("wb") as err_file:
                process = subprocess.Popen(command, cwd=ROOT, stdout=out_file, stderr=err_file)
            # Interrupted while a worker's grade has a container of this task running.
            deadline = time.monotonic() + 300
            while not docker_client.api.containers(filters=ours):
                assert process.poll() is None, stderr.read_text()[-3000:]
                assert time.monotonic() < deadline, worker.text()[-3000:]
                time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            code = process.wait(120)
            said = stderr.read_text()
            assert code == 130, said[-3000:]
            summary = json.loads(stdout.read_text())
            assert summary["notGraded"] >= 1, summary
            workflow = f"evaluate-{summary['evaluationId']}"
            described = temporal(server, "workflow", "describe", "--workflow-id", workflow)
            assert described.returncode == 0, described.stderr
            assert "Status   CANCELED" in described.stdout, described.stdout
            # The worker's grade (minutes long) hears it at its next heartbeat, stops and removes
            # what it made (its child has ended when the worker says so).
            deadline = time.monotonic() + 120
            while ": stopped (exit " not in worker.text():
                assert time.monotonic() < deadline, worker.text()[-3000:]
                time.sleep(0.2)
            assert ": cancelled; it stops and removes its containers" in worker.text()
            assert "(exit 0)" not in worker.text(), worker.text()[-3000:]  # no grade ended
            left = docker_client.api.containers(all=True, filters=ours)
            assert left == [], ([c["Names"] for c in left], worker.text()[-3000:])
        finally:
            stop_worker(worker)


def _slow_gold(tmp_path: Path) -> str:
    """The bash-calc example's fix with `sleep 2` at the top of calc.sh, as a patch."""
    example = ROOT / "examples" / "bash-calc"
    base = json.loads((example / "definition.json").read_text())["baseCommit"]
    repo = tmp_path / "slow-gold"
    git = ["git", "-C", str(repo), "-c", "advice.detachedHead=false"]
    subprocess.run(["git", "clone", "-q", str(example / "repo.bundle"), str(repo)], check=True)
    subprocess.run([*git, "checkout", "-q", base], check=True)
    subprocess.run([*git, "apply", str(example / "gold.patch")], check=True)
    calc = repo / "calc.sh"
    lines = calc.read_text().splitlines(keepends=True)
    calc.write_text("".join([lines[0], "sleep 2\n", *lines[1:]]))
    done = subprocess.run([*git, "diff"], capture_output=True, text=True, check=True)
    return done.stdout
