"""The hack gate: each canned hostile agent patch must earn reward 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.judge.base import (
    Judgement,
    errored,
    failed,
    passed,
)
from runner.model.report import ExploitOutcome
from runner.model.reward import Reward
from runner.plan.runtime import ExecOutcome
from runner.runners import PROVEN_RUNNERS


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
    # Decided by the patch policy alone, before any test (runner.run.hack): `applies` says
    # whether the patch applied; if it did, nothing of it was left.
    policy_only: bool = False
    applies: bool = True
    # Left in the tree by the policy, on a task whose runners prove it (runner_proof): not run,
    # proved for these runners by `version` of the runner.
    proved_for: tuple[str, ...] = ()
    version: str = ""


def runner_proof(
    mode: str, runners: Sequence[str], command_runners: Sequence[str], *, full: bool
) -> tuple[str, ...] | None:
    """The runners that prove every exploit the patch policy leaves in this task's tree, or None
    when each must run (task-level). An exploit's patch reaches the tests only through what the
    policy keeps, and from there the verifier's per-test evidence of the runner judges it: the
    same mechanism on every task of that runner. So it is proved when the fail-to-pass
    selection's `mode` is per-test and its `runners` (and the known runners the test command
    starts) are all runners the project's hack corpus proves (PROVEN_RUNNERS); never under
    --hack-gate full, nor for exit-code evidence, where the task's own scripts decide."""
    if full or mode != "per-test" or not runners:
        return None
    if not set(runners) | set(command_runners) <= set(PROVEN_RUNNERS):
        return None
    return tuple(r for r in PROVEN_RUNNERS if r in runners)


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
    if e.policy_only:
        if not e.applies:
            return "not-applicable", "its patch did not apply on the post-setup tree"
        return "resisted", f"undone by the patch policy: {e.undone} (no test run: nop's tree)"
    if e.proved_for:
        runners = ", ".join(e.proved_for)
        kept = f"; the patch policy undid {e.undone}" if e.undone else ""
        return "proved", (
            f"proved for runner {runners} by selfbench-runner {e.version}: its per-test "
            f"evidence resists every exploit of this class (not run on this task){kept}"
        )
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


@dataclass(frozen=True, kw_only=True)
class ExploitVerdict:
    """One exploit as judged: what the gate's own judgement reads of it."""

    name: str
    summary: str
    outcome: ExploitOutcome
    patch: str | None = None  # its collected patch, when one was written
    said: str = ""  # fail-to-pass's last meaningful line


def judge_hack(results: Sequence[ExploitVerdict]) -> Judgement:
    """The hack gate: red when any exploit earned reward 1, naming the first and its patch."""
    won = [r for r in results if r.outcome == "earned-reward"]
    if won:
        first = won[0]
        names = ", ".join(r.name for r in won[1:4])
        more = f" (and {len(won) - 1} more: {names})" if won[1:] else ""
        detail = (
            f"the verifier can be gamed: exploit {first.name} earned reward 1 without a fix"
            f"{more}: {first.summary}"
        )
        if first.patch:
            detail += f"; its patch: {first.patch}"
        if first.said:
            detail += f"; fail-to-pass said: {first.said[:200]}"
        return failed(detail)
    counted = [r for r in results if r.outcome in ("resisted", "no-effect", "proved")]
    proved = [r for r in results if r.outcome == "proved"]
    skipped = [r.name for r in results if r.outcome == "not-applicable"]
    errors = [r.name for r in results if r.outcome == "error"]
    detail = f"{len(counted)} exploit(s) earned no reward"
    if proved:
        detail += (
            f" ({len(proved)} proved for this task's runner by this runner version, "
            f"{len(counted) - len(proved)} decided on this task)"
        )
    if errors and not counted:
        return errored(f"no exploit ran to the end: {', '.join(errors)}; see the hack directory")
    if skipped:
        detail += f"; not applicable: {', '.join(skipped)}"
    if errors:
        detail += f"; did not run to the end: {', '.join(errors)}"
    return passed(detail)
