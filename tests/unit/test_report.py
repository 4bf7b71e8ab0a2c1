"""Report, gate criteria, verdicts and how they are shown (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.cli_output import Output, step_summary, summary_lines
from runner.errors import ExitCode
from runner.report import Report, Status, Verdict, load_report, report_schema, write_atomic
from runner.verify import decide_verdict, evaluate_gate, verdict_reason

NOP_OK = {
    "reward": 0,
    "patch_applied": 1,
    "fail_to_pass": 0,
    "pass_to_pass": 1,
    "deterministic": 0,
    "setup_completed": 1,
    "fail_to_pass_exit_code": 1,
    "fail_to_pass_repeat_exit_code": -1,
    "pass_to_pass_exit_code": 0,
}
ORACLE_OK = {
    **NOP_OK,
    "reward": 1,
    "fail_to_pass": 1,
    "deterministic": 1,
    "fail_to_pass_exit_code": 0,
    "fail_to_pass_repeat_exit_code": 0,
}


@pytest.mark.parametrize(
    ("gate", "reward", "ok", "detail"),
    [
        ("nop", NOP_OK, True, "fail-to-pass fails (exit 1) and pass-to-pass passes on the base"),
        (
            "nop",
            {**NOP_OK, "fail_to_pass": 1},
            False,
            "fail-to-pass tests already pass on the base snapshot",
        ),
        (
            "nop",
            {**NOP_OK, "pass_to_pass": 0, "pass_to_pass_exit_code": 2},
            False,
            "pass-to-pass tests fail on the base snapshot (exit 2)",
        ),
        (
            "nop",
            {**NOP_OK, "setup_completed": 0},
            False,
            "setup did not complete in the verifier image",
        ),
        ("oracle", ORACLE_OK, True, "the gold patch applies and every selected test passes"),
        (
            "oracle",
            {**ORACLE_OK, "patch_applied": 0},
            False,
            "the gold patch or test.patch does not apply",
        ),
        (
            "oracle",
            {**ORACLE_OK, "fail_to_pass": 0, "fail_to_pass_exit_code": 1},
            False,
            "fail-to-pass tests still fail with the gold patch (exit 1)",
        ),
        (
            "oracle",
            {**ORACLE_OK, "pass_to_pass": 0, "pass_to_pass_exit_code": 1},
            False,
            "pass-to-pass tests fail with the gold patch (exit 1)",
        ),
        (
            "oracle",
            {**ORACLE_OK, "deterministic": 0},
            True,
            "the gold patch applies and every selected test passes",
        ),
        ("determinism", ORACLE_OK, True, "fail-to-pass passed a second time with the gold patch"),
        (
            "determinism",
            {**ORACLE_OK, "deterministic": 0, "fail_to_pass_repeat_exit_code": 1},
            False,
            "fail-to-pass passed once with the gold patch, then failed on the repeat (exit 1)",
        ),
    ],
)
def test_gate_criteria(gate: str, reward: dict[str, Any], ok: bool, detail: str) -> None:
    assert evaluate_gate(gate, reward) == (ok, detail)


def report(**statuses: Status) -> Report:
    result = Report(
        task_id="t", verdict=Verdict.ACCEPTED, runner_version="x", run_id="r", started_at="now"
    )
    for name, status in statuses.items():
        stage = result.stages.get(name)
        stage.status = status
        stage.detail = f"{name} {status.value}"
    return result


ALL_PASSED = {
    name: Status.PASSED
    for name in ("compile", "audit", "build", "smoke", "nop", "oracle", "determinism")
}


@pytest.mark.parametrize(
    ("changes", "verdict", "reason"),
    [
        ({}, Verdict.ACCEPTED, ""),
        ({"audit": Status.SKIPPED}, Verdict.ACCEPTED, ""),
        ({"nop": Status.FAILED}, Verdict.REJECTED, "nop: nop failed"),
        ({"nop": Status.FAILED, "oracle": Status.ERROR}, Verdict.REJECTED, "nop: nop failed"),
        (
            {"build": Status.ERROR, "smoke": Status.SKIPPED},
            Verdict.INFRASTRUCTURE_FAILED,
            "build: build error",
        ),
        ({"determinism": Status.SKIPPED}, Verdict.INFRASTRUCTURE_FAILED, ""),
    ],
)
def test_verdicts(changes: dict[str, Status], verdict: Verdict, reason: str) -> None:
    result = report(**{**ALL_PASSED, **changes})
    assert decide_verdict(result) is verdict
    assert verdict_reason(result) == reason


def test_invalid_stays_invalid() -> None:
    result = report(compile=Status.FAILED)
    result.verdict = Verdict.INVALID
    assert decide_verdict(result) is Verdict.INVALID
    assert Verdict.INVALID.exit_code is ExitCode.INVALID


def test_exit_codes() -> None:
    assert [v.exit_code.value for v in Verdict] == [0, 1, 3, 2]


def test_report_round_trip_and_schema(tmp_path: Path) -> None:
    original = report(**ALL_PASSED)
    write_atomic(tmp_path / "r.json", original.to_json())
    assert load_report(tmp_path / "r.json") == original
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    document = json.loads(original.to_json())
    assert document["schemaVersion"] == 1
    assert list(document["stages"]) == list(ALL_PASSED)
    schema = report_schema()
    assert schema["properties"]["verdict"]["$ref"].endswith("Verdict")


def test_plain_summary_lines() -> None:
    result = report(**{**ALL_PASSED, "nop": Status.FAILED})
    result.verdict = Verdict.REJECTED
    result.reason = "nop: nop failed"
    lines = summary_lines(result)
    assert lines[0] == "t: rejected (nop: nop failed)"
    assert lines[5] == "  nop          failed        0.0s  nop failed"


def test_github_annotation_and_step_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = report(**{**ALL_PASSED, "oracle": Status.FAILED})
    result.verdict = Verdict.REJECTED
    result.reason = "oracle: 100% | broken"
    output = Output()
    output.progress("build", "building")
    output.progress("nop", "running")
    output.summary(result)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "::group::selfbench build"
    assert "::endgroup::" in err
    assert "::error title=selfbench t rejected::oracle: 100%25 | broken" in err
    text = summary.read_text()
    assert text == step_summary(result)
    assert "| oracle | failed | 0.0 | oracle failed |" in text
