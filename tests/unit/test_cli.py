"""The command line: output, JSON, exit codes (no Docker)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.compile.taskdir import load_authored_task
from runner.model.task import Toolchain
from runner.model.toolchains import Source
from tests.helpers import bash_task, compiled, run_cli_captured

run = run_cli_captured


def test_audit_accepted(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    code, out, _ = run("audit", str(task.directory))
    assert code == 0
    assert out.splitlines() == [
        "demo-task: 1 implementation file(s), 22 changed line(s), 1 test file(s)",
        # The coupling evidence `audit --json` gives: the held-out test calls what only the
        # gold brings (the instruction never names it).
        "coupling: gold-only-name 'shout': tests/test_new.sh:2 -> lib.sh:24",
        "audit: accepted",
    ]
    code, out, _ = run("audit", str(task.directory), "--json")
    assert code == 0
    assert [(c["kind"], c["name"]) for c in json.loads(out)["coupling"]] == [
        ("gold-only-name", "shout")
    ]


def test_audit_rejected_json(tmp_path: Path) -> None:
    task = bash_task(tmp_path, testCommand='bash tests/run.sh "{tests}"', difficulty="medium")
    code, out, _ = run("audit", str(task.directory), "--json")
    assert code == 1
    document = json.loads(out)
    assert document["accepted"] is False
    assert document["blockers"] == [
        "medium mode requires at least 2 implementation files; found 1",
        "medium mode requires at least 50 changed implementation lines; found 22",
        'test command must expand "{tests}" as an unquoted shell argument list',
    ]
    assert document["reason"] == "; ".join(document["blockers"])


def test_invalid_task_exit_2_one_line(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    (task.directory / "test.patch").write_text("not a patch\n")
    code, out, err = run("audit", str(task.directory))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"selfbench-runner: error: {task.directory / 'test.patch'}: test.patch is not a Git patch"
    ]


def test_schema_error_names_file_and_field(tmp_path: Path) -> None:
    task = bash_task(tmp_path, resources={"cpus": -1})
    code, _, err = run("compile", str(task.directory), "-o", str(tmp_path / "out"))
    assert code == 2
    assert err.strip() == (
        f"selfbench-runner: error: {task.directory / 'definition.json'}: field "
        "`resources.cpus`: must be greater than 0"
    )
    assert not (tmp_path / "out").exists()


def test_compile_and_refresh(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    code, out, _ = run(
        "compile",
        str(task.directory),
        "-o",
        str(tmp_path / "b"),
        "--agent-allowed-host",
        "api.example",
    )
    assert code == 0 and out.strip() == str(tmp_path / "b")
    assert 'allowed_hosts = [\n    "api.example",\n]' in (tmp_path / "b/task.toml").read_text()
    code, out, _ = run(
        "refresh", str(task.directory), str(tmp_path / "b"), "--agent-allowed-host", "api.example"
    )
    assert (code, out.strip()) == (0, "bundle already up to date")


def test_schema_command() -> None:
    code, out, _ = run("schema")
    assert code == 0
    schema = json.loads(out)
    assert {"verdict", "stages", "taskId", "schemaVersion"} <= set(schema["properties"])


def test_verify_invalid_task_never_calls_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path, schemaVersion=2)
    code, out, _ = run("verify", str(task.directory), "--json", "--logs", str(tmp_path / "r"))
    assert code == 2
    report = json.loads(out)
    assert report["verdict"] == "invalid"
    assert report["stages"]["compile"]["status"] == "failed"
    assert "field `schemaVersion`: must be the integer 1" in report["stages"]["compile"]["detail"]
    assert report["errors"] == [
        {
            "file": str(task.directory / "definition.json"),
            "field": "schemaVersion",
            "message": "must be the integer 1 (the only schemaVersion)",
        }
    ]
    assert report["stages"]["build"]["status"] == "skipped"
    (run_dir,) = (tmp_path / "r" / "demo-task").iterdir()
    assert json.loads((run_dir / "report.json").read_text())["verdict"] == "invalid"


def test_verify_without_an_engine_is_infrastructure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path)
    code, out, _ = run("verify", str(task.directory), "--json", "--logs", str(tmp_path / "r"))
    assert code == 3
    report = json.loads(out)
    assert report["verdict"] == "infrastructure_failed"
    assert [report["stages"][s]["status"] for s in ("compile", "audit", "build")] == [
        "passed",
        "passed",
        "error",
    ]
    assert report["stages"]["build"]["detail"].startswith("no Docker engine answers")
    assert report["reason"].startswith("build: no Docker engine answers")


def test_verify_audit_red_stops_before_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path, difficulty="hard")
    code, out, _ = run("verify", str(task.directory), "--json", "--logs", str(tmp_path / "r"))
    assert code == 1
    report = json.loads(out)
    assert report["verdict"] == "rejected"
    assert report["stages"]["audit"]["status"] == "failed"
    assert report["stages"]["audit"]["data"]["blockers"][0] == (
        "hard mode requires at least 3 implementation files; found 1"
    )
    assert report["stages"]["build"]["status"] == "skipped"


def test_missing_extra_ca_is_a_usage_error(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    code, _, err = run(
        "verify", str(task.directory), "--extra-ca-certs", str(tmp_path / "nope.pem")
    )
    assert code == 2
    assert err.strip() == (
        f"selfbench-runner: error: {tmp_path / 'nope.pem'}: field "
        "`--extra-ca-certs`: file not found"
    )


def test_bad_toolchain_source_is_a_usage_error(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    code, _, err = run("verify", str(task.directory), "--toolchain-source", "rust=registry")
    assert code == 2
    assert "rust has no registry source" in err


def test_bun_registry_source_is_accepted_everywhere_a_source_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README's toolchain table says bun's registry source is its upstream one (npm)."""
    task = bash_task(tmp_path, toolchains=["bun"])
    code, out, err = run(
        "verify", str(task.directory), "--plan", "--toolchain-source", "bun=registry,node=registry"
    )
    assert code == 0, err
    plan = json.loads(out)
    assert "SELFBENCH_BUN_SOURCE" not in json.dumps(plan)
    assert "SELFBENCH_NODE_SOURCE" in json.dumps(plan)
    monkeypatch.setenv("SELFBENCH_TOOLCHAIN_SOURCES", "bun=registry")
    assert run("verify", str(task.directory), "--plan")[0] == 0
    # prepare, batch and serve build their settings through the same function as verify.
    from runner.cli.common import _build_environment

    environment = _build_environment("ubuntu:24.04", None, ("bun=registry",), (), None)
    assert environment.toolchains.source(Toolchain.BUN) is Source.UPSTREAM


