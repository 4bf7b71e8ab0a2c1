"""The flakiness probe's early runs (runner.run.probe): a run graded before the census existed
counts only when the census would grade it alike (judge.graded_alike), checked against the
verifier helper's own sealed grading; and the verifier slots that keep a background run from
delaying the gates that decide the verdict."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.base.resources import verifier_dir
from runner.judge import graded_alike
from runner.model.census import Census
from runner.model.evidence import RunEvidence
from runner.run.slots import VerifierSlots

HELPER = verifier_dir() / "verifier.pl"
IDS = ["t.py::a", "t.py::b", "t.py::c"]
OUTCOMES = ["passed", "failed", "skipped", "error", "xfailed", "xpassed"]


def census(
    f2p: list[str],
    *,
    at_nop: list[str] | None = None,
    asserts: dict[str, int] | None = None,
    runners: list[str] | None = None,
    mode: str = "per-test",
) -> Census:
    return Census.model_validate(
        {
            "failToPass": {
                "mode": mode,
                "runners": ["pytest"] if runners is None else runners,
                "tests": f2p,
                "asserts": asserts or {},
            },
            "passToPass": {"mode": "per-test", "runners": ["pytest"], "tests": ["old.py::c"]},
            "failedAtNop": at_nop or [],
            "runId": "r",
            "runnerVersion": "v",
        }
    )


def helper_judge(
    tmp_path: Path, tests: dict[str, tuple[str, int | None]], sealed: Census | None
) -> RunEvidence:
    """verifier.pl's judgement of one fail-to-pass run of pytest (exit code from its tests)."""
    failing = any(o in ("failed", "error") for o, _ in tests.values())
    document: dict[str, Any] = {
        "run": {
            "seen": {"pytest": 1},
            "finished": {"pytest": 1},
            "runnerStatus": {},
            "tests": [
                {
                    "runner": "pytest",
                    "id": i,
                    "outcome": o,
                    "file": "/app/t.py",
                    **({"asserts": a} if a is not None else {}),
                }
                for i, (o, a) in tests.items()
            ],
        },
        "context": {
            "kind": "f2p",
            "exit": 1 if failing else 0,
            "mode": "per-test",
            "runners": ["pytest"],
            "attribution": [],
            "sealed": sealed.model_dump(mode="json", by_alias=True) if sealed else None,
        },
    }
    path = tmp_path / "judge.json"
    path.write_text(json.dumps(document))
    done = subprocess.run(
        ["perl", str(HELPER), "judge", str(path)], capture_output=True, text=True, check=True
    )
    return RunEvidence.model_validate(json.loads(done.stdout))


run_tests = st.dictionaries(
    st.sampled_from(IDS),
    st.tuples(st.sampled_from(OUTCOMES), st.sampled_from([None, 0, 2])),
    min_size=1,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tests=run_tests,
    required=st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True),
    at_nop=st.lists(st.sampled_from(IDS), max_size=2, unique=True),
    asserted=st.lists(st.sampled_from(IDS), max_size=2, unique=True),
)
def test_a_run_the_census_would_grade_otherwise_never_counts(
    tmp_path: Path,
    tests: dict[str, tuple[str, int | None]],
    required: list[str],
    at_nop: list[str],
    asserted: list[str],
) -> None:
    sealed = census(required, at_nop=at_nop, asserts=dict.fromkeys(asserted, 1))
    early = helper_judge(tmp_path, tests, None)
    why = graded_alike(sealed, {"fail_to_pass": early}, ["fail_to_pass"])
    by_census = helper_judge(tmp_path, tests, sealed)
    if not why:
        assert early.passed
        assert by_census.passed, (by_census.problems, tests, sealed)
    elif early.passed:
        # Whatever graded_alike refuses, the census refuses too (it is no stricter than it).
        assert not by_census.passed, (why, tests, sealed)


def test_the_reasons_a_run_is_verified_again() -> None:
    passed = RunEvidence.model_validate(
        {
            "name": "fail_to_pass",
            "kind": "f2p",
            "exitCode": 0,
            "mode": "per-test",
            "runners": ["pytest"],
            "passed": True,
            "tests": [
                {"id": "t.py::a", "outcome": "passed", "asserts": 0},
                {"id": "t.py::b", "outcome": "skipped"},
            ],
        }
    )
    runs = {"fail_to_pass": passed}
    assert graded_alike(census(["t.py::a"]), runs, ["fail_to_pass"]) == ""
    assert graded_alike(census(["t.py::c"]), runs, ["fail_to_pass"]) == (
        "fail_to_pass did not run t.py::c"
    )
    assert graded_alike(census(["t.py::a"], at_nop=["t.py::b"]), runs, ["fail_to_pass"]) == (
        "fail_to_pass: t.py::b skipped"
    )
    assert graded_alike(census(["t.py::a"], asserts={"t.py::a": 3}), runs, ["fail_to_pass"]) == (
        "fail_to_pass: t.py::a passed without one assertion"
    )
    assert "not the census's (jest)" in graded_alike(
        census(["t.py::a"], runners=["jest"]), runs, ["fail_to_pass"]
    )
    assert graded_alike(census([], mode="exit-code", runners=[]), runs, ["fail_to_pass"]) == (
        "fail_to_pass was judged by per-test, the census by exit-code"
    )
    assert graded_alike(census(["t.py::a"]), runs, ["fail_to_pass", "pass_to_pass"]) == (
        "pass_to_pass left no evidence"
    )
    failed = passed.model_copy(update={"passed": False})
    assert graded_alike(census(["t.py::a"]), {"fail_to_pass": failed}, ["fail_to_pass"]) == (
        "fail_to_pass did not pass"
    )


def test_a_background_run_waits_while_a_gate_that_decides_the_verdict_waits() -> None:
    slots = VerifierSlots(1)
    order: list[str] = []
    held = threading.Event()

    def holder() -> None:
        with slots.slot():
            held.set()
            time.sleep(0.3)
            order.append("first")

    def take(name: str, background: bool) -> None:
        with slots.slot(background=background):
            order.append(name)

    first = threading.Thread(target=holder)
    first.start()
    held.wait()
    # The background run asks first, the oracle's verifier after: the oracle goes first.
    back = threading.Thread(target=take, args=("probe", True))
    back.start()
    time.sleep(0.05)
    fore = threading.Thread(target=take, args=("oracle", False))
    fore.start()
    for thread in (first, back, fore):
        thread.join(5)
    assert order == ["first", "oracle", "probe"]


def test_slots_count_and_refuse_none() -> None:
    slots = VerifierSlots(2)
    with slots.slot(), slots.slot(background=True):
        got = threading.Event()

        def third() -> None:
            with slots.slot(background=True):
                got.set()

        thread = threading.Thread(target=third)
        thread.start()
        assert not got.wait(0.2)
    thread.join(5)
    assert got.is_set()
    with pytest.raises(ValueError, match="at least one slot"):
        VerifierSlots(0)
