"""Progress inside the gates: what a running stage's log shows (runner.runners.progress), and the
watcher that says it as it changes (runner.run.watch)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from runner.model.layout import RunLayout
from runner.model.stages import Stage
from runner.run.state import RunState
from runner.run.watch import QUIET_SECONDS, STILL_SECONDS, ProgressWatcher
from runner.runners.progress import Tally, outcome_of


@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        ("--- PASS: TestAdd0 (0.21s)", "passed"),
        ("    --- FAIL: TestMul/negative (0.00s)", "failed"),
        ("--- SKIP: TestSlow (0.00s)", "skipped"),
        ("tests/test_mul.py::test_mul_0 PASSED                 [ 10%]", "passed"),
        ("tests/test_mul.py::test_mul_1 FAILED                 [ 20%]", "failed"),
        ("tests/test_mul.py::test_x[a-b] SKIPPED (no db)       [ 30%]", "skipped"),
        ("tests/test_mul.py::test_y XFAIL                      [ 40%]", "skipped"),
        ("test_add (tests.test_calc.CalcTest.test_add) ... ok", "passed"),
        ("test_div (tests.test_calc.CalcTest.test_div) ... FAIL", "failed"),
        ("test_io (tests.test_calc.CalcTest.test_io) ... skipped 'no network'", "skipped"),
        ("test tests::adds ... ok", "passed"),
        ("test tests::divides ... FAILED", "failed"),
        ("test tests::slow ... ignored", "skipped"),
        ("    ✓ adds two numbers (3 ms)", "passed"),
        ("    ✕ multiplies (2 ms)", "failed"),
        ("    ○ skipped later", "skipped"),
        ("✔ parses a header (0.41ms)", "passed"),
        ("✖ rejects a bad header (1.2ms)", "failed"),
        ("   \u00d7 vitest failure 4ms", "failed"),
        ("ok 1 - adds", "passed"),
        ("not ok 2 - multiplies", "failed"),
        ("ok 3 - later # SKIP not yet", "skipped"),
        # Lines that say nothing about one test's outcome.
        ("PASS", None),
        ("ok  \texample.com/bench/add\t1.786s", None),
        ("FAIL\texample.com/bench/mul [build failed]", None),
        ("=== RUN   TestAdd0", None),
        ("collected 10 items", None),
        ("Tests:       1 failed, 9 passed, 10 total", None),
    ],
)
def test_one_line_of_a_known_runners_output(line: str, outcome: str | None) -> None:
    assert outcome_of(line) == outcome


def test_a_verifier_log_read_as_it_grows() -> None:
    tally = Tally()
    assert tally.describe() == ""
    tally.feed("selfbench: running fail_to_pass: python -m pytest 'tests/test_mul.py'\n")
    assert tally.describe() == "fail_to_pass: running"
    tally.feed("collected 10 items\n\ntests/test_mul.py ..F")
    # pytest's line grows one character per test before its newline comes.
    assert tally.describe() == "fail_to_pass: 2 passed, 1 failed"
    tally.feed("s.      ")
    assert tally.describe() == "fail_to_pass: 3 passed, 1 failed, 1 skipped"
    tally.feed("                        [100%]\ntests/test_other.py .\n")
    assert tally.describe() == "fail_to_pass: 4 passed, 1 failed, 1 skipped"
    # The next selection starts from nothing.
    tally.feed("selfbench: fail_to_pass exited 1 (not passed)\n")
    tally.feed("selfbench: running pass_to_pass: go test './add'\n--- PASS: TestAdd0 (0.2")
    assert tally.describe() == "pass_to_pass: running"
    tally.feed("1s)\n")
    assert tally.describe() == "pass_to_pass: 1 passed"


def test_the_hack_drivers_exploit_lines() -> None:
    tally = Tally()
    tally.feed("selfbench: exploit 1 of 9: go-exit-in-code\n")
    tally.feed("selfbench: exploit 2 of 9: go-testmain\n")
    assert tally.describe() == "exploit 2 of 9: go-testmain"


@dataclass
class _State:
    """What the watcher reads of a run: its running stages, where their logs are, where lines
    go."""

    layout: RunLayout
    running: set[Stage] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    said: list[tuple[str, str]] = field(default_factory=list)

    def progress(self, stage: str, message: str) -> None:
        self.said.append((stage, message))


def test_the_watcher_says_each_phase_at_once_and_counts_at_most_every_few_seconds(
    tmp_path: Path,
) -> None:
    state = _State(layout=RunLayout(tmp_path))
    watcher = ProgressWatcher(cast(RunState, state))
    nop = tmp_path / "nop"
    agent, verifier = nop / "agent.log", nop / "predicted" / "verifier.log"
    state.running.add(Stage.NOP)
    watcher.poll(now=0.0)
    assert state.said == []  # no log yet: nothing to say
    nop.mkdir()
    agent.write_text("")
    watcher.poll(now=1.0)
    assert state.said[-1] == ("nop", "the agent side")
    # A run made for the stage (here a predicted run) writes below it: the newest log counts.
    verifier.parent.mkdir()
    verifier.write_text("selfbench: running fail_to_pass: go test ./mul\n--- FAIL: TestMul0 (0s)\n")
    os.utime(agent, (1, 1))
    watcher.poll(now=2.0)
    assert state.said[-1] == ("nop", "fail_to_pass: 1 failed")
    with verifier.open("a") as handle:
        handle.write("--- FAIL: TestMul1 (0s)\n")
    watcher.poll(now=2.5)  # a count alone, too soon after the last line
    assert state.said[-1] == ("nop", "fail_to_pass: 1 failed")
    watcher.poll(now=2.0 + QUIET_SECONDS)
    assert state.said[-1] == ("nop", "fail_to_pass: 2 failed")
    count = len(state.said)
    watcher.poll(now=10.0)  # nothing new: nothing said
    assert len(state.said) == count
    with verifier.open("a") as handle:
        handle.write("selfbench: running pass_to_pass: go test ./add\n")
    watcher.poll(now=10.1)  # a new selection: said at once
    assert state.said[-1] == ("nop", "pass_to_pass: running")
    # The verifier's logs copied out at its end are not what it is doing.
    (verifier.parent / "logs").mkdir()
    (verifier.parent / "logs" / "test-stdout.log").write_text("--- PASS: TestX (0s)\n")
    watcher.poll(now=15.0)
    assert state.said[-1] == ("nop", "pass_to_pass: running")
    # A stage that is not running is not followed.
    state.running.discard(Stage.NOP)
    with verifier.open("a") as handle:
        handle.write("--- PASS: TestAdd0 (0s)\n")
    watcher.poll(now=20.0)
    assert state.said[-1] == ("nop", "pass_to_pass: running")


def test_the_terminal_board_shows_each_stage_its_clock_and_what_it_does() -> None:
    import io

    from rich.console import Console

    from runner.cli.output import _Board

    board = _Board()
    board.event("build", "running", "")
    board.said("build", "Step 3/24 : RUN apt-get install")
    board.event("build", "passed", "agent and verifier images ready")
    board.event("nop", "running", "")
    board.said("nop", "fail_to_pass: 2 failed")
    board.said("build", "a late line")  # an ended stage keeps how it ended
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(board)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["build", "passed"]
    assert lines[0].rstrip().endswith("agent and verifier images ready")
    assert lines[1].split()[:2] == ["nop", "running"]
    assert lines[1].rstrip().endswith("fail_to_pass: 2 failed")
    assert " s " in lines[1]
    # Rows in the pipeline's order, as the final table, whichever started first.
    board.event("hack", "running", "")
    board.event("oracle", "running", "")
    board.event("smoke", "passed", "ok")
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(board)
    assert [line.split()[0] for line in out.getvalue().splitlines()] == [
        "build",
        "smoke",
        "nop",
        "oracle",
        "hack",
    ]


def test_a_phase_that_shows_nothing_new_is_said_again_with_how_long(tmp_path: Path) -> None:
    """No wait goes unsaid for long: a test run that prints nothing for a while is said again
    every STILL_SECONDS, with how long it has run and how long its log has been quiet."""
    state = _State(layout=RunLayout(tmp_path))
    watcher = ProgressWatcher(cast(RunState, state))
    log = tmp_path / "oracle" / "verifier.log"
    log.parent.mkdir()
    log.write_text("selfbench: running fail_to_pass: pytest tests/test_slow.py\n")
    state.running.add(Stage.ORACLE)
    watcher.poll(now=100.0)
    assert state.said == [("oracle", "fail_to_pass: running")]
    watcher.poll(now=100.0 + STILL_SECONDS - 1)
    assert len(state.said) == 1
    watcher.poll(now=100.0 + STILL_SECONDS)
    assert state.said[-1] == (
        "oracle",
        f"fail_to_pass: running (still at it: {STILL_SECONDS:.0f} s, no new output for "
        f"{STILL_SECONDS:.0f} s)",
    )
    with log.open("a") as handle:
        handle.write("tests/test_slow.py::test_one still going\n")
    watcher.poll(now=100.0 + 2 * STILL_SECONDS)  # output, but no count: the log is not quiet
    assert state.said[-1] == (
        "oracle",
        f"fail_to_pass: running (still at it: {2 * STILL_SECONDS:.0f} s)",
    )