def test_forged_bundle_with_a_bad_value_is_invalid_with_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen: `memory_mb = "lots"` crashed with a traceback, exit 1, no report.json."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path)
    bundle = compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "bundle")
    toml = (bundle / "task.toml").read_text()
    (bundle / "task.toml").write_text(toml.replace("memory_mb = 512", 'memory_mb = "lots"'))
    report_file = tmp_path / "out.json"
    code, out, err = run(
        "verify", str(bundle), "--json", "--logs", str(tmp_path / "r"), "--report", str(report_file)
    )
    assert code == 2
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["verdict"] == "invalid"
    fields = {(e["field"], e["message"]) for e in report["errors"]}
    assert ("environment.memory_mb", "Input should be a valid integer") in fields
    assert ("verifier.environment.memory_mb", "Input should be a valid integer") in fields
    assert json.loads(report_file.read_text()) == report
    (run_dir,) = (tmp_path / "r").glob("*/*")
    assert json.loads((run_dir / "report.json").read_text())["verdict"] == "invalid"


def several_errors(tmp_path: Path) -> Path:
    task = bash_task(tmp_path)
    doc = json.loads((task.directory / "definition.json").read_text())
    doc.update({"difficulty": "trivial", "sourcePr": 0, "workdir": "/abs"})
    (task.directory / "definition.json").write_text(json.dumps(doc))
    return task.directory


