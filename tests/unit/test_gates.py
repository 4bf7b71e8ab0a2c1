"""Pure judgement: gate criteria, reasons that say what happened, the verdict (no Docker)."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from runner import judge as gates
from runner.judge import (
    ExploitVerdict,
    Judgement,
    RunJudgement,
    StageView,
    TrialEvidence,
    decide_verdict,
    evaluate_gate,
    interrupt_marks,
    judge_build,
    judge_report,
    judge_smoke,
    judge_trial,
    limits_data,
    verdict_reason,
)
from runner.model.report import LimitsData, Status, Verdict
from runner.model.reward import Reward, VerifierDetails
from runner.model.stages import Gate, GateId, Skip
from runner.plan.runtime import BuildOutcome, ExecOutcome, LimitStats

NOP_OK = Reward(
    reward=0, patch_applied=1, fail_to_pass=0, pass_to_pass=1, deterministic=0, setup_completed=1
)
ORACLE_OK = Reward(
    reward=1, patch_applied=1, fail_to_pass=1, pass_to_pass=1, deterministic=1, setup_completed=1
)
DETAILS = VerifierDetails(
    fail_to_pass_exit_code=1,
    fail_to_pass_repeat_exit_code=-1,
    pass_to_pass_exit_code=0,
    fail_to_pass_ms=10,
    fail_to_pass_repeat_ms=0,
    pass_to_pass_ms=10,
    pids_limit_hits=0,
    oom_kills=0,
    truncated_logs=0,
)


def reward(base: Reward, **changes: int) -> Reward:
    return base.model_copy(update=changes)


def details(**changes: int) -> VerifierDetails:
    return DETAILS.model_copy(update=changes)


@pytest.mark.parametrize(
    ("gate", "got", "extra", "ok", "detail"),
    [
        (
            "nop",
            NOP_OK,
            {},
            True,
            "fail-to-pass fails (exit 1) and pass-to-pass passes on the base",
        ),
        (
            "nop",
            reward(NOP_OK, fail_to_pass=1),
            {},
            False,
            "fail-to-pass tests already pass on the base snapshot",
        ),
        (
            "nop",
            reward(NOP_OK, pass_to_pass=0),
            {"pass_to_pass_exit_code": 2},
            False,
            "pass-to-pass tests fail on the base snapshot (exit 2)",
        ),
        (
            "nop",
            reward(NOP_OK, setup_completed=0),
            {},
            False,
            "setup did not complete in the verifier image",
        ),
        ("oracle", ORACLE_OK, {}, True, "the gold patch applies and every selected test passes"),
        (
            "oracle",
            reward(ORACLE_OK, patch_applied=0),
            {},
            False,
            "the gold patch or test.patch does not apply to the post-setup tree (the audit "
            "applied both at baseCommit: setupCommand changed a file they touch); the "
            "verifier log's selfbench: lines say which, and `selfbench-runner debug RUN_DIR "
            "--stage oracle` opens that tree",
        ),
        (
            "oracle",
            reward(ORACLE_OK, fail_to_pass=0),
            {"fail_to_pass_exit_code": 1},
            False,
            "fail-to-pass tests still fail with the gold patch (exit 1)",
        ),
        (
            "oracle",
            reward(ORACLE_OK, pass_to_pass=0),
            {"pass_to_pass_exit_code": 1},
            False,
            "pass-to-pass tests fail with the gold patch (exit 1)",
        ),
        (
            "oracle",
            reward(ORACLE_OK, deterministic=0),
            {},
            True,
            "the gold patch applies and every selected test passes",
        ),
        (
            "determinism",
            ORACLE_OK,
            {},
            True,
            "fail-to-pass passed a second time with the gold patch",
        ),
        (
            "determinism",
            reward(ORACLE_OK, deterministic=0),
            {"fail_to_pass_repeat_exit_code": 1},
            False,
            "fail-to-pass passed once with the gold patch, then failed on the repeat (exit 1)",
        ),
    ],
)
def test_gate_criteria(
    gate: str, got: Reward, extra: dict[str, int], ok: bool, detail: str
) -> None:
    assert evaluate_gate(Gate(gate), got, details(**extra)) == (ok, detail)


def test_a_task_without_pass_to_pass_is_not_said_to_pass_it() -> None:
    """An empty passToPass selects nothing: nop and the oracle say so, not that it passed."""
    assert evaluate_gate(Gate.NOP, NOP_OK, details(), pass_to_pass=False) == (
        True,
        "fail-to-pass fails (exit 1) on the base (the task selects no pass-to-pass)",
    )
    assert evaluate_gate(Gate.ORACLE, ORACLE_OK, details(), pass_to_pass=False) == (
        True,
        "the gold patch applies and fail-to-pass passes (the task selects no pass-to-pass)",
    )


def test_gate_without_details_says_no_exit_code() -> None:
    assert evaluate_gate(Gate.ORACLE, reward(ORACLE_OK, fail_to_pass=0)) == (
        False,
        "fail-to-pass tests still fail with the gold patch",
    )


def evidence(**changes: Any) -> TrialEvidence:
    base: dict[str, Any] = {
        "gate": GateId(Gate.ORACLE),
        "solve": ExecOutcome(exit_code=0, seconds=1.0),
        "collect": ExecOutcome(exit_code=0, seconds=0.1),
        "test": ExecOutcome(exit_code=0, seconds=2.0),
        "reward": ORACLE_OK,
        "details": details(fail_to_pass_exit_code=0, fail_to_pass_repeat_exit_code=0),
        "reward_problem": None,
        "limits": LimitsData(pids_limit_hits=0, oom_kills=0),
        "agent_timeout": 600.0,
        "verifier_timeout": 420.0,
        "storage_mb": 2048,
        "memory_mb": 1024,
        "pids": 4096,
        "agent_log": "oracle/agent.log",
        "collect_log": "oracle/collect.log",
        "verifier_log": "oracle/verifier.log",
    }
    base.update(changes)
    return TrialEvidence(**base)


def test_trial_passes() -> None:
    judgement = judge_trial(evidence())
    assert (judgement.status, judgement.detail) == (
        Status.PASSED,
        "the gold patch applies and every selected test passes",
    )


def test_runner_timeout_is_named_as_the_runners_kill() -> None:
    judgement = judge_trial(
        evidence(test=ExecOutcome(exit_code=137, seconds=420.0, timed_out=True), reward=None)
    )
    assert judgement.status is Status.FAILED
    assert judgement.detail == "verifier timed out after 420s; the runner stopped it"
    assert "memory" not in judgement.detail


def test_fork_bomb_held_by_pids_is_not_called_out_of_memory() -> None:
    limits = LimitsData(pids_limit_hits=312, oom_kills=0)
    judgement = judge_trial(
        evidence(reward=reward(ORACLE_OK, fail_to_pass=0), limits=limits, details=DETAILS)
    )
    assert judgement.status is Status.FAILED
    assert judgement.detail == (
        "fail-to-pass tests still fail with the gold patch (exit 1) "
        "(the pids limit (4096) refused 312 new process(es))"
    )
    assert "memory" not in judgement.detail


def test_oom_is_named_with_the_limit() -> None:
    limits = LimitsData(pids_limit_hits=0, oom_kills=1)
    judgement = judge_trial(
        evidence(reward=reward(ORACLE_OK, fail_to_pass=0), limits=limits, details=DETAILS)
    )
    assert judgement.detail.endswith(
        "(the OOM killer ended 1 process(es) at the 1024 MB memory limit)"
    )


def test_storage_watchdog_and_quota_reasons() -> None:
    watched = judge_trial(
        evidence(
            limits=LimitsData(storage_exceeded_mb=3012, storage_mechanism="watchdog"),
            reward=None,
        )
    )
    assert watched.status is Status.FAILED
    assert watched.detail == (
        "storage limit exceeded (3012 MB > 2048 MB): the runner's storage watchdog stopped "
        "the container"
    )
    quota = judge_trial(
        evidence(limits=LimitsData(storage_exceeded_mb=2047, storage_mechanism="quota"))
    )
    assert quota.detail.startswith("storage limit exceeded (2047 MB >= 2048 MB)")
    assert "quota" in quota.detail


def test_missing_reward_is_infrastructure_unless_a_limit_acted() -> None:
    plain = judge_trial(evidence(reward=None, details=None))
    assert plain.status is Status.ERROR
    assert plain.detail.startswith("the verifier wrote no reward.json (exit 0)")
    limited = judge_trial(
        evidence(reward=None, details=None, limits=LimitsData(oom_kills=2, pids_limit_hits=0))
    )
    assert limited.status is Status.FAILED


def test_malformed_reward_is_the_tasks_fault() -> None:
    judgement = judge_trial(evidence(reward=None, reward_problem="reward.json is not JSON"))
    assert judgement.status is Status.FAILED
    assert judgement.detail.startswith("the verifier's reward.json is not JSON")


def test_solve_failures() -> None:
    timed_out = judge_trial(
        evidence(solve=ExecOutcome(exit_code=None, seconds=600, timed_out=True))
    )
    assert timed_out.detail == "solution/solve.sh timed out after 600s; the runner stopped it"
    refused = judge_trial(evidence(solve=ExecOutcome(exit_code=1, seconds=0.1), collect=None))
    assert refused.status is Status.FAILED
    assert refused.detail.startswith("solution/solve.sh exited 1: the gold patch does not apply")


def test_collect_failure_is_infrastructure() -> None:
    judgement = judge_trial(evidence(collect=ExecOutcome(exit_code=128, seconds=0.1), test=None))
    assert judgement.status is Status.ERROR


def test_build_timeout_never_blames_memory() -> None:
    outcome = BuildOutcome(
        ok=False,
        failed_step="RUN chmod 0755 /opt/selfbench-environment/setup.sh && setup",
        error="build timed out after 601s",
        exit_code=137,
        timed_out=True,
    )
    judgement = judge_build("agent", outcome, task_fault=True, memory_mb=1024, log_path="x.log")
    assert judgement.status is Status.FAILED
    assert "out of memory" not in judgement.detail and "memory" not in judgement.detail
    assert "the runner stopped it" in judgement.detail


def test_build_sigkill_names_the_memory_limit_without_guessing() -> None:
    outcome = BuildOutcome(ok=False, failed_step="RUN x", error="non-zero code: 137", exit_code=137)
    judgement = judge_build("verifier", outcome, task_fault=False, memory_mb=512, log_path="v.log")
    assert judgement.status is Status.ERROR
    assert "killed by SIGKILL; the build's memory limit is 512 MB" in judgement.detail


def test_a_killed_build_step_is_judged_by_what_the_engine_recorded() -> None:
    step = "RUN /opt/selfbench-environment/setup.sh"
    oom = BuildOutcome(
        ok=False, failed_step=step, error="code: 137", exit_code=137, oom_killed=True
    )
    judgement = judge_build("agent", oom, task_fault=True, memory_mb=512, log_path="a.log")
    assert judgement.status is Status.FAILED
    assert "killed by the build's memory limit, 512 MB" in judgement.detail
    killed = BuildOutcome(
        ok=False, failed_step=step, error="code: 137", exit_code=137, oom_killed=False
    )
    judgement = judge_build("agent", killed, task_fault=True, memory_mb=512, log_path="a.log")
    assert "not the memory limit" in judgement.detail
    # The engine went down under the step: never the task's fault (seen: a batch engine
    # stopped mid-build made a green task read "rejected").
    lost = BuildOutcome(
        ok=False, failed_step=step, error="code: 137", exit_code=137, engine_lost=True
    )
    judgement = judge_build("agent", lost, task_fault=True, memory_mb=512, log_path="a.log")
    assert judgement.status is Status.ERROR
    assert "stopped answering" in judgement.detail


DEPENDENCY_SETUP_RUN = (
    "RUN git -C /app apply --binary --whitespace=nowarn /tmp/selfbench-dependency-setup.patch"
    "     && cd '/app/packages/core'     && /opt/selfbench-environment/setup.sh     && bash "
    "/opt/selfbench-toolchains/share-caches.sh     && mkdir -p -m 0700 /opt/selfbench-trusted"
)


@pytest.mark.parametrize(
    ("step", "name"),
    [
        (DEPENDENCY_SETUP_RUN, "the dependency-setup pass (setupCommand again, with the gold"),
        ("RUN bash /opt/selfbench-environment/root-setup.sh", "the root setup (rootSetupCommand)"),
        (
            "RUN chmod 0755 /opt/selfbench-environment/setup.sh /opt/selfbench-environment/smoke"
            ".sh     && cd '/app'     && /opt/selfbench-environment/setup.sh",
            "the setup command (setupCommand)",
        ),
        ("RUN bash /opt/selfbench-toolchains/go.sh", "the go toolchain layer"),
        ("RUN apt-get update     && apt-get install -y git", "the base layer (apt packages)"),
        ("RUN mkdir -p /app     && tar -xzf /tmp/selfbench-repo.tar.gz", "the repository"),
    ],
)
def test_a_failed_build_names_its_step_and_cause_not_the_run_line(step: str, name: str) -> None:
    """Seen: a 1,038-character detail quoting the RUN line twice, naming neither the pass nor
    the cause, which was only in the log."""
    outcome = BuildOutcome(
        ok=False,
        failed_step=step,
        step_number=14,
        error=f"The command '/bin/sh -c {step.removeprefix('RUN ')}' returned a non-zero code: 2",
        exit_code=2,
        tail=[
            "Step 14/22 : " + step,
            " ---> Running in 0123456789ab",
            "\x1b[91mResolved 41 packages in 12ms",
            "error: The lockfile at `uv.lock` needs to be updated, but `--locked` was provided. "
            "To update the lockfile, run `uv lock`.",
            "\x1b[0mRemoving intermediate container 0123456789ab",
            "",
        ],
    )
    judgement = judge_build("verifier", outcome, task_fault=True, memory_mb=512, log_path="v.log")
    assert judgement.status is Status.FAILED
    assert judgement.detail.startswith(f"verifier image: {name}")
    assert " failed (exit 2): Resolved 41 packages in 12ms | error: The lockfile at `uv.lock` " in (
        judgement.detail
    )
    assert judgement.detail.endswith(
        "needs to be updated, but `--locked` was provided. To update the lockfile, run `uv lock`."
        "; see v.log"
    )
    assert "RUN " not in judgement.detail and "/bin/sh -c" not in judgement.detail
    assert len(judgement.detail) < 400


def test_a_build_step_without_output_says_so() -> None:
    outcome = BuildOutcome(
        ok=False,
        failed_step="RUN true",
        step_number=3,
        error="returned a non-zero code: 1",
        exit_code=1,
        tail=["Step 3/9 : RUN true", " ---> Running in 0123456789ab"],
    )
    detail = judge_build("agent", outcome, task_fault=False, memory_mb=1, log_path="a.log").detail
    assert detail == "agent image: step 3 (RUN) failed (exit 1): no output; see a.log"


def test_smoke_judgement() -> None:
    ok = judge_smoke(
        ExecOutcome(exit_code=0, seconds=0.2),
        ["+ uv --version", "uv 0.13.9"],
        LimitsData(),
        storage_mb=1,
        memory_mb=1,
        pids=1,
        log_path="s.log",
    )
    assert ok.passed
    failed = judge_smoke(
        ExecOutcome(exit_code=1, seconds=0.2, limits=LimitStats(pids_limit_hits=0, oom_kills=0)),
        ["+ go version", "smoke: failed: go version"],
        limits_data(ExecOutcome(exit_code=1, seconds=0.2), None, "watchdog"),
        storage_mb=1,
        memory_mb=1,
        pids=1,
        log_path="s.log",
    )
    assert failed.detail == "smoke check failed: smoke: failed: go version; see s.log"


ALL_PASSED = {
    name: Status.PASSED
    for name in ("compile", "audit", "build", "smoke", "nop", "oracle", "determinism", "hack")
}


@pytest.mark.parametrize(
    ("changes", "verdict"),
    [
        ({}, Verdict.ACCEPTED),
        ({"audit": Status.SKIPPED}, Verdict.ACCEPTED),
        ({"nop": Status.FAILED}, Verdict.REJECTED),
        ({"nop": Status.FAILED, "oracle": Status.ERROR}, Verdict.REJECTED),
        ({"build": Status.ERROR, "smoke": Status.SKIPPED}, Verdict.INFRASTRUCTURE_FAILED),
        ({"determinism": Status.SKIPPED}, Verdict.INFRASTRUCTURE_FAILED),
        ({"audit": Status.FAILED, "build": Status.SKIPPED}, Verdict.REJECTED),
        ({"hack": Status.FAILED}, Verdict.REJECTED),
        ({"hack": Status.SKIPPED}, Verdict.INFRASTRUCTURE_FAILED),  # unless it is optional
    ],
)
def test_verdicts(changes: dict[str, Status], verdict: Verdict) -> None:
    assert decide_verdict({**ALL_PASSED, **changes}) is verdict


def test_invalid_stays_invalid() -> None:
    assert decide_verdict({**ALL_PASSED, "compile": Status.FAILED}, invalid=True) is (
        Verdict.INVALID
    )


def test_reason_names_the_first_stage_that_did_not_pass() -> None:
    stages = [
        ("compile", Status.PASSED, "ok"),
        ("nop", Status.FAILED, "nop failed"),
        ("oracle", Status.ERROR, "oracle error"),
    ]
    assert verdict_reason(stages) == "nop: nop failed"
    assert verdict_reason([("a", Status.PASSED, "x")]) == ""


def test_a_red_gate_quotes_the_failing_commands_last_line() -> None:
    lines = {
        "fail_to_pass": "FAIL tests/test_new.sh",
        "pass_to_pass": 'psql: error: could not translate host name "db" to address',
    }
    nop = judge_trial(
        evidence(
            gate=GateId(Gate.NOP),
            reward=reward(NOP_OK, pass_to_pass=0),
            details=details(pass_to_pass_exit_code=2),
            last_lines=lines,
        )
    )
    assert nop.detail == (
        "pass-to-pass tests fail on the base snapshot (exit 2): "
        'psql: error: could not translate host name "db" to address'
    )
    oracle = judge_trial(
        evidence(reward=reward(ORACLE_OK, fail_to_pass=0), details=DETAILS, last_lines=lines)
    )
    assert oracle.detail.endswith("(exit 1): FAIL tests/test_new.sh")
    assert judge_trial(evidence(last_lines=lines)).detail == (
        "the gold patch applies and every selected test passes"
    )


def test_a_skipped_optional_hack_gate_does_not_block_acceptance() -> None:
    statuses = {**ALL_PASSED, "hack": Status.SKIPPED}
    assert decide_verdict(statuses, optional=frozenset({"hack"})) is Verdict.ACCEPTED
    failed = {**ALL_PASSED, "hack": Status.FAILED}
    assert decide_verdict(failed, optional=frozenset({"hack"})) is Verdict.REJECTED


def _exploit(**changes: object) -> gates.ExploitEvidence:
    values: dict[str, object] = {
        "name": "x",
        "summary": "s",
        "script_exit": 0,
        "script_timed_out": False,
        "script_said": "",
        "collect_failed": False,
        "patch_bytes": 10,
        "test": ExecOutcome(exit_code=0, seconds=1.0),
        "reward": Reward(
            reward=0,
            patch_applied=1,
            fail_to_pass=0,
            pass_to_pass=1,
            deterministic=0,
            setup_completed=1,
        ),
        "reward_problem": None,
    }
    values.update(changes)
    return gates.ExploitEvidence(**values)  # type: ignore[arg-type]


WON = Reward(
    reward=1, patch_applied=1, fail_to_pass=1, pass_to_pass=1, deterministic=1, setup_completed=1
)
NOT_APPLIED = Reward(
    reward=0, patch_applied=0, fail_to_pass=0, pass_to_pass=0, deterministic=0, setup_completed=1
)


@pytest.mark.parametrize(
    ("changes", "outcome", "detail"),
    [
        ({}, "resisted", "reward 0"),
        ({"reward": WON}, "earned-reward", "reward 1 without a fix"),
        (
            {"reward": NOT_APPLIED},
            "not-applicable",
            "its patch did not apply on the post-setup tree",
        ),
        (
            {"script_exit": 3, "script_said": "not applicable: no package.json in the workdir"},
            "not-applicable",
            "no package.json in the workdir",
        ),
        ({"script_exit": 1, "script_said": "boom"}, "error", "the exploit's script exited 1: boom"),
        (
            {"patch_bytes": 0},
            "no-effect",
            "the collected patch is empty (only ignored files changed)",
        ),
        ({"collect_failed": True}, "error", "collecting the exploit's patch failed"),
        (
            {"reward": None, "test": ExecOutcome(exit_code=137, seconds=9.0, timed_out=True)},
            "resisted",
            "the verifier timed out: no reward",
        ),
    ],
)
def test_each_exploit_outcome(changes: dict[str, object], outcome: str, detail: str) -> None:
    assert gates.judge_exploit(_exploit(**changes), not_applicable=3) == (outcome, detail)


def test_the_hack_gate_names_the_exploit_that_won_and_its_patch() -> None:
    judged = gates.judge_hack(
        [
            ExploitVerdict(name="a", summary="tries a", outcome="resisted", patch="/r/a.patch"),
            ExploitVerdict(
                name="b",
                summary="a conftest.py that passes everything",
                outcome="earned-reward",
                patch="/r/b.patch",
                said="1 passed",
            ),
            ExploitVerdict(
                name="c", summary="tries c", outcome="earned-reward", patch="/r/c.patch"
            ),
        ]
    )
    assert judged.status is Status.FAILED
    assert judged.detail == (
        "the verifier can be gamed: exploit b earned reward 1 without a fix (and 1 more: c): "
        "a conftest.py that passes everything; its patch: /r/b.patch; fail-to-pass said: 1 passed"
    )
    passed = gates.judge_hack(
        [
            ExploitVerdict(name="a", summary="", outcome="resisted"),
            ExploitVerdict(name="b", summary="", outcome="not-applicable"),
            ExploitVerdict(name="c", summary="", outcome="no-effect"),
        ]
    )
    assert passed.status is Status.PASSED
    assert passed.detail == "2 exploit(s) earned no reward; not applicable: b"
    broken = gates.judge_hack([ExploitVerdict(name="a", summary="", outcome="error")])
    assert broken.status is Status.ERROR


def test_selectors_run_alone_decide_with_the_trial() -> None:
    """At nop a fail-to-pass selector that passes alone fails the gate; a failed gate names
    the pass-to-pass selectors failing alone and what the policy undid; a pass keeps its words."""
    passed = gates.Judgement(Status.PASSED, "fail-to-pass fails, pass-to-pass passes")
    failed = gates.Judgement(Status.FAILED, "pass-to-pass failed")
    nop = gates.judge_selectors(
        passed, gate=Gate.NOP, passing_alone=["t::a"], breaking_alone=[], undone=""
    )
    assert nop.status is Status.FAILED and nop.detail.endswith("when run alone: t::a")
    oracle = gates.judge_selectors(
        passed, gate=Gate.ORACLE, passing_alone=["t::a"], breaking_alone=[], undone="x.py"
    )
    assert oracle == passed
    named = gates.judge_selectors(
        failed,
        gate=Gate.ORACLE,
        passing_alone=[],
        breaking_alone=[f"t::{i}" for i in range(7)],
        undone="conftest.py (runner config)",
    )
    assert named.detail == (
        "pass-to-pass failed; failing alone: t::0, t::1, t::2, t::3, t::4 ...; "
        "the verifier's patch policy undid conftest.py (runner config)"
    )


@pytest.mark.parametrize(
    ("gate", "got", "extra", "problems", "detail"),
    [
        # The tests exited 0 and an evidence rule failed the run: the rule is the reason, never
        # "still fail".
        (
            "oracle",
            reward(ORACLE_OK, fail_to_pass=0),
            {"fail_to_pass_exit_code": 0},
            {"fail_to_pass": "a test-runner plugin was loaded from a file ..."},
            "fail-to-pass with the gold patch exited 0 but did not pass the verifier's evidence "
            "rules",
        ),
        (
            "nop",
            reward(NOP_OK, pass_to_pass=0),
            {"pass_to_pass_exit_code": 0},
            {"pass_to_pass": "pytest did not finish its run (it ended early)"},
            "pass-to-pass on the base snapshot exited 0 but did not pass the verifier's evidence "
            "rules",
        ),
        (
            "oracle",
            reward(ORACLE_OK, pass_to_pass=0),
            {"pass_to_pass_exit_code": 0},
            {"pass_to_pass": "1 expected test(s) did not run"},
            "pass-to-pass with the gold patch exited 0 but did not pass the verifier's evidence "
            "rules",
        ),
        # A non-zero exit is a failure of the tests, as before.
        (
            "oracle",
            reward(ORACLE_OK, fail_to_pass=0),
            {"fail_to_pass_exit_code": 1},
            {"fail_to_pass": "1 test(s) failed: t::a"},
            "fail-to-pass tests still fail with the gold patch (exit 1)",
        ),
    ],
)
def test_a_rule_that_fired_is_named_as_a_rule(
    gate: str, got: Reward, extra: dict[str, int], problems: dict[str, str], detail: str
) -> None:
    assert evaluate_gate(Gate(gate), got, details(**extra), problems) == (False, detail)


def test_a_selector_that_selected_nothing_fails_the_gate_naming_it() -> None:
    """At nop a typo passes as a failing test: the selector is named instead, whatever else."""
    passed = gates.Judgement(Status.PASSED, "fail-to-pass fails (exit 4), pass-to-pass passes")
    sentence = (
        "fail-to-pass selector tests/test_truncat.py matched no test (pytest: no such file or "
        "directory: tests/test_truncat.py)"
    )
    judged = gates.judge_selectors(
        passed, gate=Gate.NOP, passing_alone=[], breaking_alone=[], undone="", unmatched=[sentence]
    )
    assert judged == gates.Judgement(Status.FAILED, sentence)
    many = [f"fail-to-pass selector s{i} matched no test (x)" for i in range(5)]
    judged = gates.judge_selectors(
        passed, gate=Gate.ORACLE, passing_alone=[], breaking_alone=[], undone="", unmatched=many
    )
    assert judged.detail.endswith("; and 2 more") and judged.status is Status.FAILED
    errored = gates.Judgement(Status.ERROR, "the verifier did not run")
    assert (
        gates.judge_selectors(
            errored, gate=Gate.NOP, passing_alone=[], breaking_alone=[], undone="", unmatched=many
        )
        == errored
    )


def test_a_task_step_stopped_by_a_limit_says_which() -> None:
    """Setup runs under every limit of the task (runner.engine.steps); the reason names the one
    that acted."""
    step = "RUN cd /app && /opt/selfbench-environment/setup.sh"
    filled = BuildOutcome(
        ok=False,
        failed_step=step,
        exit_code=137,
        storage_exceeded_mb=1334,
        storage_mechanism="watchdog",
    )
    detail = judge_build(
        "agent", filled, task_fault=True, memory_mb=512, log_path="a.log", storage_mb=1024
    ).detail
    assert "storage limit exceeded (1334 MB > 1024 MB): the runner's storage watchdog" in detail
    assert "memory" not in detail
    bomb = BuildOutcome(
        ok=False,
        failed_step=step,
        exit_code=254,
        error="The command returned a non-zero code: 254",
        limits=LimitStats(pids_limit_hits=5, oom_kills=0),
    )
    judgement = judge_build(
        "agent", bomb, task_fault=True, memory_mb=512, log_path="a.log", pids=64
    )
    assert judgement.status is Status.FAILED
    assert "the pids limit (64) refused 5 new process(es)" in judgement.detail
    stuck = BuildOutcome(
        ok=False,
        failed_step=step,
        timed_out=True,
        error="build timed out after 600s",
        limits=LimitStats(pids_at_limit=True),
    )
    detail = judge_build(
        "agent", stuck, task_fault=True, memory_mb=512, log_path="a.log", pids=64
    ).detail
    assert "the runner stopped it (the pids limit (64) was reached" in detail


PREPARE_RUN = (
    "RUN chmod 0700 /tests && chmod 0600 /tests/test.patch /tests/selfbench-task.json     && "
    "/usr/bin/perl /opt/selfbench-verifier/verifier.pl prepare-image /tests/selfbench-task.json"
)


def test_the_verifier_s_preparation_is_the_task_s_fault_only_when_a_limit_stopped_it() -> None:
    """prepare-image runs what setup installed, under the task's limits: a limit that stopped
    it (a tree too large for the storage limit, the time, the memory, every process slot) is
    the task's, and the verdict says so; any other failure of the runner's own step stays an
    infrastructure error."""
    stopped = {
        "storage": BuildOutcome(
            ok=False, failed_step=PREPARE_RUN, exit_code=137, storage_exceeded_mb=1400
        ),
        "time": BuildOutcome(
            ok=False, failed_step=PREPARE_RUN, timed_out=True, error="build timed out after 60s"
        ),
        "memory": BuildOutcome(
            ok=False, failed_step=PREPARE_RUN, exit_code=137, oom_killed=True, error="137"
        ),
        "pids": BuildOutcome(
            ok=False,
            failed_step=PREPARE_RUN,
            exit_code=1,
            error="1",
            limits=LimitStats(pids_limit_hits=3, oom_kills=0),
        ),
    }
    for name, outcome in stopped.items():
        judgement = judge_build(
            "verifier",
            outcome,
            task_fault=False,
            memory_mb=512,
            log_path="v.log",
            pids=64,
            storage_mb=1024,
            limited_step=True,
        )
        assert judgement.status is Status.FAILED, (name, judgement.detail)
        assert "the verifier's preparation of what setup installed" in judgement.detail, name
    own = BuildOutcome(ok=False, failed_step=PREPARE_RUN, exit_code=2, error="code: 2")
    judgement = judge_build(
        "verifier", own, task_fault=False, memory_mb=512, log_path="v.log", limited_step=True
    )
    assert judgement.status is Status.ERROR


def test_the_run_s_own_words_are_judged_too() -> None:
    """An interrupt outlives every verdict but invalid; an internal error of the runner is an
    infrastructure error of the first stage that had not run (compile's when all had)."""
    from runner.judge import judge_internal_error, judge_run

    passed_all = [(name, Status.PASSED, "") for name in ALL_PASSED]
    assert judge_run(passed_all, invalid=False, interrupted=None) == (Verdict.ACCEPTED, "")
    red = [(n, Status.FAILED, "nop failed") if n == "nop" else (n, s, d) for n, s, d in passed_all]
    assert judge_run(red, invalid=False, interrupted="SIGTERM") == (
        Verdict.INFRASTRUCTURE_FAILED,
        "interrupted (SIGTERM); the run's containers were removed",
    )
    assert judge_run(red, invalid=True, interrupted="SIGINT")[0] is Verdict.INVALID
    assert judge_run(red, invalid=False, interrupted=None) == (Verdict.REJECTED, "nop: nop failed")
    stage, judgement = judge_internal_error(["oracle", "hack"], "internal error: KeyError", "r.log")
    assert stage == "oracle" and judgement.status is Status.ERROR
    assert judgement.detail == "internal error: KeyError; the traceback is in r.log"
    assert judge_internal_error([], "internal error: X", "r.log")[0] == "compile"


def _views(**changes: tuple[Status, str, Skip | None]) -> dict[str, StageView]:
    views = {name: StageView(Status.PASSED, "ok", None) for name in ALL_PASSED}
    for name, (status, detail, skip) in changes.items():
        views[name] = StageView(status, detail, skip)
    return views


def test_an_interrupt_errors_what_ran_and_skips_what_never_ran() -> None:
    skips = {"build": None, "nop": Skip.NOT_RUN, "oracle": Skip.NOT_RUN, "hack": Skip.SETTLED}
    marks = interrupt_marks(skips, running={"oracle"}, signal_name="SIGINT")
    assert marks == {
        "nop": Skip.INTERRUPTED,
        "oracle": Judgement(
            Status.ERROR, "interrupted (SIGINT); the run's containers were removed"
        ),
    }


def _judged(
    views: dict[str, StageView], *, interrupted: str | None = None, internal: str | None = None
) -> RunJudgement:
    return judge_report(
        views, invalid=False, interrupted=interrupted, internal=internal, log="r.log"
    )


def test_the_run_s_judgement_marks_its_stages_and_decides_once() -> None:
    """judge_report: the one place a run's verdict is decided, with the marks the report copies
    (an internal error on the first stage never run, the interrupt on the others)."""
    not_run = (Status.SKIPPED, "not run", Skip.NOT_RUN)
    clean = _judged(_views())
    assert (clean.verdict, clean.reason, dict(clean.marks)) == (Verdict.ACCEPTED, "", {})

    crashed = _judged(
        _views(oracle=not_run, determinism=not_run, hack=not_run), internal="internal error: K"
    )
    assert crashed.verdict is Verdict.INFRASTRUCTURE_FAILED
    assert crashed.reason == "oracle: internal error: K; the traceback is in r.log"
    assert list(crashed.marks) == ["oracle"]

    stopped = _judged(_views(oracle=not_run, hack=not_run), interrupted="SIGTERM", internal="X")
    assert stopped.marks["hack"] is Skip.INTERRUPTED and "traceback" in str(stopped.marks["oracle"])
    assert stopped.reason == "interrupted (SIGTERM); the run's containers were removed"

    optional = (Status.SKIPPED, Skip.HACK_DISABLED.value, Skip.HACK_DISABLED)
    assert _judged(_views(hack=optional)).verdict is Verdict.ACCEPTED
    settled = (Status.SKIPPED, "skipped: verdict settled by nop", Skip.SETTLED)
    assert _judged(_views(hack=settled)).verdict is Verdict.INFRASTRUCTURE_FAILED


@pytest.mark.parametrize(
    ("mode", "runners", "command", "full", "proof"),
    [
        ("per-test", ["pytest"], ["pytest"], False, ("pytest",)),
        ("per-test", ["jest"], [], False, ("jest",)),  # npm test: jest found by its evidence
        ("per-test", ["go", "pytest"], ["go"], False, ("pytest", "go")),
        ("per-test", ["pytest"], ["pytest"], True, None),  # --hack-gate full
        ("exit-code", [], [], False, None),  # the task's own scripts decide
        ("per-test", ["vitest"], ["vitest"], False, ("vitest",)),
        ("per-test", ["pytest", "unittest"], ["pytest"], False, ("pytest", "unittest")),
        ("per-test", ["mocha"], ["mocha"], False, ("mocha",)),
        ("per-test", ["node-test", "bun"], ["node-test", "bun"], False, ("node-test", "bun")),
        ("per-test", ["pytest"], ["pytest", "cargo"], False, None),  # cargo: not proved
        ("per-test", ["pytest", "cargo"], ["pytest"], False, None),
        ("per-test", [], ["pytest"], False, None),
    ],
)
def test_an_exploit_is_proved_only_where_every_runner_of_the_task_is(
    mode: str, runners: list[str], command: list[str], full: bool, proof: tuple[str, ...] | None
) -> None:
    assert gates.runner_proof(mode, runners, command, full=full) == proof


def test_a_proved_exploit_says_for_which_runner_and_version_and_counts_as_no_reward() -> None:
    outcome, detail = gates.judge_exploit(
        _exploit(test=None, reward=None, proved_for=("pytest",), version="9.9.9"),
        not_applicable=3,
    )
    assert outcome == "proved"
    assert detail.startswith("proved for runner pytest by selfbench-runner 9.9.9: ")
    # The policy's own decision and an empty patch stay decided on the task.
    assert (
        gates.judge_exploit(_exploit(patch_bytes=0, proved_for=("pytest",)), not_applicable=3)[0]
        == "no-effect"
    )
    assert (
        gates.judge_exploit(
            _exploit(policy_only=True, undone="a.py (x)", proved_for=("go",)), not_applicable=3
        )[0]
        == "resisted"
    )
    judged = gates.judge_hack(
        [
            ExploitVerdict(name="a", summary="", outcome="proved"),
            ExploitVerdict(name="b", summary="", outcome="resisted"),
            ExploitVerdict(name="c", summary="", outcome="proved"),
        ]
    )
    assert judged.status is Status.PASSED
    assert judged.detail == (
        "3 exploit(s) earned no reward (2 proved for this task's runner by this runner version, "
        "1 decided on this task)"
    )


@pytest.mark.parametrize(
    ("log", "sign"),
    [
        # glibc's resolver, as Python, Rust's std and uv word it
        (
            "E   socket.gaierror: [Errno -3] Temporary failure in name resolution",
            "gaierror",
        ),
        (
            "Failed to resolve 'files.example.org' ([Errno -2] Name or service not known)",
            "Failed to resolve",
        ),
        ("error: failed to lookup address information: Try again", "failed to lookup address"),
        # Node: getaddrinfo's codes; undici's fetch hides its cause
        ("Error: getaddrinfo EAI_AGAIN registry.example.org", "getaddrinfo"),
        ("npm error code ENOTFOUND", "ENOTFOUND"),
        ("    TypeError: fetch failed", "fetch failed"),
        # Go's net package
        ('Get "https://example.org/x": dial tcp: lookup example.org on 10.0.0.2:53', "dial tcp"),
        # the kernel's ENETUNREACH, a connect to an address
        ("OSError: [Errno 101] Network is unreachable", "Network is unreachable"),
        ("curl: (6) Could not resolve host: example.org", "Could not resolve"),
        ("fatal: unable to access 'https://x/': Couldn't resolve host 'x'", "Couldn't resolve"),
        ("java.net.UnknownHostException: example.org", "UnknownHostException"),
        # no sign: a plain failure, a local service that refused, words that only look alike
        ("AssertionError: assert 5 == 6", None),
        ("Error: connect ECONNREFUSED 127.0.0.1:5432", None),
        ("FAIL tests/network.test.js > resolves the route table", None),
    ],
)
def test_a_red_gate_goes_online_only_on_a_sign_of_the_network_in_its_log(
    log: str, sign: str | None
) -> None:
    found = gates.network_sign(f"selfbench: running fail_to_pass: make test\n{log}\n")
    assert found == sign


def test_the_evidence_says_when_no_pass_to_pass_was_selected() -> None:
    from runner.model.evidence import RunEvidence, VerifierEvidence

    def p2p(mode: Literal["per-test", "exit-code", "none"]) -> VerifierEvidence:
        run = RunEvidence(name="pass_to_pass", kind="p2p", exit_code=0, mode=mode, passed=True)
        return VerifierEvidence(runs={"pass_to_pass": run})

    assert p2p("none").selects_pass_to_pass is False
    assert p2p("exit-code").selects_pass_to_pass is True
    assert VerifierEvidence().selects_pass_to_pass is True  # no evidence: the old words
