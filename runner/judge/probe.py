"""The flakiness probe: how often each selector held under perturbations, and whether that
is flaky."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.judge.base import Judgement, failed, passed
from runner.model.canaries import CANARY_RULE
from runner.model.census import Census
from runner.model.evidence import CANARY_RUN, PASS_TO_PASS_OUTCOMES, RUN_NAMES, RunEvidence
from runner.model.reward import Reward
from runner.plan.runtime import ExecOutcome


def probe_outcome(
    reward: Reward | None,
    test: ExecOutcome | None,
    alone: Sequence[tuple[str, int]],
    fail_to_pass: Sequence[str],
    *,
    pass_to_pass: bool = True,
) -> tuple[bool, str, list[str]]:
    """One probe run: (passed, what failed, the fail-to-pass selectors that failed). `alone` is
    each selector run by itself after the selection failed (test.sh's selectors.tsv). Without
    `pass_to_pass` the run took the fail-to-pass selection alone, once: its repeat and the
    pass-to-pass flags say nothing."""
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
    if not pass_to_pass:
        return True, "", []
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
        held = 0
        for ok, what, failing in runs:
            if ok or what == "pass-to-pass" or (failing and selector not in failing):
                held += 1
        rates.append((selector, held, len(runs)))
    return rates


def judge_probe(
    runs: Sequence[tuple[str, bool, str, Sequence[str]]],
    changed_by: Sequence[str],
    where: str,
) -> Judgement:
    """runs: (name, passed, what failed, failing selectors) per perturbed run; changed_by: the
    perturbations that failed alone."""
    red_runs = [r for r in runs if not r[1]]
    if not red_runs:
        return passed(
            "fail-to-pass passed a second time with the gold patch, and under "
            f"{len(runs)} perturbed run(s)"
        )
    whats = ", ".join(dict.fromkeys(r[2] for r in red_runs))
    selectors = list(dict.fromkeys(s for r in red_runs for s in r[3]))
    detail = f"flaky: {whats} failed in {len(red_runs)} of {len(runs)} perturbed run(s)"
    if selectors:
        detail += f" ({', '.join(selectors[:5])}{' ...' if len(selectors) > 5 else ''})"
    if changed_by:
        detail += f"; changed by {'; '.join(changed_by)}"
    else:
        detail += "; no perturbation alone reproduced it (their combination, or chance)"
    return failed(f"{detail}; see {where}")


def graded_alike(census: Census, runs: Mapping[str, RunEvidence], names: Sequence[str]) -> str:
    """Why a passed run graded before the census existed could be graded otherwise by it, or ""
    when the census would pass it too. The census grades a selection by its mode and runners
    and requires each of its tests (and, for fail-to-pass, those that failed at nop) to be
    there, passed (pass-to-pass: passed or skipped as at the oracle) and, where they asserted
    at the oracle, asserting (verifier.pl judge_run); every other rule it applies, the run
    without it applied too. `names`: the runs that count (`fail_to_pass`, `pass_to_pass`)."""
    for name in names:
        run = runs.get(name)
        if run is None:
            return f"{name} left no evidence"
        if not run.passed:
            return f"{name} did not pass"
        f2p = name != "pass_to_pass"
        selection = census.fail_to_pass if f2p else census.pass_to_pass
        if run.mode != selection.mode:
            return f"{name} was judged by {run.mode}, the census by {selection.mode}"
        if selection.mode != "per-test":
            continue
        if sorted(run.runners) != sorted(selection.runners):
            return (
                f"{name}'s runners ({', '.join(sorted(run.runners))}) are not the census's "
                f"({', '.join(sorted(selection.runners))})"
            )
        tests = {test.id: test for test in run.tests}
        required = [*selection.tests, *census.failed_at_nop] if f2p else selection.tests
        for test_id in required:
            test = tests.get(test_id)
            if test is None:
                return f"{name} did not run {test_id}"
            if f2p and test.outcome != "passed":
                return f"{name}: {test_id} {test.outcome}"
            if not f2p and test.outcome not in PASS_TO_PASS_OUTCOMES:
                return f"{name}: {test_id} {test.outcome}"
            if f2p and selection.asserts.get(test_id, 0) > 0 and test.asserts == 0:
                return f"{name}: {test_id} passed without one assertion"
        kept = set(census.canaries.keys)
        for canary in run.canaries:
            if canary.key in kept and canary.outcome not in ("failed", "error"):
                return f"{name}: a canary the census keeps {canary.outcome}"
    return ""


def passing_canaries(runs: Mapping[str, RunEvidence]) -> list[str] | None:
    """The canaries that passed in a run graded by the census whose every other rule held (a
    canary the oracle killed twice that passes now is flaky: it is dropped, never the task's
    fault), or None when anything else went wrong too."""
    keys: list[str] = []
    for name in (*RUN_NAMES, CANARY_RUN):
        run = runs.get(name)
        if run is None:
            continue
        if any(p != CANARY_RULE for p in run.problems):
            return None
        keys += [c.key for c in run.canaries if c.outcome in ("passed", "xpassed")]
    return keys or None