def test_audit_shows_every_schema_error(tmp_path: Path) -> None:
    """Seen: only the first error and "(and 1 more)"; --json printed nothing on stdout."""
    directory = several_errors(tmp_path)
    code, out, err = run("audit", str(directory))
    assert code == 2 and out == ""
    definition_json = directory / "definition.json"
    assert err.splitlines() == [
        f"selfbench-runner: error: {definition_json}: field `difficulty`: Input should be "
        "'easy', 'medium' or 'hard'",
        f"selfbench-runner: error: {definition_json}: field `workdir`: task path escapes "
        "repository: /abs is absolute",
        f"selfbench-runner: error: {definition_json}: field `sourcePr`: Input should be greater "
        "than or equal to 1",
    ]
    code, out, _ = run("audit", str(directory), "--json")
    assert code == 2
    document = json.loads(out)
    assert document["verdict"] == "invalid"
    assert [e["field"] for e in document["errors"]] == ["difficulty", "workdir", "sourcePr"]
    assert all(e["file"] == str(definition_json) for e in document["errors"])


def test_verify_json_on_invalid_input_lists_every_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    directory = several_errors(tmp_path)
    code, out, err = run("verify", str(directory), "--json", "--logs", str(tmp_path / "r"))
    assert code == 2
    report = json.loads(out)
    assert [e["field"] for e in report["errors"]] == ["difficulty", "workdir", "sourcePr"]
    assert err.count("error: ") >= 3  # the terminal shows all of them too


