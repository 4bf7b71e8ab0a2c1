"""The census (what the verification saw, sealed into the bundle), the runners a test command
names, and `grade`'s refusals before any Docker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner.base.errors import UsageError
from runner.compile.seal import seal
from runner.model.census import (
    Census,
    CensusError,
    build_census,
    read_census,
)
from runner.model.evidence import RunEvidence
from runner.model.report import Report, Verdict
from runner.run.collect import read_verifier
from runner.runners import expected_runners
from tests.helpers import bash_task, compiled

ROOT = Path(__file__).resolve().parents[2]


def exit_code_census() -> Census:
    """The census of an oracle judged by exit code alone (a bash runner's)."""
    return build_census(
        nop_fail_to_pass=None,
        oracle_fail_to_pass=run("fail_to_pass", "f2p", "exit-code", {}),
        oracle_pass_to_pass=None,
        run_id="r1",
        runner_version="v",
    )


def run(name: str, kind: str, mode: str, tests: dict[str, str], **extra: object) -> RunEvidence:
    return RunEvidence.model_validate(
        {
            "name": name,
            "kind": kind,
            "exitCode": 0 if all(o != "failed" for o in tests.values()) else 1,
            "mode": mode,
            "runners": ["pytest"] if mode == "per-test" else [],
            "tests": [{"id": i, "outcome": o} for i, o in tests.items()],
            **extra,
        }
    )


def test_the_census_holds_the_oracles_passing_ids_and_what_failed_at_nop() -> None:
    nop = run(
        "fail_to_pass", "f2p", "per-test", {"t::a": "failed", "t::b": "passed", "t::z": "error"}
    )
    oracle = run(
        "fail_to_pass",
        "f2p",
        "per-test",
        {"t::a": "passed", "t::b": "passed", "t::s": "skipped"},
        selectors=[{"selector": "t.py", "attributed": True, "tests": ["t::a", "t::b", "t::s"]}],
    )
    p2p = run("pass_to_pass", "p2p", "per-test", {"o::x": "passed", "o::y": "skipped"})
    census = build_census(
        nop_fail_to_pass=nop,
        oracle_fail_to_pass=oracle,
        oracle_pass_to_pass=p2p,
        run_id="r",
        runner_version="v",
    )
    assert census.fail_to_pass.tests == ["t::a", "t::b"]  # a skipped test is not required
    assert census.fail_to_pass.selectors == {"t.py": ["t::a", "t::b"]}
    assert census.failed_at_nop == ["t::a"]  # t::z never passed at the oracle: not required
    assert census.pass_to_pass.tests == ["o::x", "o::y"]
    assert read_census(census.to_json().encode()) == census
    assert read_census(b'{"schemaVersion": 1, "sealed": false}\n') is None
    assert read_census(b"not json") is None


def test_exit_code_runs_make_an_exit_code_census_and_no_pass_makes_none() -> None:
    custom = run("fail_to_pass", "f2p", "exit-code", {})
    census = build_census(
        nop_fail_to_pass=None,
        oracle_fail_to_pass=custom,
        oracle_pass_to_pass=run("pass_to_pass", "p2p", "none", {}),
        run_id="r",
        runner_version="v",
    )
    assert census.exit_code_only
    assert census.pass_to_pass.mode == "none"
    with pytest.raises(CensusError, match="no passing test"):
        build_census(
            nop_fail_to_pass=None,
            oracle_fail_to_pass=run("fail_to_pass", "f2p", "per-test", {"t::a": "skipped"}),
            oracle_pass_to_pass=None,
            run_id="r",
            runner_version="v",
        )


def write_runs(directory: Path, *runs: RunEvidence) -> Path:
    evidence = directory / "evidence"
    evidence.mkdir(parents=True)
    for item in runs:
        (evidence / f"{item.name}.json").write_text(item.model_dump_json(by_alias=True))
    return directory


def test_the_summary_and_unstable_ids(tmp_path: Path) -> None:
    directory = write_runs(
        tmp_path,
        run(
            "fail_to_pass",
            "f2p",
            "per-test",
            {"t::a[0x7f01]": "passed"},
            selectors=[{"selector": "t.py", "attributed": True, "ran": 1, "passed": 1}],
        ),
        run("fail_to_pass_repeat", "f2p", "per-test", {"t::a[0x7f02]": "passed"}),
    )
    summary = read_verifier(directory).summary
    assert summary is not None and summary.mode == "per-test" and summary.note is None
    assert [(s.selector, s.ran, s.passed) for s in summary.selectors] == [("t.py", 1, 1)]
    assert read_verifier(directory).ids_changed == ["t::a[0x7f01]", "t::a[0x7f02]"]
    assert read_verifier(tmp_path / "nothing").summary is None


def test_sealing_a_compiled_bundle_copies_it_and_records_the_digest(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    from runner.compile.taskdir import load_authored_task
    from runner.model.settings import CompileOptions

    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=CompileOptions()
    )
    before = (bundle / "tests" / "expected-tests.json").read_bytes()
    census = exit_code_census()
    out = seal(bundle, census, tmp_path / "run" / "bundle")
    assert (bundle / "tests" / "expected-tests.json").read_bytes() == before
    assert read_census((out / "tests" / "expected-tests.json").read_bytes()) == census
    manifest = json.loads((out / ".selfbench-manifest.json").read_text())
    assert manifest["census"]["runId"] == "r1" and len(manifest["census"]["sha256"]) == 64
    original = json.loads((bundle / ".selfbench-manifest.json").read_text())
    assert "census" not in original


def test_a_seal_signs_only_the_compilers_fields(tmp_path: Path) -> None:
    """A bundle's author adds fields to its manifest (here, those of a signed document of
    another kind): the seal drops them, so the runner's key never signs what they chose."""
    task = bash_task(tmp_path)
    from runner.compile.taskdir import load_authored_task
    from runner.model.settings import CompileOptions

    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=CompileOptions()
    )
    path = bundle / ".selfbench-manifest.json"
    planted = {**json.loads(path.read_text()), "kind": "exploit-side", "key": "k", "value": {}}
    path.write_text(json.dumps(planted))
    out = seal(bundle, exit_code_census(), tmp_path / "run" / "bundle")
    manifest = json.loads((out / ".selfbench-manifest.json").read_text())
    assert not {"kind", "key", "value"} & set(manifest)
    assert {"taskId", "seal", "census", "signature"} <= set(manifest)


