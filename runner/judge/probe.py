"""The flakiness probe: how often each selector held under perturbations, and whether that
is flaky."""

from __future__ import annotations

from collections.abc import Sequence

from runner.judge.base import Judgement, failed, passed
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