def test_unexpected_exception_exits_3_with_the_traceback_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen: any exception that is not a RunnerError exited 1, which reads as "rejected"."""
    import runner.compile.taskdir

    def broken(directory: Path) -> None:
        raise ValueError("a bug in the runner")

    monkeypatch.setattr(runner.compile.taskdir, "load_authored_task", broken)
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(tmp_path / "cache"))
    task = bash_task(tmp_path)
    code, _, err = run("audit", str(task.directory))
    assert code == 3
    (line,) = err.splitlines()
    assert line.startswith("selfbench-runner: internal error: ValueError: a bug in the runner")
    (crash,) = (tmp_path / "cache" / "crashes").iterdir()
    assert "Traceback" in crash.read_text() and str(crash) in line


def test_unexpected_exception_inside_verify_is_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runner.run.pipeline

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("plan")

    monkeypatch.setattr(runner.run.pipeline, "plan_verify", broken)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path)
    code, _, _ = run("verify", str(task.directory), "--plan", "--logs", str(tmp_path / "r"))
    assert code == 3
    (run_dir,) = (tmp_path / "r").glob("*/*")
    assert "Traceback" in (run_dir / "runner.log").read_text()


def test_click_usage_errors_are_one_line_in_the_runners_format(tmp_path: Path) -> None:
    code, out, err = run("verify", str(tmp_path), "--no-such-option")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line == (
        "selfbench-runner: error: No such option '--no-such-option' "
        "(see `selfbench-runner verify --help`)"
    )
    code, _, err = run("verify", str(tmp_path), "--pids-limit", "-5")
    assert code == 2 and "--pids-limit" in err and len(err.splitlines()) == 1
    code, _, err = run("verify", str(tmp_path), "--pids-limit", str(2**70))
    assert code == 2
    code, _, err = run("verify", str(tmp_path), "--agent-allowed-host", "a\nb")
    assert code == 2 and "--agent-allowed-host" in err


def test_a_mistyped_choice_names_the_closest_one(tmp_path: Path) -> None:
    code, _, err = run("logs", str(tmp_path), "--stage", "orcale")
    assert code == 2
    (line,) = err.splitlines()
    assert line.endswith("'hack'; did you mean 'oracle'? (see `selfbench-runner logs --help`)")
    code, _, err = run("verify", str(tmp_path), "--hack-gate", "ful")
    assert code == 2 and "did you mean 'full'?" in err
    # Nothing close: the choices alone.
    code, _, err = run("logs", str(tmp_path), "--stage", "zzz")
    assert code == 2 and "is not one of" in err and "did you mean" not in err


def test_verify_plan_prints_the_plan_without_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path)
    code, out, _ = run("verify", str(task.directory), "--plan", "--logs", str(tmp_path / "r"))
    assert code == 0
    plan = json.loads(out)
    assert plan["taskId"] == "demo-task"
    assert plan["facts"]["source"] == "host"
    assert [b["kind"] for b in plan["builds"]] == ["agent", "verifier"]
    assert [t["gate"] for t in plan["trials"]] == ["nop", "oracle"]
    assert plan["trials"][1]["solve"]["argv"] == ["bash", "/solution/solve.sh"]
    # Three containers: nop has no agent side (its patch is empty by construction), and the
    # default smoke check, which only reads, runs in the nop verifier.
    nop, oracle = plan["trials"]
    assert nop["agent"] is None and nop["collect"] is None
    assert oracle["agent"]["image"] == plan["builds"][0]["tag"]
    assert plan["smoke"]["container"] is None
    # The plan is printed, not kept: no run directory is left under --logs; --run-dir keeps it.
    assert not (tmp_path / "r").exists() or list((tmp_path / "r").iterdir()) == []
    kept = tmp_path / "kept"
    code, out, _ = run("verify", str(task.directory), "--plan", "--run-dir", str(kept))
    assert code == 0 and (kept / "plan.json").is_file()
    assert json.loads((kept / "plan.json").read_text()) == json.loads(out)


def test_a_smoke_command_or_an_edited_smoke_script_gets_its_own_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the smoke script the runner renders itself is known to be read-only."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path, environment={"smokeCommand": "make check"})
    code, out, _ = run("verify", str(task.directory), "--plan", "--logs", str(tmp_path / "r"))
    assert code == 0
    plan = json.loads(out)
    assert plan["smoke"]["container"]["role"] == "smoke"
    assert plan["smoke"]["container"]["image"] == plan["builds"][1]["tag"]  # the verifier image

    plain = bash_task(tmp_path / "plain")
    bundle = tmp_path / "bundle"
    assert run("compile", str(plain.directory), "-o", str(bundle))[0] == 0
    smoke_sh = bundle / "tests" / "smoke.sh"
    smoke_sh.write_bytes(smoke_sh.read_bytes() + b"touch /app/written-by-smoke\n")
    code, out, _ = run("verify", str(bundle), "--plan", "--logs", str(tmp_path / "r2"))
    assert code == 0
    assert json.loads(out)["smoke"]["container"]["role"] == "smoke"


def test_logs_never_inside_the_task_directory(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    code, _, err = run("verify", str(task.directory), "--logs", str(task.directory / "runs"))
    assert code == 2
    assert "inside the task directory" in err
    assert not (task.directory / "runs").exists()
    # A logs root whose <taskId>/ would be the task directory itself.
    code, _, err = run("verify", str(task.directory), "--logs", str(tmp_path))
    assert code == 2 and "inside the task directory" in err


def test_output_directory_is_never_destroyed(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    # Someone's directory.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _, err = run("compile", str(task.directory), "-o", str(mine))
    assert code == 2 and "not a selfbench bundle" in err
    assert (mine / "notes.txt").read_text() == "keep me"
    # A forged manifest with this task's id, beside other files.
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / ".selfbench-manifest.json").write_text('{"taskId": "demo-task"}')
    (forged / "thesis.tex").write_text("years of work")
    code, _, err = run("compile", str(task.directory), "-o", str(forged))
    assert code == 2 and "holds files that are not part of a bundle (thesis.tex)" in err
    assert (forged / "thesis.tex").read_text() == "years of work"
    # A manifest that is not JSON.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / ".selfbench-manifest.json").write_bytes(b"\xff{")
    code, _, err = run("compile", str(task.directory), "-o", str(broken))
    assert code == 2 and "unreadable bundle manifest" in err
    # Its own bundle is replaced, atomically.
    out = tmp_path / "out"
    assert run("compile", str(task.directory), "-o", str(out))[0] == 0
    assert run("compile", str(task.directory), "-o", str(out))[0] == 0


def test_unwritable_places_are_usage_errors(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    code, _, err = run("compile", str(task.directory), "-o", "/proc/selfbench-out")
    assert code == 2 and "cannot write the bundle here" in err
    code, _, err = run(
        "verify", str(task.directory), "--report", "/proc/version", "--logs", str(tmp_path / "r")
    )
    assert code == 2 and "--report" in err and "kernel or device filesystem" in err
    code, _, err = run("verify", str(task.directory), "--logs", "/proc/selfbench-runs")
    assert code == 2 and "cannot create the run directory" in err
    code, _, err = run("verify", str(task.directory), "--report", str(tmp_path))
    assert code == 2 and "a directory" in err


def test_unreadable_task_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root reads any file, so a permission error is simulated at the one place files open."""
    import errno
    import os

    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith("gold.patch"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing)
    task = bash_task(tmp_path)
    code, _, err = run("audit", str(task.directory))
    assert code == 2
    assert err.strip() == (
        f"selfbench-runner: error: {task.directory / 'gold.patch'}: cannot read: permission denied"
    )