@pytest.mark.parametrize(
    ("command", "runners"),
    [
        ("pytest {tests}", ["pytest"]),
        ("PYTHONPATH=. /opt/venv/bin/python -m pytest -q {tests}", ["pytest"]),
        ("uv run pytest {tests}", ["pytest"]),
        ("python -m unittest {tests}", ["unittest"]),
        ("python manage.py test {tests}", ["unittest"]),
        ("npx jest {tests}", ["jest"]),
        ("pnpm exec vitest run {tests}", ["vitest"]),
        ("node_modules/.bin/mocha {tests}", ["mocha"]),
        ("bun test {tests}", ["bun"]),
        ("node --test {tests}", ["node-test"]),
        ("go test -race {tests}", ["go"]),
        ("cargo test {tests}", ["cargo"]),
        ("npm test -- {tests}", []),  # found by the evidence it leaves instead
        ("bash tests/run.sh {tests}", []),
        ("make test TESTS={tests}", []),
    ],
)
def test_the_runners_a_command_names(command: str, runners: list[str]) -> None:
    assert expected_runners(command) == runners


def grade_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", "grade", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_grade_refuses_what_is_no_bundle_and_a_missing_patch(tmp_path: Path) -> None:
    patch = tmp_path / "agent.patch"
    patch.write_text("")
    result = grade_cli(str(tmp_path), "--patch", str(patch))
    assert result.returncode == 2
    assert "is neither a compiled bundle (task.toml) nor a run directory" in result.stderr
    task = bash_task(tmp_path / "t")
    from runner.compile.taskdir import load_authored_task
    from runner.model.settings import CompileOptions

    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=CompileOptions()
    )
    result = grade_cli(str(bundle), "--patch", str(tmp_path / "missing.patch"), "--unsealed")
    assert result.returncode == 2
    assert "missing.patch" in result.stderr and "--patch" in result.stderr


