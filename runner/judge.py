"""Judgement (pure): the seeds' pass criteria per gate, the verdict, and reasons that say what
happened. The runner knows when it stopped something itself (a deadline, the storage watchdog)
and reads what the limits did from the container's cgroup, so a fork bomb held by the pids
limit is never reported as an out-of-memory kill, nor the runner's own kill as one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from runner.model.census import PolicyChange
from runner.model.report import ExploitOutcome, LimitsData, Status, Verdict
from runner.model.reward import Reward, VerifierDetails
from runner.model.stages import DOCKER_STAGES
from runner.plan.runtime import BuildOutcome, ExecOutcome


@dataclass(frozen=True)
class Judgement:
    status: Status
    detail: str

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED


def _passed(detail: str) -> Judgement:
    return Judgement(Status.PASSED, detail)


def _failed(detail: str) -> Judgement:
    return Judgement(Status.FAILED, detail)


def _error(detail: str) -> Judgement:
    return Judgement(Status.ERROR, detail)


# ---- limits ------------------------------------------------------------------------------------


def limits_data(
    outcome: ExecOutcome | None, details: VerifierDetails | None, mechanism: str | None
) -> LimitsData:
    """What the limits did, merged from the runner's view and test.sh's cgroup readings."""
    pids = max(
        outcome.limits.pids_limit_hits if outcome else -1,
        details.pids_limit_hits if details else -1,
    )
    ooms = max(outcome.limits.oom_kills if outcome else -1, details.oom_kills if details else -1)
    return LimitsData(
        pids_limit_hits=pids,
        oom_kills=ooms,
        storage_exceeded_mb=outcome.storage_exceeded_mb if outcome else None,
        storage_mechanism=mechanism,
    )


def storage_reason(used_mb: int, limit_mb: int, mechanism: str | None) -> str:
    if mechanism == "quota":
        return (
            f"storage limit exceeded ({used_mb} MB >= {limit_mb} MB): the engine's quota "
            "refused further writes"
        )
    return (
        f"storage limit exceeded ({used_mb} MB > {limit_mb} MB): the runner's storage "
        "watchdog stopped the container"
    )


def limit_notes(limits: LimitsData, *, memory_mb: int, pids: int) -> str:
    """A clause naming each limit that acted, or ''."""
    notes = []
    if limits.oom_kills > 0:
        notes.append(
            f"the OOM killer ended {limits.oom_kills} process(es) at the {memory_mb} MB "
            "memory limit"
        )
    if limits.pids_limit_hits > 0:
        notes.append(f"the pids limit ({pids}) refused {limits.pids_limit_hits} new process(es)")
    return "; ".join(notes)


def _with_notes(detail: str, limits: LimitsData, *, memory_mb: int, pids: int) -> str:
    notes = limit_notes(limits, memory_mb=memory_mb, pids=pids)
    return f"{detail} ({notes})" if notes else detail


# ---- build --------------------------------------------------------------------------------------


def judge_build(
    kind: str, outcome: BuildOutcome, *, task_fault: bool, memory_mb: int, log_path: str
) -> Judgement:
    step = f"`{outcome.failed_step}`" if outcome.failed_step else "the build"
    if outcome.timed_out:
        # The runner stopped it: never blame memory for the runner's own kill.
        detail = (
            f"{kind} image: {outcome.error} while running {step}; the runner stopped it; "
            f"see {log_path}"
        )
        return _failed(detail) if task_fault else _error(detail)
    why = outcome.error or "failed"
    if outcome.engine_lost:
        # Not the task: the engine went away under the step (a restart, a shutdown).
        return _error(
            f"{kind} image: {step} was killed and the Docker engine stopped answering: "
            f"{why}; see {log_path}"
        )
    if outcome.exit_code == 137:
        if outcome.oom_killed:
            why += f" (killed by the build's memory limit, {memory_mb} MB)"
        elif outcome.oom_killed is None:
            why += f" (killed by SIGKILL; the build's memory limit is {memory_mb} MB)"
        else:
            why += " (killed by SIGKILL; not the memory limit: the engine recorded no OOM kill)"
    detail = f"{kind} image: {step} failed: {why}; see {log_path}"
    return _failed(detail) if task_fault else _error(detail)


# ---- smoke --------------------------------------------------------------------------------------


def judge_smoke(
    outcome: ExecOutcome,
    lines: Sequence[str],
    limits: LimitsData,
    *,
    storage_mb: int,
    memory_mb: int,
    pids: int,
    log_path: str,
) -> Judgement:
    if outcome.timed_out:
        return _failed(
            f"smoke command timed out after {int(outcome.seconds)}s; the runner stopped it"
        )
    if limits.storage_exceeded_mb is not None:
        return _failed(
            storage_reason(limits.storage_exceeded_mb, storage_mb, limits.storage_mechanism)
        )
    if outcome.exit_code != 0:
        failing = next(
            (ln for ln in reversed(lines) if ln.startswith("smoke: failed")),
            f"exit {outcome.exit_code}",
        )
        detail = f"smoke check failed: {failing}; see {log_path}"
        return _failed(_with_notes(detail, limits, memory_mb=memory_mb, pids=pids))
    return _passed("smoke checks passed in the verifier image")


# ---- nop and oracle -----------------------------------------------------------------------------


def evaluate_gate(
    gate: str, reward: Reward, details: VerifierDetails | None = None
) -> tuple[bool, str]:
    """The seeds' pass criteria, with one sentence saying why."""
    f2p_exit = details.fail_to_pass_exit_code if details else None
    p2p_exit = details.pass_to_pass_exit_code if details else None

    def exit_note(code: int | None) -> str:
        return f" (exit {code})" if code is not None else ""

    if reward.setup_completed != 1:
        return False, "setup did not complete in the verifier image"
    if gate == "nop":
        if reward.patch_applied != 1:
            return False, "the empty agent patch or test.patch did not apply on the base snapshot"
        if reward.fail_to_pass != 0:
            return False, "fail-to-pass tests already pass on the base snapshot"
        if reward.pass_to_pass != 1:
            return False, f"pass-to-pass tests fail on the base snapshot{exit_note(p2p_exit)}"
        return True, (
            f"fail-to-pass fails{exit_note(f2p_exit)} and pass-to-pass passes on the base"
        )
    if gate == "oracle":
        if reward.patch_applied != 1:
            return False, "the gold patch or test.patch does not apply"
        if reward.fail_to_pass != 1:
            return False, (
                f"fail-to-pass tests still fail with the gold patch{exit_note(f2p_exit)}"
            )
        if reward.pass_to_pass != 1:
            return False, f"pass-to-pass tests fail with the gold patch{exit_note(p2p_exit)}"
        return True, "the gold patch applies and every selected test passes"
    if reward.deterministic != 1:
        repeat = details.fail_to_pass_repeat_exit_code if details else None
        return False, (
            "fail-to-pass passed once with the gold patch, then failed on the repeat"
            f"{exit_note(repeat)}"
        )
    return True, "fail-to-pass passed a second time with the gold patch"


