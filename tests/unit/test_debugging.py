"""The pure parts of debugging a red task: the HTML report, the debug session, the logs view."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from runner.base.errors import UsageError
from runner.model.report import Report, Status, Verdict
from runner.plan.debug import _failing_command, first_red, plan_debug
from runner.present.html import ReportView, ansi_html, dockerfile_line, render_html, step_source
from runner.present.runlogs import follow, stage_logs

EXTERNAL = re.compile(
    r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//|ftp:)|<script|<link|@import|url\(""", re.I
)


def report(**stages: tuple[Status, str]) -> Report:
    made = Report(
        task_id="t", verdict=Verdict.REJECTED, runner_version="x", run_id="r", started_at="now"
    )
    for name, (status, detail) in stages.items():
        stage = made.stages.get(name)
        stage.status, stage.detail = status, detail
    return made


def test_ansi_colours_become_spans_and_everything_else_is_escaped() -> None:
    out = ansi_html("\x1b[31mFAIL\x1b[0m <b>&\x1b[2K")
    assert out == (
        '<span style="color: #c0392b; text-decoration-color: #c0392b">FAIL</span> &lt;b&gt;&amp;'
    )
    assert ansi_html("\x1b[1;32mok") == (
        '<span style="color: #1e8449; text-decoration-color: #1e8449; font-weight: bold">ok</span>'
    )
    # 256 and true colour; a window title (ending with BEL) and a hyperlink are dropped: a log
    # is the task's output, and its link could be `javascript:`.
    shown = ansi_html(
        "\x1b[38;5;208ma\x1b[0m\x1b]0;title\x07 \x1b]8;;javascript:alert(1)\x1b\\x\x1b]8;;\x1b\\"
    )
    assert shown == '<span style="color: #ff8700; text-decoration-color: #ff8700">a</span> x'
    assert ansi_html("<i>plain</i>") == "&lt;i&gt;plain&lt;/i&gt;"


def test_a_failing_step_is_found_in_its_dockerfile_and_named_by_its_source() -> None:
    dockerfile = (
        "FROM x\n# c\nRUN chmod 0755 /a \\\n    && cd '/app' \\\n"
        "    && /opt/selfbench-environment/setup.sh\n"
    )
    step = "RUN chmod 0755 /a     && cd '/app'     && /opt/selfbench-environment/setup.sh"
    assert dockerfile_line(dockerfile, step) == 3
    assert dockerfile_line(dockerfile, "RUN other") is None
    assert step_source(step) == "setupCommand"
    assert step_source("RUN bash /opt/selfbench-environment/root-setup.sh") == (
        "environment.rootSetupCommand"
    )
    assert "toolchain `go`" in step_source("RUN bash /opt/selfbench-toolchains/go.sh")
    assert "runner" in step_source("RUN apt-get update")


def test_report_html_is_self_contained_and_escapes_what_it_shows() -> None:
    made = report(build=(Status.FAILED, "<script>alert(1)</script> https://x.invalid/a"))
    made.stages.build.data.failed_step = "RUN /opt/selfbench-environment/setup.sh"
    made.stages.build.data.tail = ['<img src="https://x.invalid/p.png">']
    page = render_html(ReportView(report=made))
    assert EXTERNAL.search(page) is None
    assert "&lt;script&gt;" in page and 'id="verdict">rejected<' in page


def test_debug_opens_the_first_red_stage_and_reads_both_run_forms() -> None:
    assert first_red(report(nop=(Status.FAILED, "x"), oracle=(Status.FAILED, "y"))) == "nop"
    assert first_red(report(determinism=(Status.FAILED, "z"))) == "oracle"
    assert first_red(report()) is None
    assert _failing_command('RUN ["bash", "-c", "echo hi"]') == "bash -c 'echo hi'"
    assert _failing_command("RUN   make  all") == "make  all"
    with pytest.raises(UsageError, match="nothing is red"):
        plan_debug(report(), None, Path("/r"), stage=None, debug_id="d", owner="o", proxies=[])
    with pytest.raises(UsageError, match=r"plan\.json is missing"):
        plan_debug(
            report(build=(Status.PASSED, ""), nop=(Status.FAILED, "x")),
            None,
            Path("/r"),
            stage=None,
            debug_id="d",
            owner="o",
            proxies=[],
        )