def test_grade_refuses_a_bundle_that_does_not_match_its_seal(tmp_path: Path) -> None:
    """A test.sh that writes reward 1, or a task.toml edited to a million MB, was obeyed: the
    digests were computed and never compared with the seal."""
    from runner.compile.taskdir import load_authored_task
    from runner.run.grading import resolve_target

    task = bash_task(tmp_path / "t")
    bundle = compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "b")
    patch = tmp_path / "agent.patch"
    patch.write_text("")
    unsealed = grade_cli(str(bundle), "--patch", str(patch))
    assert unsealed.returncode == 2
    assert "it has no seal (no verification accepted it)" in unsealed.stderr
    census = exit_code_census()
    sealed = seal(bundle, census, tmp_path / "sealed")
    assert resolve_target(sealed).bundle.root == sealed
    test_sh = sealed / "tests" / "test.sh"
    text = test_sh.read_text()
    test_sh.unlink()  # the seal's copy is linked to the compiled bundle's file
    test_sh.write_text(text + "\necho 1 > /logs/verifier/reward.txt\n")
    result = grade_cli(str(sealed), "--patch", str(patch))
    assert result.returncode == 2
    assert "the bundle does not match its seal: tests/test.sh changed after it was sealed" in (
        result.stderr
    )
    (sealed / "tests" / "extra.sh").write_text("true\n")
    test_sh.write_text(text)
    with pytest.raises(UsageError, match=r"tests/extra\.sh was added after it was sealed"):
        resolve_target(sealed)
    assert resolve_target(sealed, unsealed=True).bundle.root == sealed


def test_the_census_keeps_how_many_assertions_each_fail_to_pass_test_passed() -> None:
    oracle = RunEvidence.model_validate(
        {
            "name": "fail_to_pass",
            "kind": "f2p",
            "exitCode": 0,
            "mode": "per-test",
            "runners": ["jest"],
            "tests": [
                {"id": "a > asserts", "outcome": "passed", "asserts": 2},
                {"id": "a > throws only", "outcome": "passed", "asserts": 0},
                {"id": "a > not counted", "outcome": "passed"},
            ],
        }
    )
    census = build_census(
        nop_fail_to_pass=None,
        oracle_fail_to_pass=oracle,
        oracle_pass_to_pass=None,
        run_id="r",
        runner_version="v",
    )
    assert census.fail_to_pass.asserts == {"a > asserts": 2}


def test_expected_failures_are_outcomes_of_their_own(tmp_path: Path) -> None:
    """An xfail or xpass at the oracle is no fail-to-pass test (only "passed" is), but a
    pass-to-pass test may keep ending that way; a selector a run found selecting nothing is read
    back once, whichever run found it."""
    oracle = run("fail_to_pass", "f2p", "per-test", {"t::a": "passed", "t::x": "xfailed"})
    p2p = run("pass_to_pass", "p2p", "per-test", {"o::x": "xfailed", "o::y": "xpassed"})
    census = build_census(
        nop_fail_to_pass=None,
        oracle_fail_to_pass=oracle,
        oracle_pass_to_pass=p2p,
        run_id="r",
        runner_version="v",
    )
    assert census.fail_to_pass.tests == ["t::a"]
    assert census.pass_to_pass.tests == ["o::x", "o::y"]
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    missing = {"selector": "t_typo.py", "matched": False, "why": "pytest: no such file"}
    for name in ("fail_to_pass", "fail_to_pass_selector_0"):
        doc = run(name, "f2p", "per-test", {}, selectors=[missing]).model_dump_json(by_alias=True)
        (evidence / f"{name}.json").write_text(doc)
    (evidence / "pass_to_pass.json").write_text(
        run(
            "pass_to_pass", "p2p", "per-test", {}, selectors=[{**missing, "selector": "o.py"}]
        ).model_dump_json(by_alias=True)
    )
    assert [u.sentence() for u in read_verifier(tmp_path).unmatched] == [
        "fail-to-pass selector t_typo.py matched no test (pytest: no such file)",
        "pass-to-pass selector o.py matched no test (pytest: no such file)",
    ]


