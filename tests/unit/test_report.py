"""Report, gate criteria, verdicts and how they are shown (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.base.errors import ExitCode
from runner.base.safeio import write_atomic
from runner.cli.output import Output, step_summary, summary_lines
from runner.model.report import Report, Status, Verdict, load_report, report_schema, write_report
from runner.model.settings import VerifySettings
from runner.model.stages import Skip
from runner.run.reporting import RunRecord, build_report
from runner.run.state import Execution, StageResult


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
    for name in ("compile", "audit", "build", "smoke", "nop", "oracle", "determinism", "hack")
}


def test_exit_codes() -> None:
    assert [v.exit_code.value for v in Verdict] == [0, 1, 3, 2]
    interrupted = report(**ALL_PASSED)
    interrupted.interrupted = True
    assert interrupted.exit_code is ExitCode.INTERRUPTED


def test_report_round_trip_and_schema(tmp_path: Path) -> None:
    original = report(**ALL_PASSED)
    write_report(tmp_path / "r.json", original)
    assert load_report(tmp_path / "r.json") == original
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    document = json.loads(original.to_json())
    assert document["schemaVersion"] == 2
    assert list(document["stages"]) == list(ALL_PASSED)
    schema = report_schema()
    assert schema["properties"]["verdict"]["$ref"].endswith("Verdict")
    write_atomic(tmp_path / "other.txt", "x")
    assert (tmp_path / "other.txt").read_text() == "x"


def test_schema_types_every_stage_data() -> None:
    """No stage's data is an open dict: the schema describes each shape."""
    schema = report_schema()
    definitions = schema["$defs"]
    stages = definitions["Stages"]["properties"]
    for name, ref in stages.items():
        stage = definitions[ref["$ref"].rsplit("/", 1)[-1]]
        data = definitions[stage["properties"]["data"]["$ref"].rsplit("/", 1)[-1]]
        assert data.get("additionalProperties") is not True, name
        assert data["properties"], name
    gate = definitions["GateData"]["properties"]
    assert "reward" in gate and "details" in gate
    assert not any(d.get("additionalProperties") is True for d in definitions.values()), (
        "an untyped dict is left in the report"
    )


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


def _record(stages: dict[str, StageResult]) -> RunRecord:
    record = RunRecord(
        run_id="r",
        started=0.0,
        started_at="2026-12-01T00:00:00Z",
        target=Path("/nowhere"),
        settings=VerifySettings(),
        progress=lambda stage, line: None,
    )
    record.compile.set(Status.PASSED, "compiled")
    record.audit.set(Status.PASSED, "audited")
    record.execution = Execution(stages=stages)
    return record


def test_the_verdict_reads_why_a_stage_was_skipped_never_its_words() -> None:
    """An optional hack gate is one skipped for that reason; a stage whose own words happen to
    read the same (here: a census problem that says `--no-hack-gate`) is not optional."""

    def gates(hack: StageResult) -> dict[str, StageResult]:
        ran = {name: StageResult() for name in ("build", "smoke", "nop", "oracle", "determinism")}
        for result in ran.values():
            result.set(Status.PASSED, "ok")
        return {**ran, "hack": hack}

    disabled = StageResult()
    disabled.skipped(Skip.HACK_DISABLED)
    assert build_report(_record(gates(disabled))).verdict is Verdict.ACCEPTED
    lookalike = StageResult()
    lookalike.skipped(Skip.OTHER, "--no-hack-gate")
    assert lookalike.detail == disabled.detail
    report = build_report(_record(gates(lookalike)))
    assert report.verdict is Verdict.INFRASTRUCTURE_FAILED


def test_an_internal_error_lands_on_the_first_stage_that_never_ran() -> None:
    build = StageResult()
    build.set(Status.PASSED, "built")
    record = _record({"build": build})
    record.internal = "internal error: KeyError: 'x'"
    report = build_report(record)
    assert report.stages.build.status is Status.PASSED
    assert report.stages.smoke.status is Status.ERROR
    assert report.stages.smoke.detail.startswith("internal error: KeyError")
    assert report.stages.nop.detail == "not run"


def test_the_summary_is_the_result_on_stdout_unless_json_is(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --json the summary is what `verify` answers (stdout, as for every command);
    with --json stdout holds the JSON alone and the summary goes with the progress."""
    from runner.cli.output import Output
    from runner.cli.verify import _print_report

    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    result = report(**ALL_PASSED)
    result.verdict = Verdict.ACCEPTED
    assert _print_report(result, Output(), None, as_json=False, quiet=False) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "t: accepted" and "nop" in out
    assert err == ""
    _print_report(result, Output(), None, as_json=True, quiet=False)
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] == "accepted"
    assert err.splitlines()[0] == "t: accepted"