def tests_failed(gate: str, reward: Reward) -> bool:
    """Whether a red nop or oracle is the tests' (not a patch that did not apply, not setup)."""
    if reward.setup_completed != 1 or reward.patch_applied != 1:
        return False
    if gate == "nop":
        return reward.pass_to_pass != 1
    return reward.fail_to_pass != 1 or reward.pass_to_pass != 1


@dataclass(frozen=True, kw_only=True)
class TrialEvidence:
    gate: str
    solve: ExecOutcome | None
    collect: ExecOutcome | None
    test: ExecOutcome | None
    reward: Reward | None
    details: VerifierDetails | None
    reward_problem: str | None  # reward.json present but malformed
    limits: LimitsData
    agent_timeout: float
    verifier_timeout: float
    storage_mb: int
    memory_mb: int
    pids: int
    agent_log: str
    collect_log: str
    verifier_log: str
    # The last meaningful line each test command printed (`fail_to_pass`, `pass_to_pass`):
    # a red gate quotes the failing one.
    last_lines: Mapping[str, str] = field(default_factory=dict)
    # The first problem the per-test evidence found in each run (a red gate says it first).
    problems: Mapping[str, str] = field(default_factory=dict)


def _quote(reward: Reward, gate: str, lines: Mapping[str, str], problems: Mapping[str, str]) -> str:
    """`: <what the evidence found>` (else the failing command's last line) for a red gate, or
    ''."""
    if gate == "nop" and reward.pass_to_pass != 1:
        run = "pass_to_pass"
    elif gate == "oracle" and reward.fail_to_pass != 1:
        run = "fail_to_pass"
    elif gate == "oracle" and reward.pass_to_pass != 1:
        run = "pass_to_pass"
    elif gate == "oracle" and reward.deterministic != 1:
        run = "fail_to_pass_repeat"
    else:
        return ""
    line = problems.get(run) or lines.get(run)
    if not line:
        return ""
    return f": {line[:300]}"