def test_a_moved_run_is_graded_with_its_own_bundle_never_the_path_it_ran_at(
    tmp_path: Path,
) -> None:
    """A run fetched from a fleet's store names the worker's directories: on a host where that
    path holds another bundle (the same machine, or a planted one), grade used that bundle."""
    import json
    import shutil

    from runner.compile.taskdir import load_authored_task
    from runner.run.grading import resolve_target

    task = bash_task(tmp_path / "t")
    bundle = compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "b")
    ran = tmp_path / "worker" / "run"
    sealed = seal(bundle, exit_code_census(), ran / "bundle")
    (ran / "report.json").write_text(
        json.dumps({"runDir": str(ran), "bundle": str(sealed), "verdict": "accepted"})
    )
    moved = tmp_path / "reader" / "run"
    shutil.copytree(ran, moved, symlinks=True)
    # The path it ran at still holds a bundle here; the copy's own is the one graded.
    assert resolve_target(moved).bundle.root == moved / "bundle"
    shutil.rmtree(moved / "bundle")
    assert sealed.is_dir()
    with pytest.raises(UsageError, match="the run's bundle is gone"):
        resolve_target(moved)


def accepted_run_dir(tmp_path: Path) -> tuple[Path, Path, Report]:
    """A run directory as an accepted verify leaves it, without Docker: its authored task, its
    sealed bundle (<run>/bundle, returned) and a report (returned, not yet written)."""
    from runner.compile.taskdir import load_authored_task, write_authored
    from runner.model.layout import RunLayout

    authored = load_authored_task(bash_task(tmp_path / "t").directory)
    run = tmp_path / "run"
    own = seal(
        compiled(authored, repo=None, out=tmp_path / "b"), exit_code_census(), run / "bundle"
    )
    write_authored(authored, RunLayout(run).authored)
    made = Report(
        task_id=authored.definition.task_id,
        verdict=Verdict.ACCEPTED,
        runner_version="x",
        run_id="r1",
        started_at="now",
        run_dir=str(run),
        bundle=str(own),
    )
    return run, own, made


def test_grade_review_and_export_take_the_run_s_own_bundle_never_one_its_report_names(
    tmp_path: Path,
) -> None:
    """A report.json is a file anyone may edit: naming /etc as its bundle, `review` copied the
    host's files into the reviewer's hand-off directory; naming another sealed bundle on this
    host, `grade` graded with it. Each reader now takes <run>/bundle or refuses, naming the
    field."""
    from runner.compile.taskdir import load_authored_task
    from runner.model.layout import RunLayout
    from runner.present.export import accepted_run
    from runner.run.grading import resolve_target
    from runner.run.review import write_review

    run, own, made = accepted_run_dir(tmp_path)
    authored = load_authored_task(RunLayout(run).authored)
    other = seal(
        compiled(authored, repo=None, out=tmp_path / "b2"), exit_code_census(), tmp_path / "o"
    )
    host = tmp_path / "host"  # stands for /etc: a directory that is no bundle at all
    host.mkdir()
    (host / "shadow").write_text("root:secret\n")
    for named in (host, other):
        made.bundle = str(named)
        (run / "report.json").write_text(made.to_json())
        out = tmp_path / f"review-{named.name}"
        for read in (
            lambda: resolve_target(run),
            lambda: write_review(run, out),  # noqa: B023 (called within this iteration)
            lambda: accepted_run(run),
        ):
            with pytest.raises(UsageError, match="outside its run directory") as raised:
                read()
            assert raised.value.field == "bundle"
        assert not out.exists()
    made.bundle = str(own)
    (run / "report.json").write_text(made.to_json())
    assert resolve_target(run).bundle.root == own
    index = write_review(run, tmp_path / "review")
    assert index["taskId"] == authored.definition.task_id
    assert not any("shadow" in p.name for p in (tmp_path / "review").rglob("*"))
    assert accepted_run(run).bundle == own
