"""scripts/flake.py: each chosen test run N times, two at a time; a test whose runs differ is
reported, and the check fails."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def flake() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flake", ROOT / "scripts" / "flake.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["flake"] = module
    spec.loader.exec_module(module)
    return module


def test_copies_of_a_test_are_one_test_with_its_outcomes(flake: ModuleType, tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(
        textwrap.dedent(
            """\
            <testsuites><testsuite name="pytest">
            <testcase classname="tests.x" name="test_a[1-3]" time="1.5"/>
            <testcase classname="tests.x" name="test_a[2-3]" time="2.5"/>
            <testcase classname="tests.x" name="test_a[3-3]" time="0.5"/>
            <testcase classname="tests.x" name="test_b[go-1-2]" time="1">
              <failure message="AssertionError: boom&#10;more">trace</failure></testcase>
            <testcase classname="tests.x" name="test_b[go-2-2]" time="1"/>
            <testcase classname="tests.x" name="test_c[1-2]" time="0">
              <skipped message="no engine"/></testcase>
            <testcase classname="tests.x" name="test_c[2-2]" time="0">
              <skipped message="no engine"/></testcase>
            <testcase classname="tests.x" name="test_d[1-2]"><error message="x"/></testcase>
            <testcase classname="tests.x" name="test_d[2-2]"><error message="x"/></testcase>
            </testsuite></testsuites>
            """
        )
    )
    runs = flake.read_report(report)
    assert {name: test.verdict for name, test in runs.items()} == {
        "tests.x::test_a": "stable",
        "tests.x::test_b[go]": "unstable",
        "tests.x::test_c": "skipped",
        "tests.x::test_d": "failing",
    }
    assert runs["tests.x::test_a"].seconds == [1.5, 2.5, 0.5]
    assert runs["tests.x::test_b[go]"].first_failure == "AssertionError: boom"


def test_a_test_that_fails_once_in_five_is_reported(
    flake: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real pytest run of a module whose second run (of five, on two workers) fails: the check
    names that test as unstable and exits 1; the steady test beside it is stable."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent(
            f"""\
            import os

            def test_steady():
                assert True

            def test_second_run_fails():
                for n in range(1, 100):
                    try:
                        os.close(os.open({str(marks)!r} + f"/{{n}}", os.O_CREAT | os.O_EXCL))
                    except FileExistsError:
                        continue
                    assert n != 2, "the second run"
                    return
            """
        )
    )
    status = flake.main(
        ["--count", "5", str(tmp_path / "test_sample.py"), "-p", "no:cacheprovider"]
    )
    out = capsys.readouterr().out
    assert status == 1, out
    assert "unstable 4/5 passed" in out and "test_second_run_fails" in out
    assert "first failure: AssertionError: the second run" in out
    assert "stable   5/5 passed" in out and "test_steady" in out
    assert "flake: 1 of 2 not stable" in out


def test_the_check_wants_a_selection_and_two_runs(flake: ModuleType) -> None:
    with pytest.raises(SystemExit) as no_tests:
        flake.main(["--count", "5"])
    with pytest.raises(SystemExit) as one_run:
        flake.main(["--count", "1", "tests/unit"])
    assert no_tests.value.code == one_run.value.code == 2