def judge_trial(evidence: TrialEvidence) -> Judgement:
    e = evidence
    notes = {"memory_mb": e.memory_mb, "pids": e.pids}
    if e.solve is not None:
        if e.solve.timed_out:
            return _failed(
                f"solution/solve.sh timed out after {int(e.agent_timeout)}s; the runner stopped it"
            )
        if e.solve.storage_exceeded_mb is not None:
            return _failed(
                storage_reason(
                    e.solve.storage_exceeded_mb, e.storage_mb, e.limits.storage_mechanism
                )
            )
        if e.solve.exit_code != 0:
            detail = (
                f"solution/solve.sh exited {e.solve.exit_code}: the gold patch does not apply "
                f"to the post-setup tree; see {e.agent_log}"
            )
            return _failed(_with_notes(detail, e.limits, **notes))
    if e.collect is not None and (e.collect.timed_out or e.collect.exit_code != 0):
        what = "timed out" if e.collect.timed_out else f"failed (exit {e.collect.exit_code})"
        return _error(f"collecting the agent patch {what}; see {e.collect_log}")
    if e.test is None:
        return _error("the verifier did not run")
    if e.test.timed_out:
        return _failed(
            f"verifier timed out after {int(e.verifier_timeout)}s; the runner stopped it"
        )
    if e.limits.storage_exceeded_mb is not None:
        return _failed(
            storage_reason(e.limits.storage_exceeded_mb, e.storage_mb, e.limits.storage_mechanism)
        )
    if e.reward is None:
        if e.reward_problem:
            return _failed(f"the verifier's {e.reward_problem}; see {e.verifier_log}")
        if e.limits.oom_kills > 0 or e.limits.pids_limit_hits > 0:
            detail = f"the verifier wrote no reward.json (exit {e.test.exit_code})"
            return _failed(_with_notes(detail, e.limits, **notes))
        return _error(
            f"the verifier wrote no reward.json (exit {e.test.exit_code}); see {e.verifier_log}"
        )
    ok, detail = evaluate_gate(e.gate, e.reward, e.details)
    if not ok:
        detail += _quote(e.reward, e.gate, e.last_lines, e.problems)
    detail = _with_notes(detail, e.limits, **notes)
    return _passed(detail) if ok else _failed(detail)


def probe_outcome(
    reward: Reward | None,
    test: ExecOutcome | None,
    alone: Sequence[tuple[str, int]],
    fail_to_pass: Sequence[str],
) -> tuple[bool, str, list[str]]:
    """One probe run: (passed, what failed, the fail-to-pass selectors that failed). `alone` is
    each selector run by itself after the selection failed (test.sh's selectors.tsv)."""
    if reward is None:
        if test is not None and test.timed_out:
            return False, "the verifier timed out", []
        return False, f"the verifier wrote no reward (exit {test.exit_code if test else None})", []
    if reward.fail_to_pass != 1:
        failing = [selector for selector, code in alone if code != 0]
        if alone and not failing:
            return False, "fail-to-pass (each selector passes alone: together they fail)", []
        if not alone and len(fail_to_pass) == 1:
            failing = list(fail_to_pass)
        return False, "fail-to-pass", failing
    if reward.deterministic != 1:
        return False, "fail-to-pass on its repeat", []
    if reward.pass_to_pass != 1:
        return False, "pass-to-pass", []
    return True, "", []


def selector_rates(
    runs: Sequence[tuple[bool, str, Sequence[str]]], fail_to_pass: Sequence[str]
) -> list[tuple[str, int, int]]:
    """(selector, runs it passed, runs) over the probe runs. A run whose fail-to-pass failed
    without naming selectors counts against every selector (it could not be isolated)."""
    rates = []
    for selector in fail_to_pass:
        passed = 0
        for ok, what, failing in runs:
            if ok or what == "pass-to-pass" or (failing and selector not in failing):
                passed += 1
        rates.append((selector, passed, len(runs)))
    return rates


