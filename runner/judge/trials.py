"""The nop and oracle gates (their reward, the selectors that must fail or pass alone) and
the determinism gate."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from runner.judge.base import (
    Judgement,
    errored,
    failed,
    passed,
    storage_reason,
    with_limit_notes,
)
from runner.judge.grade import some_of
from runner.model.report import LimitsData, Status
from runner.model.reward import Reward, VerifierDetails
from runner.model.stages import Gate, GateId
from runner.plan.runtime import ExecOutcome


def evaluate_gate(
    gate: Gate,
    reward: Reward,
    details: VerifierDetails | None = None,
    problems: Mapping[str, str] | None = None,
    *,
    pass_to_pass: bool = True,
) -> tuple[bool, str]:
    """The seeds' pass criteria, with one sentence saying why. A run that exited 0 and still did
    not pass failed a rule of the verifier's evidence, and says so with that rule (`problems`:
    the first problem of each run, by run name), never that its tests "still fail"."""
    problems = problems or {}

    def red(run: str, code: int | None, where: str, fails: str) -> str:
        """`<selection> <where> exited 0 but ...` when a rule fired, else `<fails> (exit N)`."""
        selection = run.replace("_", "-")
        if code == 0 and problems.get(run):
            return f"{selection} {where} exited 0 but did not pass the verifier's evidence rules"
        return fails + (f" (exit {code})" if code is not None else "")

    f2p_exit = details.fail_to_pass_exit_code if details else None
    p2p_exit = details.pass_to_pass_exit_code if details else None
    if reward.setup_completed != 1:
        return False, "setup did not complete in the verifier image"
    if gate is Gate.NOP:
        if reward.patch_applied != 1:
            return False, "the empty agent patch or test.patch did not apply on the base snapshot"
        if reward.fail_to_pass != 0:
            return False, "fail-to-pass tests already pass on the base snapshot"
        if reward.pass_to_pass != 1:
            return False, red(
                "pass_to_pass",
                p2p_exit,
                "on the base snapshot",
                "pass-to-pass tests fail on the base snapshot",
            )
        code = f" (exit {f2p_exit})" if f2p_exit is not None else ""
        if not pass_to_pass:
            return True, f"fail-to-pass fails{code} on the base (the task selects no pass-to-pass)"
        return True, f"fail-to-pass fails{code} and pass-to-pass passes on the base"
    if gate is Gate.ORACLE:
        if reward.patch_applied != 1:
            return False, (
                "the gold patch or test.patch does not apply to the post-setup tree (the audit "
                "applied both at baseCommit: setupCommand changed a file they touch); the "
                "verifier log's selfbench: lines say which, and `selfbench-runner debug RUN_DIR "
                "--stage oracle` opens that tree"
            )
        if reward.fail_to_pass != 1:
            return False, red(
                "fail_to_pass",
                f2p_exit,
                "with the gold patch",
                "fail-to-pass tests still fail with the gold patch",
            )
        if reward.pass_to_pass != 1:
            return False, red(
                "pass_to_pass",
                p2p_exit,
                "with the gold patch",
                "pass-to-pass tests fail with the gold patch",
            )
        if not pass_to_pass:
            return True, (
                "the gold patch applies and fail-to-pass passes (the task selects no pass-to-pass)"
            )
        return True, "the gold patch applies and every selected test passes"
    if reward.deterministic != 1:
        repeat = details.fail_to_pass_repeat_exit_code if details else None
        if repeat == 0 and problems.get("fail_to_pass_repeat"):
            return False, (
                "fail-to-pass passed once with the gold patch, then the repeat exited 0 but did "
                "not pass the verifier's evidence rules"
            )
        return False, "fail-to-pass passed once with the gold patch, then failed on the repeat" + (
            f" (exit {repeat})" if repeat is not None else ""
        )
    return True, "fail-to-pass passed a second time with the gold patch"


def tests_failed(gate: Gate, reward: Reward) -> bool:
    """Whether a red nop or oracle is the tests' (not a patch that did not apply, not setup)."""
    if reward.setup_completed != 1 or reward.patch_applied != 1:
        return False
    if gate is Gate.NOP:
        return reward.pass_to_pass != 1
    return reward.fail_to_pass != 1 or reward.pass_to_pass != 1


# What a process prints when it reached for the network in a container that has none (only
# loopback): the C library's resolver errors and the kernel's ENETUNREACH as each ecosystem words
# them (glibc, Python's gaierror and urllib3, Node's getaddrinfo codes and undici's "fetch
# failed", Go's "dial tcp", curl and git, Rust's hyper and std, Java). A red nop or oracle is run
# again with the network on only when its log shows one of these: without such a sign the re-run
# cost as much as the gate itself (a real vitest task's red nop: 25 s against 9 s, measured) and
# told nothing.
NETWORK_SIGNS = re.compile(
    r"temporary failure in name resolution|name or service not known"
    r"|no address associated with hostname|nodename nor servname"
    r"|network is unreachable|network unreachable|no route to host"
    r"|\b(?:EAI_AGAIN|ENOTFOUND|ENETUNREACH|EHOSTUNREACH)\b|getaddrinfo|gaierror"
    r"|could(?: not|n't) resolve|failed to resolve|failed to lookup address|dns error"
    r"|\bdial (?:tcp|udp)\b|lookup \S+ on \S+:53|fetch failed|failed to establish a new connection"
    r"|urlopen error|UnknownHostException",
    re.IGNORECASE,
)