def test_a_build_session_opens_only_an_image_id_and_its_script_checks_the_label() -> None:
    """report.json is a file anyone may edit: its last good layer goes to `docker run`, so it
    must be an image id (not a flag, not a name the engine would pull), and the script refuses
    an image this runner did not label."""
    made = report(build=(Status.FAILED, "setup failed"))
    data = made.stages.build.data
    data.failed_step, data.failed_image = "RUN ./setup.sh", "agent"
    for forged in ("--privileged", "alpine:latest", "sha256:" + "0" * 63 + " -v/:/h"):
        data.last_good_layer = forged
        with pytest.raises(UsageError, match="is not an image id") as caught:
            plan_debug(made, None, Path("/r"), stage=None, debug_id="d", owner="o", proxies=[])
        assert caught.value.path == "/r/report.json"
    layer = "sha256:" + "ab" * 32
    data.last_good_layer = layer
    session = plan_debug(made, None, Path("/r"), stage=None, debug_id="d", owner="o", proxies=[])
    assert session.images == [layer]
    script = session.script().splitlines()
    check = next(i for i, line in enumerate(script) if "image inspect" in line)
    assert check < next(i for i, line in enumerate(script) if line.startswith("trap "))
    assert '"org.selfbench.runner"' in script[check] and "exit 2" in script[check]


def test_logs_put_red_stages_first(tmp_path: Path) -> None:
    (tmp_path / "nop").mkdir()
    log = tmp_path / "nop" / "verifier.log"
    log.write_text("a\nb\n")
    doc = json.loads(report(nop=(Status.FAILED, "red"), build=(Status.PASSED, "ok")).to_json())
    doc["stages"]["nop"]["logs"] = [str(log), str(tmp_path / "nop" / "agent.patch")]
    (tmp_path / "report.json").write_text(json.dumps(doc))
    shown = stage_logs(tmp_path)
    assert shown[0].stage == "nop" and shown[0].files == [log]
    assert [s.stage for s in stage_logs(tmp_path, stage="build")] == ["build"]


def test_logs_read_a_forged_run_directory_as_input(tmp_path: Path) -> None:
    """A run directory is files anyone may have written: a report naming a host file as a
    stage log, a log that is a link out, a FIFO in a stage directory or as report.json, a
    report too large to read: each is refused within bounded bytes, nothing hangs, and no byte
    from outside the run directory is shown."""
    import os

    from runner.model.layout import MAX_REPORT_BYTES
    from runner.present.runlogs import run_report, tail_lines

    secret = tmp_path / "secret.log"
    secret.write_text("the reader's own secret\n")
    run = tmp_path / "run"
    (run / "nop").mkdir(parents=True)
    (run / "nop" / "verifier.log").symlink_to(secret)
    os.mkfifo(run / "nop" / "stuck.log")
    (run / "nop" / "agent.log").write_text("own line\n")
    doc = json.loads(report(nop=(Status.FAILED, "red")).to_json())
    doc["stages"]["nop"]["logs"] = [
        str(secret),
        str(run / "nop" / "verifier.log"),
        str(run / "nop" / "stuck.log"),
        str(run / "nop" / "agent.log"),
    ]
    (run / "report.json").write_text(json.dumps(doc))
    (nop,) = [s for s in stage_logs(run) if s.stage == "nop"]
    said = {path.name: tail_lines(run, path, 0)[0] for path in nop.files}
    assert said["secret.log"] == [f"[not read: {secret} is not in {run}]"]
    assert (
        said["verifier.log"][0].startswith("[not read: ")
        and "symbolic link" in (said["verifier.log"][0])
    )
    assert said["stuck.log"][0].startswith("[not read: ") and "FIFO" in said["stuck.log"][0]
    assert said["agent.log"] == ["own line"]
    assert all("secret" not in line for lines in said.values() for line in lines[1:])
    # A run in progress (no report yet): only its regular files are listed and followed.
    (run / "report.json").unlink()
    listed = [p.name for s in stage_logs(run) for p in s.files]
    assert listed == ["agent.log"]
    seen: list[tuple[str, str]] = []
    os.mkfifo(run / "report.json")  # `logs --follow` waits for a report: a FIFO is none
    assert run_report(run) is None
    assert not follow(run, lambda n, line: seen.append((n, line)), timeout=1)
    assert seen == [("nop/agent.log", "own line")]
    (run / "report.json").unlink()
    with (run / "report.json").open("wb") as big:  # sparse: no disk is spent
        big.truncate(MAX_REPORT_BYTES + 1)
    assert run_report(run) is None


