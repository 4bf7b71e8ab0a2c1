"""The executor and the pipeline on a fake engine (no Docker): stage order, skips after a
failure, error -> status mapping, unexpected exceptions, interrupts, --keep, one report."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from runner.base.errors import EngineError, ExitCode, Interrupted
from runner.cli.common import _stderr_logging, interrupts
from runner.model.predictions import PatchPredictions
from runner.model.report import Status, Verdict
from runner.model.settings import BuildEnvironment, HackGate, VerifySettings
from runner.plan.inimage import (
    HACK_IN,
    HACK_POLICY_DIR,
    HACK_POLICY_RESULT,
    HAND_OFF_ARCHIVE,
)
from runner.plan.runtime import ExecOutcome
from runner.plan.types import ExecStep
from runner.run.context import ExecutionEnv
from runner.run.pipeline import VerifyOutcome, verify
from runner.run.state import StageEvent, StageListener
from tests.fakes import (
    NOP_REWARD,
    ORACLE_REWARD,
    Action,
    FakeContainer,
    FakeEngine,
    Script,
    collect_patch,
    exits,
    raises,
    runs_until_removed,
    writes_reward,
)
from tests.helpers import bash_task

ENV = ExecutionEnv(proxies={}, extra_ca_pem=None, fetch_artifact=lambda name, arch: Path("/x"))


def settings(tmp_path: Path, **changes: object) -> VerifySettings:
    base: dict[str, object] = {
        "build": BuildEnvironment(base_image="base:1"),
        "logs_root": tmp_path / "runs",
    }
    base.update(changes)
    return VerifySettings(**base)  # type: ignore[arg-type]


def run(
    tmp_path: Path,
    engine: FakeEngine,
    *,
    name: str = "demo-task",
    cpus: float = 1,
    toolchains: list[str] | None = None,
    definition: dict[str, Any] | None = None,
    on_stage: StageListener | None = None,
    **changes: object,
) -> VerifyOutcome:
    extra: dict[str, Any] = {"toolchains": toolchains} if toolchains else {}
    task = bash_task(tmp_path, name=name, resources={"cpus": cpus}, **extra, **(definition or {}))
    return verify(
        task.directory,
        settings(tmp_path, **changes),
        progress=lambda stage, message: None,
        engine_factory=lambda: engine,
        env=ENV,
        on_stage=on_stage,
    )


def statuses(outcome: VerifyOutcome) -> dict[str, str]:
    return {name: stage.status.value for name, stage in outcome.report.stages.items()}


def test_accepted_run_in_order_and_cleaned_up(tmp_path: Path) -> None:
    engine = FakeEngine()
    outcome = run(tmp_path, engine)
    report = outcome.report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert set(statuses(outcome).values()) == {"passed"}
    events = engine.events
    assert events[:2] == ["build agent", "build verifier"]

    def at(prefix: str) -> int:
        return next(i for i, event in enumerate(events) if event.startswith(prefix))

    # The oracle's agent side and the two verifiers; the hack gate's one agent container (every
    # exploit in turn), one verifier for the policy check of every patch, and a verifier per
    # exploit (the fake's check says nothing, so none is decided by the policy alone). The
    # default smoke check runs in the nop verifier, before any test; nop's patch is empty
    # without an agent container.
    created = sorted(e for e in events if e.startswith("create "))
    exploits = [e.name for e in report.stages.hack.data.exploits]
    assert exploits == [
        "runner-exit-zero",
        "held-out-overwrite",
        "harness-rename",
        "harness-rewrite-at-run",
        "reward-file-from-code",
        "harness-memory",
    ]
    assert created == [
        "create determinism/verifier",  # the flakiness probe's one perturbed run (--repeat 1)
        "create hack/agent",
        *["create hack/verifier"] * 7,
        "create nop/verifier",
        "create oracle/agent",
        "create oracle/verifier",
    ]
    # An exploit's verifier runs only once nop has shown that the tests fail on the base.
    assert at("exec hack/verifier as root") > at("exec nop/verifier as root")
    # Every exploit, its collect and the reset after it: one root exec of the driver.
    assert sum(e.startswith("exec hack/driver as root") for e in events) == 1
    assert not any(e.startswith(("exec hack/exploit", "exec hack/collect")) for e in events)
    # The oracle's agent side (the longest path) gets its container before its verifier.
    assert at("create oracle/agent") < at("create oracle/verifier")
    smoke = at("exec smoke/smoke as verifier")
    assert events[smoke].endswith("-nop-verifier-" + report.run_id.rsplit("-", 1)[1])
    for gate in ("nop", "oracle"):
        assert at(f"exec {gate}/verifier as root") > smoke
    assert at("exec oracle/agent as agent") < at("exec oracle/collect as root")
    assert at("exec oracle/collect as root") < at("exec oracle/verifier as root")
    assert not any(e.startswith(("exec nop/agent", "exec nop/collect")) for e in events)
    assert outcome.run_dir is not None
    assert (outcome.run_dir / "nop" / "agent.patch").read_bytes() == b""
    assert engine.live == set()
    assert engine.cleanups == [{"org.selfbench.run": report.run_id}]
    assert outcome.run_dir is not None
    written = json.loads((outcome.run_dir / "report.json").read_text())
    assert written["verdict"] == "accepted"
    assert (outcome.run_dir / "plan.json").is_file()


def test_build_failure_skips_every_gate(tmp_path: Path) -> None:
    outcome = run(tmp_path, FakeEngine(Script(build_fails="agent")))
    report = outcome.report
    assert report.verdict is Verdict.REJECTED
    assert report.stages.build.status is Status.FAILED
    assert report.stages.build.data.debug_command == "docker run -it --rm abc123abc123 bash"
    for name in ("smoke", "nop", "oracle"):
        assert report.stages.get(name).detail == "skipped: build did not pass"
    assert report.stages.determinism.status is Status.SKIPPED


def test_smoke_failure_skips_the_verifiers(tmp_path: Path) -> None:
    engine = FakeEngine(Script(actions={"smoke/smoke": exits(1)}))
    outcome = run(tmp_path, engine)
    assert statuses(outcome) == {
        "compile": "passed",
        "audit": "passed",
        "build": "passed",
        "smoke": "failed",
        "nop": "skipped",
        "oracle": "skipped",
        "determinism": "skipped",
        "hack": "skipped",
    }
    # The hack gate's agent side was running when smoke went red: it stopped, for smoke.
    assert outcome.report.stages.nop.detail == "skipped: smoke did not pass"
    assert outcome.report.stages.hack.detail == "skipped: smoke did not pass"
    assert outcome.report.stages.determinism.detail == "skipped: smoke did not pass"
    assert not any("verifier as root" in e for e in engine.events)
    assert engine.live == set()


def test_with_keep_going_a_red_nop_does_not_stop_the_oracle(tmp_path: Path) -> None:
    red = {**NOP_REWARD, "fail_to_pass": 1}
    engine = FakeEngine(Script(actions={"nop/verifier": writes_reward(red)}))
    outcome = run(tmp_path, engine, keep_going=True)
    report = outcome.report
    assert report.verdict is Verdict.REJECTED
    assert report.stages.nop.detail == "fail-to-pass tests already pass on the base snapshot"
    assert report.stages.oracle.status is Status.PASSED
    assert report.stages.determinism.status is Status.PASSED
    assert report.reason == "nop: fail-to-pass tests already pass on the base snapshot"
    assert report.settings.keep_going is True


def test_a_red_nop_settles_the_verdict_and_stops_the_rest(tmp_path: Path) -> None:
    red = {**NOP_REWARD, "fail_to_pass": 1}
    # The oracle's verifier would take 5 s: the red nop does not wait for it.
    actions = {"nop/verifier": writes_reward(red), "oracle/verifier": runs_until_removed(5)}
    engine = FakeEngine(Script(actions=actions))
    started = time.monotonic()
    outcome = run(tmp_path, engine)
    took = time.monotonic() - started
    report = outcome.report
    assert report.verdict is Verdict.REJECTED
    assert report.reason == "nop: fail-to-pass tests already pass on the base snapshot"
    for name in ("oracle", "determinism", "hack"):
        stage = report.stages.get(name)
        assert stage.status is Status.SKIPPED, name
        assert stage.detail == "skipped: verdict settled by nop", name
    assert report.stages.determinism.seconds == 0.0
    assert took < 5
    assert engine.live == set()


def test_gold_that_does_not_apply_skips_determinism(tmp_path: Path) -> None:
    outcome = run(tmp_path, FakeEngine(Script(actions={"oracle/agent": exits(1)})))
    report = outcome.report
    assert report.stages.oracle.status is Status.FAILED
    assert report.stages.oracle.detail.startswith("solution/solve.sh exited 1")
    assert report.stages.determinism.detail == "skipped: oracle did not pass"


def test_engine_error_at_container_start_is_infrastructure_with_a_reason(tmp_path: Path) -> None:
    error = EngineError("creating container x from y: unable to find user agent")
    outcome = run(tmp_path, FakeEngine(Script(create_raises={"oracle/agent": error})))
    report = outcome.report
    assert report.verdict is Verdict.INFRASTRUCTURE_FAILED
    assert report.stages.oracle.status is Status.ERROR
    assert report.stages.oracle.detail == error.one_line()
    assert report.reason == f"oracle: {error.one_line()}"
    assert report.exit_code is ExitCode.INFRASTRUCTURE


def test_a_broken_engine_connection_is_infrastructure_never_an_internal_error(
    tmp_path: Path,
) -> None:
    engine = FakeEngine(
        Script(actions={"nop/verifier": raises(BrokenPipeError(32, "Broken pipe"))})
    )
    report = run(tmp_path, engine).report
    assert report.verdict is Verdict.INFRASTRUCTURE_FAILED
    assert report.stages.nop.status is Status.ERROR
    assert report.stages.nop.detail.startswith("the connection to the Docker engine broke")
    assert "internal error" not in (report.reason or "")


def test_unexpected_exception_is_infrastructure_with_the_traceback_logged(tmp_path: Path) -> None:
    engine = FakeEngine(Script(actions={"nop/verifier": raises(RuntimeError("boom"))}))
    outcome = run(tmp_path, engine)
    report = outcome.report
    assert report.verdict is Verdict.INFRASTRUCTURE_FAILED
    assert report.exit_code is ExitCode.INFRASTRUCTURE
    assert report.stages.nop.status is Status.ERROR
    assert report.stages.nop.detail.startswith("internal error: RuntimeError: boom; the traceback")
    assert outcome.run_dir is not None
    log = (outcome.run_dir / "runner.log").read_text()
    assert "Traceback (most recent call last)" in log and "RuntimeError: boom" in log
    assert engine.live == set()


def test_an_error_of_a_stage_cut_by_a_settled_verdict_is_logged_never_printed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A red oracle settles the verdict while the hack gate's agent side runs; its container
    removed, the side raises (a FileNotFoundError once reached the board as "internal error in
    stage hack" with its traceback). The traceback goes to runner.log only, the stage is
    skipped for the verdict, and the verdict is the oracle's."""

    driving = threading.Event()

    def gone_under_it(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        driving.set()
        runs_until_removed(60)(container, step)
        raise FileNotFoundError(2, "No such file or directory", "/tmp/hack/agent.patch")

    def red_once_the_hack_gate_drives(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        # The race as it happened: the oracle settles the verdict while the driver runs (an
        # oracle that ends first skips the hack gate before it starts, and nothing raises).
        assert driving.wait(30), "the hack gate's driver never started"
        return writes_reward({**ORACLE_REWARD, "fail_to_pass": 0})(container, step)

    engine = FakeEngine(
        Script(
            actions={
                "hack/driver": gone_under_it,
                "oracle/verifier": red_once_the_hack_gate_drives,
            }
        )
    )
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    _stderr_logging(False)  # the CLI's stderr: warnings and errors
    try:
        outcome = run(tmp_path, engine)
    finally:
        for handler in set(root.handlers) - set(handlers):
            root.removeHandler(handler)
        root.setLevel(level)
    printed = capfd.readouterr().err
    report = outcome.report
    assert report.verdict is Verdict.REJECTED and report.reason.startswith("oracle:"), report
    assert report.stages.hack.detail == "skipped: verdict settled by oracle", report.stages.hack
    assert "Traceback" not in printed and "internal error" not in printed, printed
    assert outcome.run_dir is not None
    log = (outcome.run_dir / "runner.log").read_text()
    assert "FileNotFoundError" in log and "stage hack raised after the run stopped it" in log
    assert engine.live == set()


def test_malformed_or_missing_reward(tmp_path: Path) -> None:
    def garbage(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        container.files["/logs/verifier/reward.json"] = b'{"reward": "yes"}'
        return ExecOutcome(exit_code=0, seconds=0.1)

    engine = FakeEngine(Script(actions={"oracle/verifier": garbage, "nop/verifier": exits(0)}))
    # Both gates' words: the first red one would otherwise stop the other.
    report = run(tmp_path, engine, keep_going=True).report
    assert report.stages.oracle.status is Status.FAILED
    assert report.stages.oracle.detail.startswith("the verifier's reward.json: reward:")
    assert report.stages.nop.status is Status.ERROR
    assert report.stages.nop.detail.startswith("the verifier wrote no reward.json (exit 0)")


def test_interrupt_during_the_build(tmp_path: Path) -> None:
    class Interrupting(FakeEngine):
        def build(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            raise Interrupted("SIGTERM")

    engine = Interrupting()
    outcome = run(tmp_path, engine)
    report = outcome.report
    assert report.interrupted and report.exit_code is ExitCode.INTERRUPTED
    assert report.verdict is Verdict.INFRASTRUCTURE_FAILED
    assert report.reason == "interrupted (SIGTERM); the run's containers were removed"
    assert report.stages.build.status is Status.ERROR
    assert report.stages.nop.detail == "skipped: interrupted"
    assert engine.cleanups, "the run's containers were not cleaned up"
    assert outcome.run_dir is not None and (outcome.run_dir / "report.json").is_file()


def test_signal_while_gates_run(tmp_path: Path) -> None:
    """A real SIGTERM to this process while the verifiers run: the main thread is interrupted,
    running stages say so, and the run is cleaned up."""
    started, released = threading.Event(), threading.Event()

    def slow(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        # Still running when the report is made (a fixed sleep raced the report under load).
        started.set()
        released.wait(30)
        return ExecOutcome(exit_code=0, seconds=1.0)

    def kill_soon() -> None:
        started.wait(10)
        os.kill(os.getpid(), signal.SIGTERM)

    engine = FakeEngine(Script(actions={"nop/verifier": slow, "oracle/verifier": slow}))
    threading.Thread(target=kill_soon, daemon=True).start()
    try:
        with interrupts():
            outcome = run(tmp_path, engine)
    finally:
        released.set()
    report = outcome.report
    assert report.interrupted
    assert report.reason.startswith("interrupted (SIGTERM)")
    interrupted = [n for n, s in report.stages.items() if s.detail.startswith("interrupted")]
    assert interrupted and set(interrupted) <= {"nop", "oracle", "hack"}
    assert report.stages.determinism.detail == "skipped: interrupted"
    assert engine.cleanups


def test_a_stage_whose_containers_an_interrupt_removed_is_not_judged_afterwards(
    tmp_path: Path,
) -> None:
    """SIGTERM while the hack gate's agent side runs: its exec ends once the interrupt removed
    the container, and whatever the stage's thread makes of that afterwards, the report says
    it was interrupted (it once said `passed`, from the exploits the policy had decided)."""
    started = threading.Event()
    driver = runs_until_removed(60)

    def hack_driver(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        started.set()
        return driver(container, step)

    def kill_soon() -> None:
        started.wait(10)
        os.kill(os.getpid(), signal.SIGTERM)

    class SlowCleanup(FakeEngine):
        def cleanup(self, labels: Mapping[str, str], *, images: bool = False) -> int:
            # The stages' threads end (their execs killed) before the handler marks them.
            count = super().cleanup(labels, images=images)
            time.sleep(1.0)
            return count

    engine = SlowCleanup(
        Script(
            actions={
                "hack/driver": hack_driver,
                "nop/verifier": runs_until_removed(60),
                "oracle/verifier": runs_until_removed(60),
            }
        )
    )
    threading.Thread(target=kill_soon, daemon=True).start()
    with interrupts():
        outcome = run(tmp_path, engine)
    report = outcome.report
    assert report.interrupted
    assert report.stages.hack.detail.startswith("interrupted (SIGTERM)"), report.stages.hack


def test_keep_keeps_every_container_and_says_how_to_enter(tmp_path: Path) -> None:
    engine = FakeEngine()
    report = run(tmp_path, engine, keep=True).report
    assert report.verdict is Verdict.ACCEPTED
    assert sorted(k.label for k in report.kept) == [
        "determinism/probe-1 verifier",
        "hack agent",
        "hack policy",
        "hack/harness-memory verifier",
        "hack/harness-rename verifier",
        "hack/harness-rewrite-at-run verifier",
        "hack/held-out-overwrite verifier",
        "hack/reward-file-from-code verifier",
        "hack/runner-exit-zero verifier",
        "nop verifier",
        "oracle agent",
        "oracle verifier",
    ]
    assert all(k.enter.startswith("docker exec -it selfbench-demo-task-") for k in report.kept)
    assert len(engine.live) == 12
    assert engine.cleanups == []


def test_an_exploit_that_earns_a_reward_rejects_the_task(tmp_path: Path) -> None:
    from tests.fakes import ORACLE_REWARD

    engine = FakeEngine(Script(actions={"hack/verifier": writes_reward(ORACLE_REWARD)}))
    report = run(tmp_path, engine).report
    assert report.verdict is Verdict.REJECTED
    assert report.stages.hack.status is Status.FAILED
    assert report.reason.startswith(
        "hack: the verifier can be gamed: exploit runner-exit-zero earned reward 1 without a fix"
    )
    assert [e.outcome for e in report.stages.hack.data.exploits] == ["earned-reward"] * 6


def test_the_policy_check_decides_exploits_without_a_verifier(tmp_path: Path) -> None:
    """A patch the policy undoes entirely leaves nop's tree, and one that does not apply earns
    nothing: neither gets a verifier; the rest do. Their patches reach the check's container."""

    def undone(path: str) -> dict[str, object]:
        return {"path": path, "status": "A", "verdict": "undo", "reason": "a test-runner hook"}

    checked: dict[str, bytes] = {}

    def check(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        checked.update(
            {k: v for k, v in container.files.items() if k.startswith(HACK_POLICY_DIR + "/")}
        )
        document = {
            "held-out-overwrite": {
                "applied": True,
                "kept": 0,
                "restores": 0,
                "changes": [undone("tests/test_calc.sh")],
            },
            "harness-rename": {"applied": False, "kept": 0, "restores": 0, "changes": []},
            # A trusted manifest put back: the tree is not nop's, so it is verified.
            "reward-file-from-code": {
                "applied": True,
                "kept": 0,
                "restores": 1,
                "changes": [undone("package.json")],
            },
        }
        container.files[HACK_POLICY_RESULT] = json.dumps(document).encode()
        return ExecOutcome(exit_code=0, seconds=0.01)

    engine = FakeEngine(Script(actions={"hack/policy-check": check}))
    report = run(tmp_path, engine).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert sorted(checked) == sorted(
        f"{HACK_POLICY_DIR}/{name}.patch"
        for name in (
            "runner-exit-zero",
            "held-out-overwrite",
            "harness-rename",
            "harness-rewrite-at-run",
            "reward-file-from-code",
            "harness-memory",
        )
    )
    outcomes = {e.name: (e.outcome, e.detail) for e in report.stages.hack.data.exploits}
    assert outcomes["held-out-overwrite"] == (
        "resisted",
        "undone by the patch policy: tests/test_calc.sh (a test-runner hook) "
        "(no test run: nop's tree)",
    )
    assert outcomes["harness-rename"][0] == "not-applicable"
    held_out = next(e for e in report.stages.hack.data.exploits if e.name == "held-out-overwrite")
    assert held_out.discarded == ["tests/test_calc.sh"]
    assert held_out.reward is None
    verified = sorted(
        e.split()[1] for e in engine.events if e.startswith("exec hack/verifier as root")
    )
    # runner-exit-zero, harness-rewrite-at-run, reward-file-from-code, harness-memory
    assert len(verified) == 4


def _packs(tar: bytes) -> Action:
    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        assert step.user == "root" and "/opt/selfbench-cache/go-build" in step.argv
        container.files[HAND_OFF_ARCHIVE] = tar
        return ExecOutcome(exit_code=0, seconds=0.01)

    return action


def test_nop_hands_its_build_caches_to_the_side_verifiers_only(tmp_path: Path) -> None:
    """What nop's verifier packed goes into every hack and probe verifier before it starts, and
    into nothing else: not the oracle's verifier, not an agent's container, not the policy
    check's."""
    engine = FakeEngine(Script(actions={"nop/hand-off": _packs(b"TAR")}))
    report = run(tmp_path, engine, name="go-task", toolchains=["go"]).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert report.stages.nop.data.handed_cache_bytes == 3
    assert report.settings.hand_caches is True
    events = engine.events
    into = handed(events)
    assert all(e.endswith(" at /: b'TAR'") for e in into)
    given = sorted(e.split()[2] for e in into)
    # Every container that ran test.sh for an exploit or the probe, once each; nothing else.
    tested = sorted(
        e.split()[-1]
        for e in events
        if e.startswith(("exec hack/verifier as root", "exec determinism/verifier as root"))
    )
    assert given == tested and len(tested) > 2, (given, tested)
    # The pack ran after nop's tests, in nop's verifier, before it was removed.
    assert events.index("exec nop/hand-off as root in " + _verifier_name(events, "nop")) > (
        events.index("exec nop/verifier as root in " + _verifier_name(events, "nop"))
    )


def handed(events: list[str]) -> list[str]:
    """Archives put into containers, but the hack gate's exploit scripts (into its agent)."""
    scripts = f" at {PurePosixPath(HACK_IN).parent}: "
    return [e for e in events if e.startswith("archive into ") and scripts not in e]


def _verifier_name(events: list[str], gate: str) -> str:
    prefix = f"exec {gate}/verifier as root in "
    return next(e[len(prefix) :] for e in events if e.startswith(prefix))


def test_a_red_nop_or_no_hand_caches_hands_nothing(tmp_path: Path) -> None:
    red = FakeEngine(
        Script(
            actions={
                "nop/hand-off": _packs(b"TAR"),
                "nop/verifier": writes_reward(ORACLE_REWARD),
            }
        )
    )
    report = run(tmp_path / "red", red, name="go-task", toolchains=["go"], keep_going=True).report
    assert report.stages.nop.status is Status.FAILED
    assert not any("hand-off" in e for e in red.events) and not handed(red.events)
    off = FakeEngine(Script(actions={"nop/hand-off": _packs(b"TAR")}))
    report = run(tmp_path / "off", off, name="go-task", toolchains=["go"], hand_caches=False).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert report.stages.nop.data.handed_cache_bytes is None
    assert not any("hand-off" in e for e in off.events) and not handed(off.events)


def test_a_failed_pack_hands_nothing_and_changes_no_verdict(tmp_path: Path) -> None:
    engine = FakeEngine(Script(actions={"nop/hand-off": exits(3)}))
    report = run(tmp_path, engine, name="go-task", toolchains=["go"]).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert report.stages.nop.data.handed_cache_bytes is None
    assert not handed(engine.events)


def test_no_hack_gate_skips_it_and_still_accepts(tmp_path: Path) -> None:
    engine = FakeEngine()
    report = run(tmp_path, engine, hack_gate=HackGate.OFF).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert report.stages.hack.status is Status.SKIPPED
    assert report.stages.hack.detail == "skipped: --no-hack-gate"
    assert not any(e.startswith("create hack") for e in engine.events)


def test_a_perturbed_run_that_fails_is_retried_per_dimension(tmp_path: Path) -> None:
    failing = {"TZ=<+14>-14 (as Pacific/Kiritimati)"}

    def by_zone(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        from tests.fakes import ORACLE_REWARD

        zone = step.env.get("TZ")
        flaky = zone == "<+14>-14"
        return writes_reward(NOP_REWARD if flaky else ORACLE_REWARD)(container, step)

    engine = FakeEngine(Script(actions={"determinism/verifier": by_zone}))
    report = run(tmp_path, engine, repeat=2).report
    assert report.verdict is Verdict.REJECTED
    data = report.stages.determinism.data
    assert [(p.name, p.passed) for p in data.probe if p.dimension is None] == [
        ("probe-1", False),
        ("probe-2", True),
    ]
    retried = {p.dimension: p.passed for p in data.probe if p.dimension}
    assert {d for d, ok in retried.items() if not ok} == failing
    assert len(retried) == 5  # TZ, hash seed, locale, order, CPUs: probe-1 changes all five
    assert data.perturbations == sorted(failing)
    assert [(s.selector, s.passed, s.runs) for s in data.selectors] == [("tests/test_new.sh", 1, 2)]
    assert report.stages.determinism.detail.startswith(
        "flaky: fail-to-pass failed in 1 of 2 perturbed run(s) (tests/test_new.sh); changed by "
        "TZ=<+14>-14 (as Pacific/Kiritimati); see "
    )


def online_runs(engine: FakeEngine) -> int:
    """The containers made with the network on (the red gate's run again online)."""
    return sum(e.startswith("network of ") and e.endswith(": bridge") for e in engine.events)


def test_a_red_oracle_is_retried_online_to_tell_a_test_that_needs_the_network(
    tmp_path: Path,
) -> None:
    from tests.fakes import ORACLE_REWARD

    def online_only(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        online = container.plan.network == "bridge"
        return writes_reward(ORACLE_REWARD if online else NOP_REWARD)(container, step)

    # What a test that downloads prints with the network off (urllib3 2, glibc's resolver).
    said = {
        "oracle/verifier": "requests.exceptions.ConnectionError: Failed to resolve 'example.org' "
        "([Errno -3] Temporary failure in name resolution)\n"
    }
    engine = FakeEngine(Script(actions={"oracle/verifier": online_only}, said=said))
    report = run(tmp_path, engine).report
    oracle = report.stages.oracle
    assert oracle.status is Status.FAILED
    assert oracle.data.passes_online is True
    assert online_runs(engine) == 1
    assert oracle.detail.startswith("fail-to-pass tests still fail with the gold patch")
    assert (
        "the tests ran with the network off, and pass with it on: they need the network "
        '(declare environment.testsNetwork: "public")' in oracle.detail
    )
    # A red that is not the network's stays as it was, said to fail online too.
    engine = FakeEngine(Script(actions={"oracle/verifier": writes_reward(NOP_REWARD)}, said=said))
    report = run(tmp_path / "again", engine).report
    assert report.stages.oracle.data.passes_online is False
    assert "network" not in report.stages.oracle.detail
    # nop: only a red pass-to-pass is the tests'; nop's other reds are not retried.
    assert report.stages.nop.data.passes_online is None
    # A red whose log shows no process reaching for the network is not run again online: that
    # run would cost as much as the gate and tell nothing.
    engine = FakeEngine(Script(actions={"oracle/verifier": online_only}))
    report = run(tmp_path / "quiet", engine).report
    assert report.stages.oracle.status is Status.FAILED
    assert report.stages.oracle.data.passes_online is None
    assert online_runs(engine) == 0


def test_repeat_zero_turns_the_probe_off(tmp_path: Path) -> None:
    engine = FakeEngine()
    report = run(tmp_path, engine, repeat=0).report
    assert report.verdict is Verdict.ACCEPTED
    assert report.stages.determinism.data.probe == []
    assert not any(e.startswith("create determinism") for e in engine.events)


def _concurrent_verifiers(tmp_path: Path, cpus: float) -> int:
    lock = threading.Lock()
    running = [0, 0]  # now, most

    def counting(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return writes_reward(NOP_REWARD)(container, step)

    engine = FakeEngine(Script(actions={"nop/verifier": counting, "oracle/verifier": counting}))
    run(tmp_path, engine, cpus=cpus)
    return running[1]


def test_verifiers_share_the_engine_only_when_the_task_fits_twice(tmp_path: Path) -> None:
    assert _concurrent_verifiers(tmp_path / "small", cpus=1) == 2
    assert _concurrent_verifiers(tmp_path / "large", cpus=2) == 1


def test_logs_root_keeps_runs_of_different_tasks_apart(tmp_path: Path) -> None:
    first = run(tmp_path / "a", FakeEngine(), name="task-a", logs_root=tmp_path / "runs")
    second = run(tmp_path / "b", FakeEngine(), name="task-b", logs_root=tmp_path / "runs")
    again = run(tmp_path / "c", FakeEngine(), name="task-a", logs_root=tmp_path / "runs")
    for outcome in (first, second, again):
        assert outcome.report.verdict is Verdict.ACCEPTED, outcome.report.reason
    dirs = {o.run_dir for o in (first, second, again)}
    assert len(dirs) == 3
    assert {d.parent.name for d in dirs if d} == {"task-a", "task-b"}


def test_exact_run_dir_must_be_new(tmp_path: Path) -> None:
    from runner.base.errors import UsageError

    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "report.json").write_text("{}")
    with pytest.raises(UsageError, match="is not empty"):
        run(tmp_path, FakeEngine(), run_dir=tmp_path / "used")


DIGEST = "sha256:" + "b" * 64
DB_IMAGE = f"postgres:16@{DIGEST}"
CONTRACT = {
    "environmentVariables": {"PGHOST": "db", "PGPASSWORD": "postgres"},
    "services": [
        {
            "name": "db",
            "image": DB_IMAGE,
            "env": {"POSTGRES_PASSWORD": "postgres"},
            "healthcheck": {"command": ["pg_isready"]},
        }
    ],
}


def run_with_services(tmp_path: Path, engine: FakeEngine) -> VerifyOutcome:
    from runner.plan.runtime import ImageInfo

    engine.images[DB_IMAGE] = ImageInfo(id="sha256:db", labels={})
    task = bash_task(tmp_path, name="with-db", environment=CONTRACT)
    return verify(
        task.directory,
        settings(tmp_path),
        progress=lambda stage, message: None,
        engine_factory=lambda: engine,
        env=ENV,
    )


def test_services_run_for_the_verifier_only(tmp_path: Path) -> None:
    engine = FakeEngine()
    outcome = run_with_services(tmp_path, engine)
    assert outcome.report.verdict is Verdict.ACCEPTED, outcome.report.reason
    events = engine.events
    for gate in ("nop", "oracle"):
        network = next(e for e in events if e.startswith(f"network selfbench-with-db-{gate}-"))
        name = network.split()[1]
        assert f"service db on {name}" in events
        assert f"network removed {name}" in events
    # The default smoke check ran in the nop verifier, with its services up.
    assert not any(e.startswith("network selfbench-with-db-smoke-") for e in events)
    smoke = next(e for e in events if e.startswith("exec smoke/smoke"))
    assert "-nop-verifier-" in smoke
    assert events.index(smoke) > events.index(next(e for e in events if "service db on" in e))
    # No network for the tests by default: verifiers sit on their gate's (internal) services
    # network only; the oracle's agent side has none at all.
    for key in ("nop/verifier", "oracle/verifier"):
        gate = key.split("/")[0]
        network = next(
            e.split()[1] for e in events if e.startswith(f"network selfbench-with-db-{gate}-")
        )
        assert f"network of {key}: {network}" in events
    assert "network of oracle/agent: none" in events
    assert not any(e.startswith("connect ") for e in events)
    assert outcome.run_dir is not None
    assert (outcome.run_dir / "oracle" / "services" / "db.log").is_file()


def test_a_smoke_command_runs_in_its_own_container_with_its_own_services(
    tmp_path: Path,
) -> None:
    """A contract's smoke command may write: it gets a container (and services) of its own,
    and the verifiers still wait for it."""
    from runner.plan.runtime import ImageInfo

    engine = FakeEngine()
    engine.images[DB_IMAGE] = ImageInfo(id="sha256:db", labels={})
    contract = {**CONTRACT, "smokeCommand": "psql -c 'select 1'"}
    task = bash_task(tmp_path, name="with-db", environment=contract)
    report = verify(
        task.directory,
        settings(tmp_path),
        progress=lambda stage, message: None,
        engine_factory=lambda: engine,
        env=ENV,
    ).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    events = engine.events
    smoke = next(e for e in events if e.startswith("exec smoke/smoke"))
    assert "-smoke-" in smoke and "-verifier-" not in smoke
    network = next(e for e in events if e.startswith("network selfbench-with-db-smoke-"))
    assert f"network of smoke/smoke: {network.split()[1]}" in events
    for gate in ("nop", "oracle"):
        assert next(i for i, e in enumerate(events) if e.startswith(f"exec {gate}/verifier")) > (
            events.index(smoke)
        )


def test_a_public_verifier_joins_its_services_network(tmp_path: Path) -> None:
    from runner.plan.runtime import ImageInfo

    engine = FakeEngine()
    engine.images[DB_IMAGE] = ImageInfo(id="sha256:db", labels={})
    task = bash_task(tmp_path, name="with-db", environment={**CONTRACT, "testsNetwork": "public"})
    report = verify(
        task.directory,
        settings(tmp_path),
        progress=lambda stage, message: None,
        engine_factory=lambda: engine,
        env=ENV,
    ).report
    assert report.verdict is Verdict.ACCEPTED
    assert report.settings.tests_network == "public"
    assert "network of nop/verifier: bridge" in engine.events
    assert any(e.startswith("connect nop/verifier selfbench-with-db-nop-") for e in engine.events)


def test_an_unhealthy_service_fails_the_gate_with_its_last_lines(tmp_path: Path) -> None:
    engine = FakeEngine(Script(service_states={"db": ["starting", "unhealthy"]}))
    report = run_with_services(tmp_path, engine).report
    assert report.verdict is Verdict.REJECTED
    assert report.stages.smoke.status is Status.FAILED
    assert report.stages.smoke.detail.startswith(
        "service db is unhealthy; its last lines: db log line; see "
    )
    assert report.stages.nop.detail == "skipped: smoke did not pass"


def test_a_missing_service_image_is_infrastructure(tmp_path: Path) -> None:
    engine = FakeEngine()
    task = bash_task(tmp_path, name="with-db", environment=CONTRACT)
    report = verify(
        task.directory,
        settings(tmp_path),
        progress=lambda stage, message: None,
        engine_factory=lambda: engine,
        env=ENV,
    ).report
    assert report.verdict is Verdict.INFRASTRUCTURE_FAILED
    assert report.stages.smoke.detail.startswith(f"service db's image {DB_IMAGE} is not present")


# ---- predicted patches -------------------------------------------------------------------------

GOLD = b"diff --git a/x b/x\n"  # what the fake oracle's collect step leaves


def rewards_only(good: bytes) -> Action:
    """A verifier whose tests pass only on `good` (the patch test.sh was given)."""

    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        given = container.files.get("/opt/selfbench/agent.patch")
        reward = ORACLE_REWARD if given == good else NOP_REWARD
        return writes_reward(reward)(container, step)

    return action


def predicting(tmp_path: Path, engine: FakeEngine, task: Path, **changes: object) -> VerifyOutcome:
    return verify(
        task,
        settings(tmp_path, hack_gate=HackGate.OFF, repeat=0, **changes),
        progress=lambda stage, message: None,
        engine_factory=lambda: engine,
        env=replace(ENV, predictions=PatchPredictions(tmp_path / "cache")),
    )


def only_prediction(tmp_path: Path) -> Path:
    [entry] = (tmp_path / "cache" / "predicted-patches").glob("*.patch")
    return entry


def test_the_oracle_verifier_runs_on_the_predicted_patch_and_counts_when_it_matches(
    tmp_path: Path,
) -> None:
    task = bash_task(tmp_path).directory
    first = predicting(tmp_path, FakeEngine(), task)
    assert first.report.verdict is Verdict.ACCEPTED, first.report.reason
    assert first.report.stages.oracle.data.predicted_patch is None
    assert only_prediction(tmp_path).read_bytes() == GOLD

    engine = FakeEngine()
    second = predicting(tmp_path, engine, task)
    assert second.report.verdict is Verdict.ACCEPTED, second.report.reason
    oracle = second.report.stages.oracle
    assert oracle.data.predicted_patch == "confirmed"
    # One oracle verifier: the predicted run's (started without waiting for the agent side),
    # and its logs are the gate's own.
    creations = [e for e in engine.events if e.startswith("create oracle/")]
    assert creations.count("create oracle/verifier") == 1
    [tests] = [e for e in engine.events if e.startswith("exec oracle/verifier")]
    assert tests.endswith("-predicted")
    assert second.run_dir is not None
    gate = second.run_dir / "oracle"
    assert not (gate / "predicted").exists()
    assert (gate / "logs" / "verifier" / "reward.json").is_file()
    assert str(gate / "logs" / "verifier" / "reward.json") in oracle.logs
    assert (gate / "agent.patch").read_bytes() == GOLD
    assert engine.live == set()


def test_a_wrong_prediction_never_decides_the_oracle(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    script = Script(actions={"oracle/verifier": rewards_only(GOLD)})
    predicting(tmp_path, FakeEngine(script), task)
    entry = only_prediction(tmp_path)

    # A planted patch the tests fail on: the collected (gold) one is verified afresh.
    entry.write_bytes(b"diff --git a/planted b/planted\n")
    engine = FakeEngine(script)
    outcome = predicting(tmp_path, engine, task)
    oracle = outcome.report.stages.oracle
    assert oracle.status is Status.PASSED, oracle.detail
    assert oracle.data.predicted_patch == "mismatched"
    assert [e for e in engine.events if e == "create oracle/verifier"] == [
        "create oracle/verifier"
    ] * 2
    assert outcome.run_dir is not None
    set_aside = outcome.run_dir / "oracle" / "predicted" / "logs" / "verifier" / "reward.json"
    assert json.loads(set_aside.read_text())["reward"] == 0  # it ran, and was not used
    assert (
        json.loads((outcome.run_dir / "oracle/logs/verifier/reward.json").read_text())["reward"]
        == 1
    )
    # The key changed its patch: not predicted next time, then predicted again once two runs
    # in a row agree.
    assert entry.read_bytes() == GOLD
    assert (
        predicting(tmp_path, FakeEngine(script), task).report.stages.oracle.data.predicted_patch
        is None
    )
    assert (
        predicting(tmp_path, FakeEngine(script), task).report.stages.oracle.data.predicted_patch
        == "confirmed"
    )


def test_a_planted_passing_patch_cannot_pass_a_red_oracle(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    good = b"diff --git a/fixed b/fixed\n"  # the tests pass on this patch only, not on the gold
    script = Script(actions={"oracle/verifier": rewards_only(good)})
    assert (
        predicting(tmp_path, FakeEngine(script), task).report.stages.oracle.status is Status.FAILED
    )
    only_prediction(tmp_path).write_bytes(good)
    outcome = predicting(tmp_path, FakeEngine(script), task)
    assert outcome.report.verdict is Verdict.REJECTED
    assert outcome.report.stages.oracle.status is Status.FAILED
    assert outcome.report.stages.oracle.data.predicted_patch == "mismatched"


def test_a_red_smoke_skips_the_oracle_whatever_its_predicted_run_did(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    predicting(tmp_path, FakeEngine(), task)
    engine = FakeEngine(Script(actions={"smoke/smoke": exits(1)}))
    outcome = predicting(tmp_path, engine, task)
    assert outcome.report.stages.oracle.status is Status.SKIPPED
    assert outcome.report.stages.oracle.detail == "skipped: smoke did not pass"
    assert outcome.report.verdict is Verdict.REJECTED
    assert engine.live == set()


def test_a_predicted_run_with_services_has_names_of_its_own(tmp_path: Path) -> None:
    from runner.plan.runtime import ImageInfo

    task = bash_task(tmp_path, name="with-db", environment=CONTRACT).directory
    script = Script(actions={"oracle/verifier": rewards_only(GOLD)})

    def engine() -> FakeEngine:
        made = FakeEngine(script)
        made.images[DB_IMAGE] = ImageInfo(id="sha256:db", labels={})
        return made

    predicting(tmp_path, engine(), task)
    only_prediction(tmp_path).write_bytes(b"diff --git a/planted b/planted\n")
    mispredicted = engine()
    outcome = predicting(tmp_path, mispredicted, task)
    assert outcome.report.stages.oracle.status is Status.PASSED, outcome.report.stages.oracle.detail
    assert outcome.report.stages.oracle.data.predicted_patch == "mismatched"
    # Both oracle verifiers ran with their services at once: networks and containers apart.
    networks = [
        e.split()[1]
        for e in mispredicted.events
        if e.startswith("network selfbench-with-db-oracle-")
    ]
    containers = [
        e.split()[2]
        for e in mispredicted.events
        if e.startswith("service container ") and "-oracle-" in e
    ]
    assert len(networks) == len(set(networks)) == 2
    assert len(containers) == len(set(containers)) == 2
    assert any(n.endswith("-predicted") for n in networks)

    confirmed = engine()
    predicting(tmp_path, confirmed, task)  # the key is unstable now: the agent side first
    outcome = predicting(tmp_path, confirmed, task)
    assert outcome.report.stages.oracle.data.predicted_patch == "confirmed"
    assert outcome.run_dir is not None
    assert (outcome.run_dir / "oracle" / "services" / "db.log").is_file()
    assert (
        str(outcome.run_dir / "oracle" / "services" / "db.log") in outcome.report.stages.oracle.logs
    )


def test_kept_containers_of_a_predicted_run_carry_the_gate_s_labels(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    predicting(tmp_path, FakeEngine(), task)
    confirmed = predicting(tmp_path, FakeEngine(), task, keep=True).report
    assert confirmed.stages.oracle.data.predicted_patch == "confirmed"
    kept = {k.label: k.name for k in confirmed.kept}
    assert sorted(kept) == ["nop verifier", "oracle agent", "oracle verifier"]
    assert kept["oracle verifier"].endswith("-predicted")


def test_without_a_prediction_yet_the_verifier_still_starts_while_the_agent_works(
    tmp_path: Path,
) -> None:
    seen: list[bool] = []

    def collect(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "create oracle/verifier" not in engine.events:
            time.sleep(0.01)
        seen.append("create oracle/verifier" in engine.events)
        return collect_patch(GOLD)(container, step)

    engine = FakeEngine(Script(actions={"oracle/collect": collect}))
    outcome = predicting(tmp_path, engine, bash_task(tmp_path).directory)
    assert outcome.report.stages.oracle.status is Status.PASSED
    assert outcome.report.stages.oracle.data.predicted_patch is None
    assert seen == [True]  # opened during the agent side, not after it


def _per_test(reward: Mapping[str, int], outcome: str) -> Any:
    """A verifier that leaves pytest's per-test evidence of one fail-to-pass test."""
    from tests.fakes import writes_reward

    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        writes_reward(reward)(container, step)
        for name, kind, result in (
            ("fail_to_pass", "f2p", outcome),
            ("pass_to_pass", "p2p", "passed"),
        ):
            document = {
                "name": name,
                "kind": kind,
                "exit_code": 0 if result == "passed" else 1,
                "mode": "per-test",
                "runners": ["pytest"],
                "complete": True,
                "tests": [{"id": f"tests/test_{name}.py::test_it", "outcome": result}],
                "passed": result == "passed",
            }
            path = f"/logs/verifier/evidence/{name}.json"
            container.files[path] = json.dumps(document).encode()
        return ExecOutcome(exit_code=0, seconds=0.02)

    return action


@pytest.mark.parametrize("mode", [HackGate.TASK, HackGate.FULL])
def test_exploits_left_in_the_tree_are_proved_where_the_runner_is(
    tmp_path: Path, mode: HackGate
) -> None:
    """On a task whose fail-to-pass runs are judged by pytest's per-test evidence alone, a
    patch the policy leaves in the tree is proved for pytest by this runner version, with no
    verifier of its own; --hack-gate full verifies each all the same."""
    from runner import __version__
    from tests.fakes import NOP_REWARD, ORACLE_REWARD

    engine = FakeEngine(
        Script(
            actions={
                "nop/verifier": _per_test(NOP_REWARD, "failed"),
                "oracle/verifier": _per_test(ORACLE_REWARD, "passed"),
                "determinism/verifier": _per_test(ORACLE_REWARD, "passed"),
            }
        )
    )
    report = run(tmp_path, engine, hack_gate=mode, repeat=0).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert report.census is not None and report.census.fail_to_pass == "per-test"
    exploits = report.stages.hack.data.exploits
    # The policy check's container is one of the hack gate's verifiers; each run, another.
    hack_verifiers = engine.events.count("create hack/verifier")
    if mode is HackGate.TASK:
        assert {e.outcome for e in exploits} == {"proved"}
        assert all(e.scope == "runner" and e.proved_for == ["pytest"] for e in exploits)
        assert exploits[0].detail.startswith(
            f"proved for runner pytest by selfbench-runner {__version__}: "
        )
        assert hack_verifiers == 1
        assert report.stages.hack.detail.startswith(
            f"{len(exploits)} exploit(s) earned no reward ({len(exploits)} proved"
        )
    else:
        assert {e.outcome for e in exploits} == {"resisted"}
        assert all(e.scope == "task" for e in exploits)
        assert hack_verifiers > len(exploits)


PYTEST_COMMAND = {"testCommand": "python -m pytest {tests}"}


def test_exploits_the_test_commands_runners_prove_are_decided_before_the_census(
    tmp_path: Path,
) -> None:
    """The test command starts only pytest, which proves every exploit the policy leaves: the
    hack stage ends before the oracle's verifier has run (its census then confirms it), with no
    verifier of its own beyond the policy check."""
    from tests.fakes import NOP_REWARD, ORACLE_REWARD

    hack_ended = threading.Event()
    waited: list[bool] = []

    def listen(event: StageEvent) -> None:
        if event.stage == "hack" and event.status != "running":
            hack_ended.set()

    oracle: Action = _per_test(ORACLE_REWARD, "passed")

    def oracle_after_hack(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        waited.append(hack_ended.wait(timeout=20))
        return oracle(container, step)

    engine = FakeEngine(
        Script(
            actions={
                "nop/verifier": _per_test(NOP_REWARD, "failed"),
                "oracle/verifier": oracle_after_hack,
                "determinism/verifier": _per_test(ORACLE_REWARD, "passed"),
            }
        )
    )
    report = run(tmp_path, engine, repeat=0, definition=PYTEST_COMMAND, on_stage=listen).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert waited == [True]
    exploits = report.stages.hack.data.exploits
    proved = [e for e in exploits if e.outcome == "proved"]
    assert proved and all(e.proved_for == ["pytest"] for e in proved)
    assert engine.events.count("create hack/verifier") == 1


def test_a_census_that_does_not_confirm_the_runners_reopens_the_hack_stage(
    tmp_path: Path,
) -> None:
    """The test command names pytest, but the oracle's tests leave exit-code evidence only: the
    decision made on the command's runners does not stand, and the stage reopens and runs each
    exploit the policy left in a verifier of its own, graded by the census."""
    from tests.fakes import NOP_REWARD, ORACLE_REWARD

    events: list[tuple[str, str]] = []
    engine = FakeEngine(
        Script(
            actions={
                "nop/verifier": writes_reward(NOP_REWARD),
                "oracle/verifier": writes_reward(ORACLE_REWARD),
            }
        )
    )
    report = run(
        tmp_path,
        engine,
        repeat=0,
        definition=PYTEST_COMMAND,
        on_stage=lambda e: events.append((e.stage, e.status)),
    ).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    hack = [status for stage, status in events if stage == "hack"]
    assert hack == ["running", "passed", "running", "passed"], hack
    exploits = report.stages.hack.data.exploits
    assert not any(e.outcome == "proved" for e in exploits)
    assert {e.outcome for e in exploits} >= {"resisted"}
    ran = [e for e in exploits if e.outcome == "resisted" and "no test run" not in e.detail]
    assert ran and engine.events.count("create hack/verifier") == 1 + len(ran)


def writes_evidence(reward: Mapping[str, int], f2p: Mapping[str, str]) -> Action:
    """A verifier that also leaves per-test evidence: its fail-to-pass run's tests (pytest's),
    and one pass-to-pass test that passes."""

    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        writes_reward(reward)(container, step)
        sealed = b'"sealed": true' in container.files.get("/tests/expected-tests.json", b"")
        failing = any(o != "passed" for o in f2p.values())
        runs = {
            "fail_to_pass": ("f2p", f2p, failing),
            "pass_to_pass": ("p2p", {"old.py::c": "passed"}, False),
        }
        for name, (kind, tests, failed) in runs.items():
            document = {
                "name": name,
                "kind": kind,
                "exitCode": int(failed),
                "mode": "per-test",
                "runners": ["pytest"],
                "sealed": sealed,
                "complete": True,
                "tests": [{"id": i, "outcome": o} for i, o in tests.items()],
                "passed": not failed,
            }
            container.files[f"/logs/verifier/evidence/{name}.json"] = json.dumps(document).encode()
        return ExecOutcome(exit_code=0, seconds=0.02)

    return action


def probe_script(early_tests: Mapping[str, str]) -> Script:
    """nop fails t::a and t::b, the oracle passes both (the census: both); the probe's early run
    (before the census) reports `early_tests`, a run graded by the census both passed."""

    def probe(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        early = container.name.endswith("-early")
        tests = early_tests if early else {"t::a": "passed", "t::b": "passed"}
        return writes_evidence(ORACLE_REWARD, tests)(container, step)

    return Script(
        actions={
            "nop/verifier": writes_evidence(NOP_REWARD, {"t::a": "failed", "t::b": "failed"}),
            "oracle/verifier": writes_evidence(ORACLE_REWARD, {"t::a": "passed", "t::b": "passed"}),
            "determinism/verifier": probe,
        }
    )


def probe_verifiers(engine: FakeEngine) -> list[str]:
    return [
        e.rsplit(" in ", 1)[1]
        for e in engine.events
        if e.startswith("exec determinism/verifier as root")
    ]


def test_the_probe_runs_beside_the_oracle_and_counts_when_the_census_grades_it_alike(
    tmp_path: Path,
) -> None:
    engine = FakeEngine(probe_script({"t::a": "passed", "t::b": "passed"}))
    outcome = run(tmp_path, engine, hack_gate=HackGate.OFF)
    report = outcome.report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    # One probe verifier: the early one (started once nop passed, before the census).
    assert [v.endswith("-early") for v in probe_verifiers(engine)] == [True]
    assert outcome.run_dir is not None
    probe_dir = outcome.run_dir / "determinism" / "probe-1"
    assert (probe_dir / "logs" / "verifier" / "evidence" / "fail_to_pass.json").is_file()
    assert not (probe_dir / "early").exists()
    assert str(probe_dir / "verifier.log") in report.stages.determinism.logs
    assert report.stages.determinism.status is Status.PASSED


def test_an_early_probe_run_the_census_would_grade_otherwise_is_verified_again(
    tmp_path: Path,
) -> None:
    # The early run passed without t::b, which the census requires: graded by it, it would fail.
    engine = FakeEngine(probe_script({"t::a": "passed"}))
    report = run(tmp_path, engine, hack_gate=HackGate.OFF).report
    assert report.verdict is Verdict.ACCEPTED, report.reason
    assert [v.endswith("-early") for v in probe_verifiers(engine)] == [True, False]
    assert report.stages.determinism.status is Status.PASSED
