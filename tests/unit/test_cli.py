"""The command line: output, JSON, exit codes (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from tests.helpers import bash_task


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_audit_accepted(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    code, out, _ = run("audit", str(task.directory))
    assert code == 0
    assert out.splitlines() == [
        "demo-task: 1 implementation file(s), 22 changed line(s), 1 test file(s)",
        "audit: accepted",
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
        "`resources.cpus`: Input should be greater than 0"
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
    assert "field `schemaVersion`: Input should be 1" in report["stages"]["compile"]["detail"]
    assert report["stages"]["build"]["status"] == "skipped"
    assert json.loads((tmp_path / "r" / "report.json").read_text())["verdict"] == "invalid"


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