def test_logs_of_a_run_directory_given_relative_read_its_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`logs runs/t/<id>` from the directory above: the report's absolute log paths are this
    run's, and a relative run directory reads them as an absolute one does."""
    from runner.present.runlogs import tail_lines

    run = tmp_path / "runs" / "t" / "r1"
    (run / "nop").mkdir(parents=True)
    (run / "nop" / "verifier.log").write_text("one\ntwo\n")
    doc = json.loads(report(nop=(Status.FAILED, "red")).to_json())
    doc["runDir"] = str(run)
    doc["stages"]["nop"]["logs"] = [str(run / "nop" / "verifier.log")]
    (run / "report.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    relative = Path("runs/t/r1")
    (nop,) = [s for s in stage_logs(relative) if s.stage == "nop"]
    assert [tail_lines(relative, path, 1) for path in nop.files] == [(["two"], 1)]
    seen: list[tuple[str, str]] = []
    assert follow(relative, lambda n, line: seen.append((n, line)), lines=1, timeout=5)
    assert seen == [("nop/verifier.log", "two")]


def test_follow_sees_new_files_and_lines_until_the_report(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    def write() -> None:
        (tmp_path / "build").mkdir()
        with (tmp_path / "build" / "agent.log").open("w") as handle:
            handle.write("Step 1/2 : FROM x\nStep 2/2 : RUN y")
            handle.flush()
            time.sleep(0.5)
            handle.write("\nSuccessfully built\n")
        (tmp_path / "report.json").write_text("{}")

    writer = threading.Thread(target=write)
    writer.start()
    assert follow(
        tmp_path, lambda name, line: seen.append((name, line)), poll_seconds=0.05, timeout=30
    )
    writer.join()
    assert seen == [
        ("build/agent.log", "Step 1/2 : FROM x"),
        ("build/agent.log", "Step 2/2 : RUN y"),
        ("build/agent.log", "Successfully built"),
    ]


def test_follow_starts_with_the_last_lines_of_each_stage_log_not_the_runners_own(
    tmp_path: Path,
) -> None:
    """`logs --follow --lines N` starts as `tail -n N -f` does, for the stages' logs only (the
    runner's debug log is not a stage's output), and `--stage` keeps one stage's."""
    (tmp_path / "nop").mkdir()
    (tmp_path / "oracle").mkdir()
    (tmp_path / "nop" / "verifier.log").write_text("one\ntwo\nthree\nfour\nfiv")
    (tmp_path / "oracle" / "verifier.log").write_text("oracle line\n")
    (tmp_path / "runner.log").write_text("DEBUG urllib3 polling\n" * 50)
    (tmp_path / "report.json").write_text("{}")
    seen: list[tuple[str, str]] = []
    assert follow(tmp_path, lambda n, line: seen.append((n, line)), lines=2, timeout=5)
    assert seen == [
        ("nop/verifier.log", "three"),
        ("nop/verifier.log", "four"),
        ("oracle/verifier.log", "oracle line"),
        ("nop/verifier.log", "fiv"),
    ]
    seen.clear()
    assert follow(
        tmp_path, lambda n, line: seen.append((n, line)), lines=1, stage="oracle", timeout=5
    )
    assert seen == [("oracle/verifier.log", "oracle line")]


def test_a_red_hack_gate_opens_the_verifier_of_the_exploit_that_won(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from runner.cli.main import run_cli
    from runner.model.report import ExploitResult
    from runner.plan.types import VerifyPlan
    from tests.helpers import bash_task

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = bash_task(tmp_path)
    with CliRunner().isolation() as (out, _, _):
        assert (
            run_cli(["verify", str(task.directory), "--plan", "--logs", str(tmp_path / "r")]) == 0
        )
        sys.stdout.flush()
        plan = VerifyPlan.model_validate_json(out.getvalue())
    made = report(
        build=(Status.PASSED, ""),
        nop=(Status.PASSED, ""),
        oracle=(Status.PASSED, ""),
        determinism=(Status.PASSED, ""),
        hack=(Status.FAILED, "the verifier can be gamed: exploit held-out-overwrite ..."),
    )
    made.stages.hack.data.exploits = [
        ExploitResult(name="runner-exit-zero", family="generic", summary="s", outcome="resisted"),
        ExploitResult(
            name="held-out-overwrite", family="generic", summary="s", outcome="earned-reward"
        ),
    ]
    assert first_red(made) == "hack"
    run_dir = tmp_path / "run"
    session = plan_debug(made, plan, run_dir, stage=None, debug_id="d", owner="o", proxies=[])
    copied = [step for step in session.setup if step[:2] == ["docker", "cp"]]
    assert copied[0][2] == str(run_dir / "hack" / "held-out-overwrite" / "agent.patch")
    assert any("exploit held-out-overwrite verifier" in note for note in session.notes)
    made.stages.hack.data.exploits[1].outcome = "resisted"
    with pytest.raises(UsageError, match="no exploit earned a reward"):
        plan_debug(made, plan, run_dir, stage="hack", debug_id="d", owner="o", proxies=[])


def test_report_html_shows_the_probe_and_the_exploits() -> None:
    from runner.model.report import ExploitResult, ProbeResult

    made = report(determinism=(Status.FAILED, "flaky"), hack=(Status.FAILED, "gamed"))
    made.stages.determinism.data.probe = [
        ProbeResult(
            name="probe-1",
            perturbation="TZ=<+14>-14 (as Pacific/Kiritimati)",
            passed=False,
            what_failed="fail-to-pass",
            failing_selectors=["tests/test_tz.py"],
        )
    ]
    made.stages.determinism.data.perturbations = ["TZ=<+14>-14 (as Pacific/Kiritimati)"]
    made.stages.hack.data.exploits = [
        ExploitResult(
            name="pytest-conftest",
            family="pytest",
            summary="<conftest>",
            outcome="earned-reward",
            discarded=[],
        )
    ]
    page = render_html(ReportView(report=made))
    assert EXTERNAL.search(page) is None
    assert "TZ=&lt;+14&gt;-14 (as Pacific/Kiritimati)" in page
    assert "failed: fail-to-pass" in page and "tests/test_tz.py" in page
    assert "pytest-conftest" in page and "&lt;conftest&gt;" in page and "earned-reward" in page


def test_report_html_shows_the_evidence_per_selector_and_what_the_policy_undid() -> None:
    from runner.model.evidence import (
        Counts,
        EvidenceSummary,
        PolicyChange,
        RunSummary,
        SelectorSummary,
    )
    from runner.model.report import GateData

    made = report(oracle=(Status.FAILED, "fail-to-pass tests still fail"))
    made.stages.oracle.data = GateData(
        evidence=EvidenceSummary(
            mode="per-test",
            runners=["pytest"],
            runs=[
                RunSummary(
                    name="fail_to_pass",
                    passed=False,
                    exit_code=1,
                    complete=False,
                    counts=Counts(passed=1),
                    problems=["pytest did not finish its run (it ended early)"],
                )
            ],
            selectors=[
                SelectorSummary(
                    kind="failToPass",
                    selector="tests/test_<mul>.py",
                    attributed=True,
                    ran=3,
                    passed=1,
                    failed=1,
                    skipped=1,
                    error=0,
                ),
                SelectorSummary(kind="passToPass", selector="-k add", attributed=False),
            ],
        ),
        undone=[
            PolicyChange(
                path="conftest.py", status="A", verdict="undo", reason="a test-runner hook"
            )
        ],
    )
    page = render_html(ReportView(report=made))
    assert EXTERNAL.search(page) is None
    assert "per test, from pytest" in page and "tests/test_&lt;mul&gt;.py" in page
    assert "judged with its selection" in page
    assert "pytest did not finish its run (it ended early)" in page
    assert "conftest.py" in page and "a test-runner hook" in page
    exit_only = report(oracle=(Status.PASSED, "ok"))
    exit_only.stages.oracle.data = GateData(
        evidence=EvidenceSummary(mode="exit-code", note="exit-code evidence only"),
        reward=None,
    )
    exit_only.stages.oracle.data.details = None
    page = render_html(ReportView(report=exit_only))
    assert "exit-code evidence only" in page


def test_report_html_colours_what_each_gate_wants_and_draws_no_bar_for_a_skipped_stage() -> None:
    """A passed nop is green: its reward 0 and its failing fail-to-pass tests are what nop
    wants. A stage skipped after some seconds draws no bar."""
    import re

    from runner.model.evidence import Counts, EvidenceSummary, RunSummary, SelectorSummary
    from runner.model.report import GateData
    from runner.model.reward import Reward

    made = report(
        nop=(Status.PASSED, "fail-to-pass fails"), determinism=(Status.SKIPPED, "skipped: x")
    )
    made.stages.determinism.seconds = 95.0
    made.stages.nop.seconds = 3.0
    made.stages.nop.data = GateData(
        reward=Reward(
            reward=0,
            patch_applied=1,
            fail_to_pass=0,
            pass_to_pass=1,
            deterministic=0,
            setup_completed=1,
        ),
        evidence=EvidenceSummary(
            mode="per-test",
            runners=["pytest"],
            runs=[
                RunSummary(
                    name="fail_to_pass",
                    passed=False,
                    exit_code=1,
                    complete=True,
                    counts=Counts(failed=1),
                    problems=["1 test(s) failed"],
                )
            ],
            selectors=[
                SelectorSummary(
                    kind="failToPass",
                    selector="tests/test_mul.py",
                    attributed=True,
                    ran=1,
                    passed=0,
                    failed=1,
                    skipped=0,
                    error=0,
                )
            ],
        ),
    )
    page = render_html(ReportView(report=made))
    nop = page[page.index('id="gate-nop"') :]
    nop = nop[: nop.index("</table>", nop.index("evidence"))]
    assert 'class="flag0"' not in nop, nop
    assert re.search(r'<td class="flag1">0</td>', nop)  # reward 0: nop's pass
    assert "red-box" not in page[page.index('id="gate-nop"') :][:2000]
    assert "nop wants it to fail" in page
    timeline = page[: page.index('id="gate-nop"')]
    determinism_row = timeline[timeline.index(">determinism<") :]
    determinism_row = determinism_row[: determinism_row.index("</tr>")]
    assert '<div class="bar' not in determinism_row
    nop_row = timeline[timeline.index(">nop<") :]
    assert '<div class="bar passed"' in nop_row[: nop_row.index("</tr>")]


VITEST_RED = """
 RUN  v3.2.7 /app

 \u276f test/repeat.test.js (4 tests | 4 failed) 31ms
   \u00d7 repeat repeats zero 13ms
   \u00d7 repeats 2ms

⎯⎯⎯⎯⎯⎯⎯ Failed Tests 4 ⎯⎯⎯⎯⎯⎯⎯

 FAIL  test/repeat.test.js > repeat repeats zero
AssertionError: expected 'ab' to be 'ababqb' // Object.is equality

 FAIL  test/repeat.test.js > repeats
AssertionError: expected 'ab' to be 'ababab' // Object.is equality

\x1b[32m- Expected\x1b[39m
"""


def red_run(tmp_path: Path) -> Report:
    """A rejected run as the pipeline leaves it: a red oracle whose fail-to-pass run failed
    (one test, beside a canary of its own), a verifier log, and an empty agent log."""
    run_dir = tmp_path / "run"
    logs = run_dir / "oracle" / "logs" / "verifier"
    (logs / "evidence").mkdir(parents=True)
    (logs / "fail_to_pass.log").write_text(VITEST_RED)
    (logs / "evidence" / "fail_to_pass.json").write_text(
        json.dumps(
            {
                "name": "fail_to_pass",
                "kind": "f2p",
                "exitCode": 1,
                "mode": "per-test",
                "passed": False,
                "tests": [{"id": "test/repeat.test.js > repeats", "outcome": "failed"}],
            }
        )
    )
    (logs / "evidence" / "pass_to_pass.json").write_text("{not json")  # a verifier's forgery
    (run_dir / "oracle" / "agent.log").write_text("")
    (run_dir / "oracle" / "verifier.log").write_text("selfbench: running fail_to_pass\n")
    made = report(
        nop=(Status.PASSED, "fail-to-pass fails"),
        oracle=(Status.FAILED, "fail-to-pass tests still fail with the gold patch"),
    )
    made.run_dir = str(run_dir)
    made.stages.oracle.logs = [str(run_dir / "oracle" / n) for n in ("agent.log", "verifier.log")]
    return made


def test_a_red_report_opens_on_the_failing_test_and_why(tmp_path: Path) -> None:
    from runner.present.runlogs import report_view

    made = red_run(tmp_path)
    view = report_view(made)
    failure = view.failure
    assert failure is not None
    assert (failure.stage, failure.run, failure.tests) == (
        "oracle",
        "fail_to_pass",
        ["test/repeat.test.js > repeats"],
    )
    # The excerpt starts where the failing test (not its canary) is named, and says why.
    assert failure.excerpt[1].endswith("FAIL  test/repeat.test.js > repeats")
    assert "expected 'ab' to be 'ababab'" in failure.excerpt[2]
    assert failure.links[0] == "oracle/logs/verifier/fail_to_pass.log"
    # No empty log box: the agent's empty log is not shown.
    assert [e.path for e in view.excerpts["oracle"]] == ["oracle/verifier.log"]
    page = render_html(view)
    assert EXTERNAL.search(page) is None
    # The failure comes first: before the stage table, with the failing assertion.
    assert page.index('id="failure"') < page.index('id="stages"')
    assert page.index("to be &#x27;ababab&#x27;") < page.index('id="stages"')
    assert '<a href="oracle/logs/verifier/fail_to_pass.log">' in page
    assert '<a href="#stage-oracle">oracle</a>' in page
    # A log the verifier left as a link (out of the run directory) is not read.
    log = tmp_path / "run" / "oracle" / "logs" / "verifier" / "fail_to_pass.log"
    (tmp_path / "elsewhere.log").write_bytes(log.read_bytes())
    log.unlink()
    log.symlink_to(tmp_path / "elsewhere.log")
    linked = report_view(made).failure
    assert linked is not None and linked.excerpt == [] and linked.tests == failure.tests


def test_the_failure_excerpt_finds_each_runner_s_words() -> None:
    from runner.present.failure import excerpt

    pytest_log = [
        "tests/test_calc.py::test_add PASSED",
        "=================================== FAILURES ===",
        "___________________________ test_mul ___________________________",
        "    def test_mul():",
        ">       assert mul(2, 3) == 6",
        "E       assert 5 == 6",
    ]
    assert excerpt(pytest_log, ["tests/test_calc.py::test_mul"])[0] == pytest_log[1]
    assert "E       assert 5 == 6" in excerpt(pytest_log, ["tests/test_calc.py::test_mul"])
    go_log = ["=== RUN   TestMul", "    mul_test.go:8: got 5, want 6", "--- FAIL: TestMul (0.00s)"]
    assert excerpt(go_log, ["example.com/calc/mul.TestMul"])[-1] == go_log[-1]
    # No test named: the first line that says why; nothing at all: nothing.
    assert excerpt(["selfbench: running", "ok", "Error: boom"], [])[-1] == "Error: boom"
    assert excerpt(["all good"], ["x"]) == []