def judge_probe(
    runs: Sequence[tuple[str, bool, str, Sequence[str]]],
    changed_by: Sequence[str],
    where: str,
) -> Judgement:
    """runs: (name, passed, what failed, failing selectors) per perturbed run; changed_by: the
    perturbations that failed alone."""
    failed = [r for r in runs if not r[1]]
    if not failed:
        return _passed(
            "fail-to-pass passed a second time with the gold patch, and under "
            f"{len(runs)} perturbed run(s)"
        )
    whats = ", ".join(dict.fromkeys(r[2] for r in failed))
    selectors = list(dict.fromkeys(s for r in failed for s in r[3]))
    detail = f"flaky: {whats} failed in {len(failed)} of {len(runs)} perturbed run(s)"
    if selectors:
        detail += f" ({', '.join(selectors[:5])}{' ...' if len(selectors) > 5 else ''})"
    if changed_by:
        detail += f"; changed by {'; '.join(changed_by)}"
    else:
        detail += "; no perturbation alone reproduced it (their combination, or chance)"
    return _failed(f"{detail}; see {where}")


def grade_detail(reward: Reward, *, problems: Mapping[str, str], undone: str) -> str:
    """One sentence for `grade`: the reward, and why when it is 0."""
    if reward.reward == 1:
        detail = "reward 1: the fail-to-pass tests pass, twice, and pass-to-pass still passes"
    elif reward.patch_applied != 1:
        detail = "reward 0: the patch does not apply to the post-setup tree"
    elif reward.setup_completed != 1:
        detail = "reward 0: setup did not complete in the verifier image"
    elif reward.fail_to_pass != 1:
        detail = "reward 0: fail-to-pass did not pass"
        if problems.get("fail_to_pass"):
            detail += f" ({problems['fail_to_pass']})"
    elif reward.deterministic != 1:
        detail = "reward 0: fail-to-pass passed once, then failed on the repeat"
        if problems.get("fail_to_pass_repeat"):
            detail += f" ({problems['fail_to_pass_repeat']})"
    else:
        detail = "reward 0: pass-to-pass failed"
        if problems.get("pass_to_pass"):
            detail += f" ({problems['pass_to_pass']})"
    if undone:
        detail += f"; the patch policy undid {undone}"
    return detail


def _some(items: Sequence[str], limit: int = 5) -> str:
    return ", ".join(items[:limit]) + (" ..." if len(items) > limit else "")


def undone_words(undone: Sequence[PolicyChange], discarded: Sequence[str], limit: int = 5) -> str:
    """The paths the verifier's patch policy undid, each with why when the policy said."""
    why = {c.path: c.reason for c in undone}
    shown = [f"{p} ({why[p]})" if p in why else p for p in discarded[:limit]]
    return ", ".join(shown) + (" ..." if len(discarded) > limit else "")


def judge_selectors(
    judgement: Judgement,
    *,
    gate: str,
    passing_alone: Sequence[str],
    breaking_alone: Sequence[str],
    undone: str,
) -> Judgement:
    """A nop or oracle trial, with what each selector did when run alone: at nop, a
    fail-to-pass selector that passes on the base by itself fails the gate (the selectors
    failed together only); a failed gate names the pass-to-pass selectors that fail alone, and
    what the patch policy undid."""
    status, detail = judgement.status, judgement.detail
    if status is Status.FAILED and breaking_alone:
        detail += "; failing alone: " + _some(breaking_alone)
    if gate == "nop" and passing_alone and status is Status.PASSED:
        status = Status.FAILED
        detail = (
            "fail-to-pass selector(s) already pass on the base snapshot when run alone: "
            + _some(passing_alone)
        )
    if undone and status is not Status.PASSED:
        detail += "; the verifier's patch policy undid " + undone
    return Judgement(status, detail)


def judge_grade(
    reward: Reward | None,
    *,
    timed_out: bool,
    timeout_seconds: float,
    no_reward: str,
    problems: Mapping[str, str],
    undone: str,
) -> Judgement:
    """`grade`: passed when the patch earns reward 1."""
    if reward is None:
        if timed_out:
            return _failed(f"the verifier timed out after {int(timeout_seconds)}s: reward 0")
        return _error(no_reward)
    detail = grade_detail(reward, problems=problems, undone=undone)
    return Judgement(Status.PASSED if reward.reward == 1 else Status.FAILED, detail)


def judge_determinism(
    reward: Reward, details: VerifierDetails | None, changed_ids: Sequence[str] = ()
) -> Judgement:
    ok, detail = evaluate_gate("determinism", reward, details)
    if ok and changed_ids:
        shown = ", ".join(changed_ids[:5]) + (" ..." if len(changed_ids) > 5 else "")
        return _failed(
            "the fail-to-pass tests' ids changed between the two runs (a census of them could "
            f"not grade an agent): {shown}"
        )
    return _passed(detail) if ok else _failed(detail)