def test_the_plan_holds_the_probe_the_exploits_and_the_online_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path)
    code, out, _ = run(
        "verify", str(task.directory), "--plan", "--repeat", "3", "--logs", str(tmp_path / "r")
    )
    assert code == 0
    plan = json.loads(out)
    runs = plan["probe"]["runs"]
    assert [r["name"] for r in runs] == ["probe-1", "probe-2", "probe-3"]
    envs = [r["trial"]["test"]["env"] for r in runs]
    assert [e["TZ"] for e in envs] == ["<+14>-14", "<-0330>3:30", "UTC0"]
    assert [e["LC_ALL"] for e in envs] == ["C", "C.UTF-8", "C"]
    assert [e.get("SELFBENCH_SELECTOR_ORDER") for e in envs] == ["reversed", None, "reversed"]
    seeds = {e["PYTHONHASHSEED"] for e in envs}
    assert len(seeds) == 3 and all(s.isdigit() and s != "0" for s in seeds)
    cpusets = [r["trial"]["verifier"]["limits"]["cpuset"] for r in runs]
    assert cpusets == (["0", None, "0"] if plan["facts"]["ncpu"] > 1 else [None] * 3)
    # A failed run is retried with each of its dimensions alone.
    retries = plan["probe"]["attribution"]["probe-2"]
    assert [r["name"] for r in retries] == ["probe-2-tz", "probe-2-hashseed", "probe-2-locale"]
    assert retries[0]["trial"]["test"]["env"]["TZ"] == "<-0330>3:30"
    assert "PYTHONHASHSEED" not in retries[0]["trial"]["test"]["env"]
    # The hack gate's exploits, each with a verifier of its own that stops at the first red.
    exploits = plan["hack"]["exploits"]
    assert [e["name"] for e in exploits] == [
        "runner-exit-zero",
        "held-out-overwrite",
        "harness-rename",
        "harness-rewrite-at-run",
        "reward-file-from-code",
        "harness-memory",
    ]
    assert all(e["run"]["user"] == "agent" for e in exploits)
    assert exploits[0]["trial"]["test"]["env"]["SELFBENCH_REWARD_ONLY"] == "1"
    # Graded by the census nop and the oracle sealed; they record it.
    assert {e["trial"]["census"] for e in exploits} == {"sealed"}
    assert {t["census"] for t in plan["trials"]} == {"unsealed"}
    assert plan["grade"]["census"] == "sealed"
    # A red nop or oracle is retried once with the network on.
    for trial in plan["trials"]:
        assert trial["verifier"]["network"] == "none"
        assert trial["onlineVerifier"]["network"] == "bridge"

    code, out, _ = run(
        "verify",
        str(task.directory),
        "--plan",
        "--repeat",
        "0",
        "--no-hack-gate",
        "--logs",
        str(tmp_path / "r2"),
    )
    assert code == 0
    plan = json.loads(out)
    assert plan["probe"] is None and plan["hack"] is None and plan["hackGate"] is False


