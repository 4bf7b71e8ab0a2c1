"""The verifier helper's grading rules and evidence sessions (dockerfiles/verifier/verifier.pl),
run by the host's perl through its pure entry points, as tables:

- `judge`: one run's evidence against the context it is judged in (kind, exit code, mode,
  census): every rule that fails a run, and the words it says;
- `sessions`: the collector's verified records, by connection and process: which runner
  sessions count, which are tampering, which runner finished or ended abruptly, and go's
  output checked against the reporter inside each test binary;
- `no-match`: what each runner prints when a selector selected nothing.

The collector itself (the socket, the signed records, the command run as the verifier user) runs
as root in the verifier image; the integration tests drive it there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from runner.base.resources import verifier_dir
from runner.model import evidence
from runner.model.evidence import Counts, RunEvidence, SelectorEvidence, StoppedAt

HELPER = verifier_dir() / "verifier.pl"

F2P = ["t.py::a", "t.py::b"]
CENSUS: dict[str, Any] = {
    "sealed": True,
    "failToPass": {"mode": "per-test", "runners": ["pytest"], "tests": F2P, "asserts": {}},
    "passToPass": {"mode": "per-test", "runners": ["pytest"], "tests": ["old.py::c"]},
    "failedAtNop": [],
}


def helper(command: str, document: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / f"{command}.json"
    path.write_text(json.dumps(document))
    result = subprocess.run(
        ["perl", str(HELPER), command, str(path)], capture_output=True, text=True, check=True
    )
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def results(*pairs: tuple[str, str], runner: str = "pytest") -> list[dict[str, str]]:
    return [{"runner": runner, "id": i, "outcome": o, "file": "/app/t.py"} for i, o in pairs]


def judge(
    tmp_path: Path,
    run: dict[str, Any],
    *,
    kind: str = "f2p",
    exit_code: int = 0,
    sealed: dict[str, Any] | None = None,
    attribution: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    base = {"seen": {"pytest": 1}, "finished": {"pytest": 1}, "runnerStatus": {}}
    return helper(
        "judge",
        {
            "run": {**base, **run},
            "context": {
                "kind": kind,
                "exit": exit_code,
                "mode": "per-test",
                "runners": ["pytest"],
                "attribution": attribution or [],
                "sealed": sealed,
            },
        },
        tmp_path,
    )


PASSED = results(("t.py::a", "passed"), ("t.py::b", "passed"))

# (name, run, options, the problems' words: each must start one problem, in order; [] = passed)
RULES: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    ("every expected test passed", {"tests": PASSED}, {"sealed": CENSUS}, []),
    (
        "an expected test that did not run",
        {"tests": results(("t.py::a", "passed"))},
        {"sealed": CENSUS},
        ["1 expected test(s) did not run: t.py::b"],
    ),
    (
        "a skipped fail-to-pass test",
        {"tests": results(("t.py::a", "passed"), ("t.py::b", "skipped"))},
        {"sealed": CENSUS},
        [
            '1 expected test(s) did not pass (only "passed" passes a fail-to-pass test): t.py::b '
            "(skipped)"
        ],
    ),
    (
        "an expected failure (pytest.xfail() from the code) is no pass",
        {"tests": results(("t.py::a", "xfailed"), ("t.py::b", "xpassed"))},
        {"sealed": CENSUS},
        [
            '2 expected test(s) did not pass (only "passed" passes a fail-to-pass test): '
            "t.py::a (xfailed), t.py::b (xpassed)"
        ],
    ),
    (
        "a pass-to-pass test may skip or fail expectedly",
        {"tests": results(("old.py::c", "xfailed"))},
        {"sealed": CENSUS, "kind": "p2p"},
        [],
    ),
    (
        "a failed test, and the exit code agreeing",
        {"tests": results(("t.py::a", "passed"), ("t.py::b", "failed"))},
        {"sealed": CENSUS, "exit_code": 1},
        ["1 test(s) failed: t.py::b"],
    ),
    (
        "exit 0 with a failure reported",
        {"tests": results(("t.py::a", "passed"), ("t.py::b", "failed"))},
        {"sealed": CENSUS},
        ["1 test(s) failed: t.py::b", "exit 0 but failures were reported"],
    ),
    (
        "a non-zero exit with no failure",
        {"tests": PASSED},
        {"sealed": CENSUS, "exit_code": 2},
        ["the runner exited 2 although no test failed"],
    ),
    (
        "no evidence at all is never a pass",
        {"tests": [], "seen": {}, "finished": {}},
        {"sealed": CENSUS},
        ["no per-test results from pytest", "2 expected test(s) did not run"],
    ),
    (
        "a runner that did not finish",
        {"tests": PASSED, "finished": {}},
        {"sealed": CENSUS},
        ["pytest did not finish its run (it ended early)"],
    ),
    (
        "a runner whose process ended without shutting down",
        {"tests": PASSED, "finished": {}, "abrupt": {"pytest": "pid 7"}},
        {"sealed": CENSUS},
        ["the pytest process ended without shutting down (pid 7: os._exit"],
    ),
    (
        "a finish status that says failure although every test passed",
        {"tests": PASSED, "runnerStatus": {"pytest": "1"}},
        {"sealed": CENSUS},
        ["pytest ended with status 1 although none of its tests failed"],
    ),
    (
        "a finish status of 0 with failed tests",
        {
            "tests": results(("t.py::a", "failed"), ("t.py::b", "passed")),
            "runnerStatus": {"pytest": "0"},
        },
        {"sealed": CENSUS, "exit_code": 1},
        [
            "1 test(s) failed: t.py::a",
            "pytest ended with status 0 although 1 of its test(s) failed",
        ],
    ),
    (
        "results rewritten in the process come first",
        {"tests": PASSED, "tampered": ["the matcher toBe (pid 3)"]},
        {"sealed": CENSUS},
        ["the runner's results were rewritten while the tests ran: the matcher toBe"],
    ),
    (
        "a test reported twice with two outcomes",
        {"tests": PASSED, "duplicates": ["t.py::b (passed, then failed)"]},
        {"sealed": CENSUS},
        ["a test was reported twice with two outcomes (a forged record): t.py::b"],
    ),
    (
        "a plugin the verifier cannot vouch for",
        {"tests": PASSED, "planted": ["/tmp/x/plugin.py"]},
        {"sealed": CENSUS},
        ["a test-runner plugin was loaded from a file that was not in the prepared tree"],
    ),
    (
        "go's output disagreeing with the reporter inside its binary",
        {"tests": PASSED, "channel_problems": ["the go test output reports what ..."]},
        {"sealed": CENSUS},
        ["the go test output reports what"],
    ),
    (
        "a selector that selected nothing names itself",
        {"tests": []},
        {
            "attribution": [
                {
                    "selector": "t.py::zz",
                    "matched": False,
                    "why": "pytest: ERROR: not found: t.py::zz",
                }
            ],
            "exit_code": 4,
        },
        [
            "fail-to-pass selector t.py::zz matched no test (pytest: ERROR: not found: t.py::zz)",
            "the runner exited 4 although no test failed",
        ],
    ),
    (
        "a run the hack gate stopped at its first failure says no more",
        {"tests": results(("t.py::a", "failed")), "stopped": {"runner": "pytest", "id": "t.py::a"}},
        {"sealed": CENSUS, "exit_code": 137},
        ["stopped at its first failed test, t.py::a", "1 test(s) failed: t.py::a"],
    ),
    (
        "before the census: no test passed",
        {"tests": results(("t.py::a", "skipped"))},
        {},
        ["no test passed"],
    ),
]


@pytest.mark.parametrize(("name", "run", "options", "expected"), RULES, ids=[r[0] for r in RULES])
def test_grading_rules(
    name: str, run: dict[str, Any], options: dict[str, Any], expected: list[str], tmp_path: Path
) -> None:
    out = judge(tmp_path, run, **options)
    assert_written_as_read(out)
    problems = out["problems"]
    assert len(problems) == len(expected), problems
    for problem, words in zip(problems, expected, strict=True):
        assert problem.startswith(words), (problem, words)
    assert out["passed"] is (not expected and options.get("exit_code", 0) == 0)


def keys_of(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def assert_written_as_read(document: dict[str, Any]) -> None:
    """The helper's evidence document is what runner.model.evidence reads: every key it writes
    is a field of the model (none the Python side would drop), and it validates."""
    assert set(document) <= keys_of(RunEvidence), set(document) - keys_of(RunEvidence)
    for part, model in (("tests", evidence.TestResult), ("selectors", SelectorEvidence)):
        for item in document[part]:
            assert set(item) <= keys_of(model), (part, set(item) - keys_of(model))
    assert set(document["counts"]) <= keys_of(Counts)
    if "stopped" in document:
        assert set(document["stopped"]) <= keys_of(StoppedAt)
    RunEvidence.model_validate(document)


GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "evidence-run.json"


def test_the_evidence_document_is_the_golden_one(tmp_path: Path) -> None:
    """One run judged, as the helper writes it and the Python side reads it: a change to
    either side's fields shows here (UPDATE_GOLDEN=1 rewrites the file)."""
    import os

    out = judge(
        tmp_path,
        {
            "tests": [
                *results(("t.py::a", "passed"), ("t.py::b", "failed")),
                {"runner": "pytest", "id": "t.py::c", "outcome": "xfailed", "asserts": 2},
            ],
            "versions": {"pytest": "8.3.4"},
        },
        exit_code=1,
        attribution=[
            {
                "selector": "t.py",
                "attributed": True,
                "ran": 3,
                "passed": 1,
                "failed": 1,
                "xfailed": 1,
                "tests": ["t.py::a", "t.py::b", "t.py::c"],
            }
        ],
    )
    text = json.dumps(out, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert_written_as_read(out)
    read = RunEvidence.model_validate(out)
    assert (read.passed, read.exit_code, read.problems) == (False, 1, ["1 test(s) failed: t.py::b"])
    assert read.ids("passed") == ["t.py::a"] and read.tests[2].asserts == 2
    assert read.selectors[0].xfailed == 1 and read.versions == {"pytest": "8.3.4"}


def test_asserted_at_the_oracle_must_assert_again(tmp_path: Path) -> None:
    census = {**CENSUS, "failToPass": {**CENSUS["failToPass"], "asserts": {"t.py::a": 2}}}
    run = {"tests": [{**t, "asserts": 0} for t in PASSED]}
    out = judge(tmp_path, run, sealed=census)
    assert out["problems"] == [
        "1 expected test(s) passed without one assertion (they asserted at the oracle): t.py::a"
    ]


# ---- sessions ----------------------------------------------------------------------------------


def record(conn: int, pid: int, **event: Any) -> dict[str, Any]:
    return {"_conn": conn, "_pid": pid, **event}


def session(conn: int, pid: int, runner: str = "pytest") -> list[dict[str, Any]]:
    """A whole honest session: the process's, the runner's, one passing test, both ends."""
    return [
        record(conn, pid, t="start", runner="python"),
        record(conn, pid, t="start", runner=runner),
        record(conn, pid, t="test", runner=runner, id="t.py::a", outcome="passed"),
        record(conn, pid, t="finish", runner=runner, status=0),
        record(conn, pid, t="finish", runner="python"),
    ]


def sessions(tmp_path: Path, events: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    conns = sorted({(e["_conn"], e["_pid"]) for e in events})
    return helper(
        "sessions",
        {"events": events, "conns": [{"id": c, "pid": p} for c, p in conns], **extra},
        tmp_path,
    )


def test_an_honest_session_counts_and_finishes(tmp_path: Path) -> None:
    out = sessions(tmp_path, session(1, 10))
    assert out["tampered"] == [] and out["finished"] == {"pytest": 1}
    assert out["tests"] == [{"id": "t.py::a", "runner": "pytest", "outcome": "passed"}]


SESSION_RULES: list[tuple[str, list[dict[str, Any]], str]] = [
    (
        "a runner session on a connection without a process session",
        [record(1, 10, t="start", runner="pytest")],
        "a pytest session opened by pid 10 on a connection made after its process started",
    ),
    (
        "a second connection of a process claiming a process session",
        [*session(1, 10)[:2], record(2, 10, t="start", runner="python")],
        "pid 10 opened a python process session on a connection it made late",
    ),
    (
        "two reporters of one runner at once (a stand-in reporter in another process)",
        [*session(1, 10)[:2], *session(2, 11)[:2]],
        "two pytest reporters at once (pid 11 beside pid 10)",
    ),
    (
        "a record from a connection that holds no session",
        [*session(1, 10)[:2], record(2, 11, t="test", runner="pytest", id="x", outcome="passed")],
        "a pytest record from pid 11, which holds no open pytest session",
    ),
    (
        "a second session of one runner in one process",
        [*session(1, 10)[:4], record(1, 10, t="start", runner="pytest")],
        "pid 10 opened a second pytest session",
    ),
    (
        "a tamper record, from anyone",
        [record(3, 12, t="tamper", runner="python", what="a process opened /proc/self/mem")],
        "a process opened /proc/self/mem (pid 12)",
    ),
]


@pytest.mark.parametrize(
    ("name", "events", "words"), SESSION_RULES, ids=[r[0] for r in SESSION_RULES]
)
def test_session_rules(name: str, events: list[dict[str, Any]], words: str, tmp_path: Path) -> None:
    out = sessions(tmp_path, events)
    assert any(t.startswith(words) for t in out["tampered"]), out["tampered"]


def test_sequential_sessions_of_one_runner_are_honest(tmp_path: Path) -> None:
    """`pytest a; pytest b`: two processes, one after the other."""
    out = sessions(tmp_path, [*session(1, 10), *session(2, 11)])
    assert out["tampered"] == [] and out["finished"] == {"pytest": 1}


def test_a_runner_process_that_never_shut_down_ended_abruptly(tmp_path: Path) -> None:
    """os._exit after the runner's own finish: the process session never closed."""
    out = sessions(tmp_path, session(1, 10)[:4])
    assert out["finished"] == {} and out["abrupt"] == {"pytest": "pid 10"}


def go_stream(package: str, *events: tuple[str, str]) -> list[dict[str, Any]]:
    return [
        record(9, 90, runner="go-stream", event={"Action": a, "Package": package, "Test": t})
        for t, a in events
    ] + [record(9, 90, runner="go-stream", event={"Action": "pass", "Package": package})]


def go_reporter(package: str, *events: tuple[str, str, str | None]) -> list[dict[str, Any]]:
    found = [record(5, 50, t="start", runner="go", scope=package)]
    for kind, test, outcome in events:
        found.append(
            record(
                5, 50, t=kind, runner="go", scope=package, id=f"{package} {test}", outcome=outcome
            )
        )
    return found


def test_go_tests_in_the_output_must_have_ended_in_their_binary(tmp_path: Path) -> None:
    stream = go_stream("ex/p", ("TestA", "pass"), ("TestA/sub", "pass"), ("TestB", "pass"))
    honest = go_reporter("ex/p", ("begin", "TestA", None), ("test", "TestA", "passed"))
    honest += go_reporter("ex/p", ("begin", "TestB", None), ("test", "TestB", "passed"))[1:]
    out = sessions(tmp_path, [*honest, *stream], goPackages=["ex/p"])
    assert out["channelProblems"] == []
    assert {t["id"]: t["outcome"] for t in out["tests"]} == {
        "ex/p TestA": "passed",
        "ex/p TestA/sub": "passed",
        "ex/p TestB": "passed",
    }
    # Printed by an init that exits: the binary's reporter never started.
    out = sessions(tmp_path, stream, goPackages=["ex/p"])
    assert out["channelProblems"][0].startswith(
        "the go test output reports what the test framework"
    )
    assert "whose tests never started" in out["channelProblems"][0]
    assert {t["outcome"] for t in out["tests"] if t["id"] != "ex/p TestA/sub"} == {"error"}
    # syscall.Exit under a test: it began and never ended.
    cut = go_reporter("ex/p", ("begin", "TestA", None))
    out = sessions(tmp_path, [*cut, *stream], goPackages=["ex/p"])
    assert "ex/p TestA began and never ended in its binary" in out["channelProblems"][0]
    # The framework saw a failure the output calls a pass: the failure counts.
    failed = go_reporter("ex/p", ("begin", "TestA", None), ("test", "TestA", "failed"))
    failed += go_reporter("ex/p", ("begin", "TestB", None), ("test", "TestB", "passed"))[1:]
    out = sessions(tmp_path, [*failed, *stream], goPackages=["ex/p"])
    assert {t["id"]: t["outcome"] for t in out["tests"]}["ex/p TestA"] == "failed"
    # A package without the reporter (outside the module) is judged by its output alone.
    out = sessions(tmp_path, stream, goPackages=[])
    assert out["channelProblems"] == []


# ---- a selector that selects nothing -----------------------------------------------------------

NOTHING: list[tuple[str, str, bool, str, str | None]] = [
    # (a path-like selector's file must exist: here, one of the host's)
    ("pytest", "/etc/passwd::zz", False, "ERROR: not found: /etc/passwd::zz\n", "pytest: ERROR"),
    ("pytest", "/etc/passwd::a", False, "ERROR: not found: /etc/passwd::zz\n", None),
    ("pytest", "-k zz", True, "collected 0 items\n\n=== no tests ran in 0.01s ===\n", "pytest:"),
    ("pytest", "-k zz", True, "collected 0 items / 1 error\n", None),  # a collection error
    ("jest", "tests/mul", True, "No tests found, exiting with code 1\n", "jest: No tests found"),
    ("vitest", "mul", True, "No test files found, exiting with code 1\n", "vitest: No test files"),
    ("go", "-run=TestZ", True, "testing: warning: no tests to run\nPASS\n", "go: testing: warning"),
    (
        "unittest",
        "tests.test_zz",
        True,
        "ModuleNotFoundError: No module named 'tests.test_zz'\n",
        "unittest: no module named tests.test_zz",
    ),
    ("unittest", "tests.test_a", True, "Ran 0 tests in 0.000s\n\nNO TESTS RAN\n", "unittest:"),
    ("bun", "mul", True, "No tests found!\n", "bun: No tests found!"),
    ("jest", "tests/mul", False, "No tests found, exiting with code 1\n", None),  # not alone
]
# `go test ./... -run TestMul`: each package without TestMul says so while another runs it.
GO_PACKAGES = (
    "testing: warning: no tests to run\nPASS\nok  \texample.com/calc/add\t0.002s\n"
    "--- FAIL: TestMul (0.00s)\nFAIL\tFAIL\texample.com/calc/mul\t0.003s\n"
)


@pytest.mark.parametrize(
    ("runner", "selector", "alone", "log", "words", "ran"),
    [
        *((*row, 0) for row in NOTHING),
        ("go", "TestMul", True, GO_PACKAGES, None, 1),
        ("go", "TestMul", True, GO_PACKAGES, "go: testing: warning", 0),
        # A message that names the selector counts whatever else ran.
        ("node-test", "test/*.zz.js", True, "Could not find 'test/*.zz.js'\n", "node-test:", 3),
    ],
)
def test_what_each_runner_says_when_a_selector_selects_nothing(
    runner: str, selector: str, alone: bool, log: str, words: str | None, ran: int, tmp_path: Path
) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"workdir": ".", "expectedRunners": [runner]}))
    (tmp_path / "run.log").write_text(log)
    result = subprocess.run(
        [
            "perl",
            str(HELPER),
            "no-match",
            str(task),
            runner,
            selector,
            "1" if alone else "0",
            str(tmp_path / "run.log"),
            str(ran),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    why = json.loads(result.stdout)["why"]
    if words is None:
        assert why is None
    else:
        assert why is not None and why.startswith(words), why


def test_a_path_like_selector_that_does_not_exist_selects_nothing(tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"workdir": ".", "expectedRunners": ["pytest"]}))
    (tmp_path / "run.log").write_text("")
    result = subprocess.run(
        [
            "perl",
            str(HELPER),
            "no-match",
            str(task),
            "pytest",
            "tests/test_selfbench_zz.py",
            "0",
            str(tmp_path / "run.log"),
            "0",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout)["why"] == (
        "pytest: no such file or directory: tests/test_selfbench_zz.py"
    )


# ---- which tests a selector selected -----------------------------------------------------------

SELECTS: list[tuple[str, str, list[dict[str, str]], list[str]]] = [
    # A module that failed to import is unittest's _FailedTest, named after its last component.
    (
        "unittest",
        "tests.test_text",
        [
            {"id": "unittest.loader._FailedTest.test_text", "outcome": "error"},
            {"id": "tests.test_other.T.test_a", "outcome": "passed"},
        ],
        ["unittest.loader._FailedTest.test_text"],
    ),
    (
        "unittest",
        "tests.test_text",
        [{"id": "tests.test_text.LabelTest.test_label", "outcome": "passed"}],
        ["tests.test_text.LabelTest.test_label"],
    ),
    # A file that failed to collect is each of its node ids' (the host's /etc/passwd as the file).
    (
        "pytest",
        "/etc/passwd::test_a",
        [
            {"id": "../etc/passwd", "outcome": "error", "file": "/etc/passwd"},
            {"id": "../etc/passwd::test_b", "outcome": "passed", "file": "/etc/passwd"},
        ],
        ["../etc/passwd"],
    ),
    # go: a pattern's packages, by import path.
    (
        "go",
        "example.com/m/pkg/...",
        [
            {"id": "example.com/m/pkg/a TestA", "outcome": "passed", "file": "example.com/m/pkg/a"},
            {"id": "example.com/m/other TestB", "outcome": "passed", "file": "example.com/m/other"},
        ],
        ["example.com/m/pkg/a TestA"],
    ),
    # go: a -run pattern, in every package, level by level over subtests.
    (
        "go",
        "TestMul",
        [
            {"id": "ex/calc/mul TestMul", "outcome": "failed", "file": "ex/calc/mul"},
            {"id": "ex/calc/mul TestMulTable/case", "outcome": "failed", "file": "ex/calc/mul"},
            {"id": "ex/calc/add TestAdd", "outcome": "passed", "file": "ex/calc/add"},
        ],
        ["ex/calc/mul TestMul", "ex/calc/mul TestMulTable/case"],
    ),
    (
        "go",
        "TestAdd|TestEnv",
        [
            {"id": "ex/calc/add TestAdd", "outcome": "passed", "file": "ex/calc/add"},
            {"id": "ex/calc/env TestEnv", "outcome": "failed", "file": "ex/calc/env"},
            {"id": "ex/calc/mul TestMul", "outcome": "failed", "file": "ex/calc/mul"},
        ],
        ["ex/calc/add TestAdd", "ex/calc/env TestEnv"],
    ),
    (
        "go",
        "TestTable/^one$",
        [
            {"id": "ex/p TestTable", "outcome": "passed", "file": "ex/p"},
            {"id": "ex/p TestTable/one", "outcome": "passed", "file": "ex/p"},
            {"id": "ex/p TestTable/one_more", "outcome": "passed", "file": "ex/p"},
        ],
        ["ex/p TestTable", "ex/p TestTable/one"],
    ),
    # jest: a pattern over test file paths.
    (
        "jest",
        "test/repeat",
        [
            {
                "id": "test/repeat.test.js > zero",
                "outcome": "passed",
                "file": "/app/test/repeat.test.js",
            },
            {"id": "test/pad.test.js > pads", "outcome": "passed", "file": "/app/test/pad.test.js"},
        ],
        ["test/repeat.test.js > zero"],
    ),
]


@pytest.mark.parametrize(("runner", "selector", "found", "expected"), SELECTS)
def test_which_tests_a_selector_selected(
    runner: str, selector: str, found: list[dict[str, str]], expected: list[str], tmp_path: Path
) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"workdir": ".", "expectedRunners": [runner]}))
    tests_file = tmp_path / "tests.json"
    tests_file.write_text(json.dumps(found))
    result = subprocess.run(
        ["perl", str(HELPER), "selects", str(task), runner, selector, str(tests_file)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout)["tests"] == expected


def test_every_task_key_the_helper_reads_is_written_by_the_compiler() -> None:
    """tests/selfbench-task.json is written from runner.model.verifiertask.VerifierTask and read
    by the helper as `$task->{key}`: a key the helper reads that the model does not have would
    be undef in Perl (no error, just a rule that never fires)."""
    import re

    from runner.model.verifiertask import VerifierTask

    source = HELPER.read_text()
    read = set(re.findall(r"\$task->\{(\w+)\}", source))
    own = set(re.findall(r"\$task->\{(\w+)\}\s*=[^=~]", source))  # what the helper sets itself
    assert read, "the helper reads no task key: the pattern is out of date"
    assert read - own <= keys_of(VerifierTask), (read - own) - keys_of(VerifierTask)