# ---- hack ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ExploitEvidence:
    name: str
    summary: str
    script_exit: int | None  # None: the script did not run
    script_timed_out: bool
    script_said: str  # its last line (a not-applicable script says why)
    collect_failed: bool
    patch_bytes: int | None
    test: ExecOutcome | None
    reward: Reward | None
    reward_problem: str | None
    # What the patch policy undid (`path (why), ...`), whether any change of the patch was
    # left, and the first problem the per-test evidence found.
    undone: str = ""
    kept_changes: bool = True
    problem: str | None = None


def judge_exploit(e: ExploitEvidence, *, not_applicable: int) -> tuple[ExploitOutcome, str]:
    """(outcome, detail) for one exploit: what the verifier gave a canned hostile patch."""
    if e.script_exit == not_applicable:
        return "not-applicable", e.script_said.removeprefix("not applicable: ")
    if e.script_timed_out or e.script_exit is None or e.script_exit != 0:
        what = "timed out" if e.script_timed_out else f"exited {e.script_exit}"
        return "error", f"the exploit's script {what}: {e.script_said}".rstrip(": ")
    if e.collect_failed:
        return "error", "collecting the exploit's patch failed"
    if not e.patch_bytes:
        return "no-effect", "the collected patch is empty (only ignored files changed)"
    if e.test is None:
        return "error", "the verifier did not run"
    if e.reward is None:
        if e.test.timed_out:
            return "resisted", "the verifier timed out: no reward"
        return "error", e.reward_problem or f"no reward.json (exit {e.test.exit_code})"
    if e.reward.reward == 1:
        return "earned-reward", "reward 1 without a fix"
    if e.reward.patch_applied != 1:
        return "not-applicable", "its patch did not apply on the post-setup tree"
    if not e.kept_changes and e.undone:
        return "resisted", f"undone by the patch policy: {e.undone}"
    detail = "reward 0"
    if e.problem:
        detail += f": {e.problem}"
    if e.undone:
        detail += f"; the patch policy undid {e.undone}"
    return "resisted", detail


def judge_hack(results: Sequence[tuple[str, str, str, str | None, str]]) -> Judgement:
    """results: (name, summary, outcome, patch path, failing line) per exploit."""
    won = [r for r in results if r[2] == "earned-reward"]
    if won:
        name, summary, _, patch, line = won[0]
        more = f" (and {len(won) - 1} more: {', '.join(r[0] for r in won[1:4])})" if won[1:] else ""
        detail = (
            f"the verifier can be gamed: exploit {name} earned reward 1 without a fix{more}: "
            f"{summary}"
        )
        if patch:
            detail += f"; its patch: {patch}"
        if line:
            detail += f"; fail-to-pass said: {line[:200]}"
        return _failed(detail)
    counted = [r for r in results if r[2] in ("resisted", "no-effect")]
    skipped = [r[0] for r in results if r[2] == "not-applicable"]
    errors = [r[0] for r in results if r[2] == "error"]
    detail = f"{len(counted)} exploit(s) earned no reward"
    if errors and not counted:
        return _error(f"no exploit ran to the end: {', '.join(errors)}; see the hack directory")
    if skipped:
        detail += f"; not applicable: {', '.join(skipped)}"
    if errors:
        detail += f"; did not run to the end: {', '.join(errors)}"
    return _passed(detail)


# ---- verdict ------------------------------------------------------------------------------------


def decide_verdict(
    statuses: Mapping[str, Status],
    *,
    invalid: bool = False,
    optional: frozenset[str] = frozenset(),
) -> Verdict:
    """invalid input → invalid; any red stage → rejected; any infrastructure error → that;
    accepted only when every Docker stage passed (an `optional` one may be skipped: the hack
    gate under --no-hack-gate)."""
    if invalid:
        return Verdict.INVALID
    values = list(statuses.values())
    if Status.FAILED in values:
        return Verdict.REJECTED
    if Status.ERROR in values:
        return Verdict.INFRASTRUCTURE_FAILED
    if all(
        statuses.get(name) is Status.PASSED
        or (name in optional and statuses.get(name) is Status.SKIPPED)
        for name in DOCKER_STAGES
    ):
        return Verdict.ACCEPTED
    return Verdict.INFRASTRUCTURE_FAILED


def verdict_reason(stages: Sequence[tuple[str, Status, str]]) -> str:
    """The first stage that did not pass, as `name: detail`."""
    for name, status, detail in stages:
        if status in (Status.FAILED, Status.ERROR):
            return f"{name}: {detail}"
    return ""