def test_an_interrupted_command_does_not_wait_on_a_stuck_worker_thread() -> None:
    """A worker thread still blocked after an interrupt (an engine call the engine has not
    answered) must not hold the process: the interpreter's exit would join it forever."""
    import subprocess
    import sys
    import time

    program = (
        "import threading\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from runner.cli.leave import leave\n"
        "pool = ThreadPoolExecutor(max_workers=1)\n"
        "pool.submit(threading.Event().wait)\n"
        "pool.shutdown(wait=False)\n"
        "print('report written', flush=True)\n"
        "leave(130)\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", program], check=False, capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    assert (done.returncode, done.stdout) == (130, "report written\n"), done.stderr
    assert took < 30
    # Any other exit code is a plain exit (here, nothing is left to wait for).
    plain = subprocess.run(
        [sys.executable, "-c", "from runner.cli.leave import leave\nleave(1)\n"],
        check=False,
        timeout=60,
    )
    assert plain.returncode == 1


def test_a_command_that_loaded_temporal_s_client_ends_without_finalizing() -> None:
    """Temporal's Rust threads can call into a finalizing interpreter and abort the process
    (temporalio/sdk-python#300): once its bridge is loaded, `leave` ends the process with the
    code and the output written, without finalizing (no atexit handler runs)."""
    import subprocess
    import sys

    program = (
        "import atexit, sys\n"
        "import temporalio.client\n"
        "from runner.cli.leave import leave\n"
        "atexit.register(lambda: print('finalized', flush=True))\n"
        "sys.stdout.write('error written\\n')\n"  # buffered: leave flushes it
        "leave({code})\n"
    )
    for code in (0, 3):
        done = subprocess.run(
            [sys.executable, "-c", program.format(code=code)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout) == (code, "error written\n"), done.stderr
    # Without the bridge, the interpreter finalizes as usual.
    plain = subprocess.run(
        [sys.executable, "-c", program.replace("import temporalio.client\n", "").format(code=1)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (plain.returncode, plain.stdout) == (1, "error written\nfinalized\n"), plain.stderr


@pytest.mark.parametrize(
    ("argv", "extra", "missing"),
    [
        (["serve", "--mailbox", "mb"], "sidecar", "fastapi"),
        (["worker", "--temporal", "127.0.0.1:7233"], "fleet", "temporalio"),
        (["batch", "tasks", "--temporal", "127.0.0.1:7233"], "fleet", "temporalio"),
    ],
)
def test_a_command_whose_extra_is_not_installed_says_how_to_install_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    extra: str,
    missing: str,
) -> None:
    """A task author installs what verify needs; serve, worker and batch --temporal name the
    extra they need (exit 2), before any work."""
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else found(name, *a)
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks").mkdir()
    bash_task(tmp_path / "tasks")
    code, _, err = run(*argv)
    assert code == 2, err
    assert f"pip install 'selfbench-runner[{extra}]'" in err
    assert f"missing: {missing}" in err


BLOCK_EXTRAS = """
import sys
from importlib.abc import MetaPathFinder

EXTRAS = {"fastapi", "starlette", "uvicorn", "h11", "prometheus_client", "temporalio"}


class Blocked(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in EXTRAS:
            raise ImportError(f"{name} is an extra's (not installed here)")
        return None


sys.meta_path.insert(0, Blocked())
from runner.cli.main import run_cli

sys.exit(run_cli(sys.argv[1:]))
"""


def test_the_authors_commands_run_without_the_extras(tmp_path: Path) -> None:
    """What a task author runs (audit, compile, verify --plan, schema) imports no package of
    the sidecar or fleet extras."""
    import subprocess

    task = bash_task(tmp_path)
    root = Path(__file__).resolve().parents[2]
    for argv in (
        ["audit", str(task.directory)],
        ["compile", str(task.directory), "-o", str(tmp_path / "bundle")],
        ["verify", str(task.directory), "--plan", "--logs", str(tmp_path / "runs")],
        ["schema", "--request"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", BLOCK_EXTRAS, *argv],
            capture_output=True,
            text=True,
            cwd=root,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DOCKER_HOST": "unix:///none"},
            check=False,
        )
        assert done.returncode == 0, (argv, done.stderr[-2000:])
