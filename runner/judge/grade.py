"""A graded patch (`grade`): its reward, and what the patch policy undid, in words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.judge.base import (
    Judgement,
    errored,
    failed,
)
from runner.model.evidence import PolicyChange
from runner.model.report import Status
from runner.model.reward import Reward


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
        # Or an exit-code task's canary run, which must fail, passed.
        why = problems.get("fail_to_pass") or problems.get("canary")
        if why:
            detail += f" ({why})"
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


def some_of(items: Sequence[str], limit: int = 5) -> str:
    return ", ".join(items[:limit]) + (" ..." if len(items) > limit else "")


def undone_words(undone: Sequence[PolicyChange], discarded: Sequence[str], limit: int = 5) -> str:
    """The paths the verifier's patch policy undid, each with why when the policy said."""
    why = {c.path: c.reason for c in undone}
    shown = [f"{p} ({why[p]})" if p in why else p for p in discarded[:limit]]
    return ", ".join(shown) + (" ..." if len(discarded) > limit else "")


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
            return failed(f"the verifier timed out after {int(timeout_seconds)}s: reward 0")
        return errored(no_reward)
    detail = grade_detail(reward, problems=problems, undone=undone)
    return Judgement(Status.PASSED if reward.reward == 1 else Status.FAILED, detail)