def network_sign(log: str) -> str | None:
    """The first words in a test log that say a process reached for a network it did not have
    (None: no sign of it), the reason a red gate is run again with the network on."""
    found = NETWORK_SIGNS.search(log)
    return found.group(0) if found else None


@dataclass(frozen=True, kw_only=True)
class TrialEvidence:
    gate: GateId
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
    # False: the task selects no pass-to-pass test (its run was judged as "none").
    pass_to_pass: bool = True


def _quote(
    reward: Reward, gate: Gate, lines: Mapping[str, str], problems: Mapping[str, str]
) -> str:
    """`: <what the evidence found>` (else the failing command's last line) for a red gate, or
    ''."""
    if gate is Gate.NOP and reward.pass_to_pass != 1:
        run = "pass_to_pass"
    elif gate is Gate.ORACLE and reward.fail_to_pass != 1:
        run = "fail_to_pass"
    elif gate is Gate.ORACLE and reward.pass_to_pass != 1:
        run = "pass_to_pass"
    elif gate is Gate.ORACLE and reward.deterministic != 1:
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
            detail = (
                f"solution/solve.sh timed out after {int(e.agent_timeout)}s; the runner stopped it"
            )
            return failed(with_limit_notes(detail, e.limits, **notes))
        if e.solve.storage_exceeded_mb is not None:
            return failed(
                storage_reason(
                    e.solve.storage_exceeded_mb, e.storage_mb, e.limits.storage_mechanism
                )
            )
        if e.solve.exit_code != 0:
            detail = (
                f"solution/solve.sh exited {e.solve.exit_code}: the gold patch does not apply "
                f"to the post-setup tree (the audit applied it at baseCommit: setupCommand "
                f"changed a file it touches); see {e.agent_log}, and `selfbench-runner debug "
                f"RUN_DIR --stage oracle` opens that tree"
            )
            return failed(with_limit_notes(detail, e.limits, **notes))
    if e.collect is not None and (e.collect.timed_out or e.collect.exit_code != 0):
        what = "timed out" if e.collect.timed_out else f"failed (exit {e.collect.exit_code})"
        return errored(f"collecting the agent patch {what}; see {e.collect_log}")
    if e.test is None:
        return errored("the verifier did not run")
    if e.test.timed_out:
        detail = f"verifier timed out after {int(e.verifier_timeout)}s; the runner stopped it"
        return failed(with_limit_notes(detail, e.limits, **notes))
    if e.limits.storage_exceeded_mb is not None:
        return failed(
            storage_reason(e.limits.storage_exceeded_mb, e.storage_mb, e.limits.storage_mechanism)
        )
    if e.reward is None:
        if e.reward_problem:
            return failed(f"the verifier's {e.reward_problem}; see {e.verifier_log}")
        if e.limits.oom_kills > 0 or e.limits.pids_limit_hits > 0:
            detail = f"the verifier wrote no reward.json (exit {e.test.exit_code})"
            return failed(with_limit_notes(detail, e.limits, **notes))
        return errored(
            f"the verifier wrote no reward.json (exit {e.test.exit_code}); see {e.verifier_log}"
        )
    ok, detail = evaluate_gate(
        e.gate.kind, e.reward, e.details, e.problems, pass_to_pass=e.pass_to_pass
    )
    if not ok:
        detail += _quote(e.reward, e.gate.kind, e.last_lines, e.problems)
    detail = with_limit_notes(detail, e.limits, **notes)
    return passed(detail) if ok else failed(detail)


def judge_selectors(
    judgement: Judgement,
    *,
    gate: Gate,
    passing_alone: Sequence[str],
    breaking_alone: Sequence[str],
    undone: str,
    unmatched: Sequence[str] = (),
) -> Judgement:
    """A nop or oracle trial, with what each selector did: a selector that selected no test
    fails the gate where it is first run, naming it (`unmatched`: one sentence each; a typo
    would otherwise pass nop as a failing test); at nop, a fail-to-pass selector that passes on
    the base by itself fails the gate (the selectors failed together only); a failed gate names
    the pass-to-pass selectors that fail alone, and what the patch policy undid."""
    status, detail = judgement.status, judgement.detail
    if unmatched and status is not Status.ERROR:
        more = f"; and {len(unmatched) - 3} more" if len(unmatched) > 3 else ""
        return Judgement(Status.FAILED, "; ".join(unmatched[:3]) + more)
    if status is Status.FAILED and breaking_alone:
        detail += "; failing alone: " + some_of(breaking_alone)
    if gate is Gate.NOP and passing_alone and status is Status.PASSED:
        status = Status.FAILED
        detail = (
            "fail-to-pass selector(s) already pass on the base snapshot when run alone: "
            + some_of(passing_alone)
        )
    if undone and status is not Status.PASSED:
        detail += "; the verifier's patch policy undid " + undone
    return Judgement(status, detail)


def judge_determinism(
    reward: Reward,
    details: VerifierDetails | None,
    changed_ids: Sequence[str] = (),
    problems: Mapping[str, str] | None = None,
) -> Judgement:
    ok, detail = evaluate_gate(Gate.DETERMINISM, reward, details, problems)
    if not ok and problems and problems.get("fail_to_pass_repeat"):
        detail += f": {problems['fail_to_pass_repeat'][:300]}"
    if ok and changed_ids:
        shown = ", ".join(changed_ids[:5]) + (" ..." if len(changed_ids) > 5 else "")
        return failed(
            "the fail-to-pass tests' ids changed between the two runs (a census of them could "
            f"not grade an agent): {shown}"
        )
    return passed(detail) if ok else failed(detail)
