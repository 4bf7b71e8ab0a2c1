"""One exploit of the hack gate judged: what its agent side, the policy check and its verifier
(or its runner's proof) gave, recorded in the stage's data."""

from __future__ import annotations

from runner import __version__, judge
from runner.compile.exploits import NOT_APPLICABLE
from runner.model.evidence import VerifierEvidence
from runner.model.report import ExploitResult, HackData
from runner.plan.types import ExploitPlan
from runner.run.state import ExploitSide, RunState, StageResult, TrialRun


def judge_exploit(
    state: RunState,
    exploit: ExploitPlan,
    side: ExploitSide,
    run: TrialRun | None,
    stage: StageResult,
    data: HackData,
) -> judge.ExploitVerdict:
    """What the verifier gave one exploit's patch, judged and recorded."""
    evidence = run.evidence if run is not None else VerifierEvidence()
    decided = side.decided_by_policy
    policy = decided.changes if decided is not None else list(evidence.policy)
    undone = [c for c in policy if c.verdict != "keep"]
    problem = next(iter(evidence.problems.values()), None)
    outcome, detail = judge.judge_exploit(
        judge.ExploitEvidence(
            name=exploit.name,
            summary=exploit.summary,
            script_exit=side.script.exit_code,
            script_timed_out=side.script.timed_out,
            script_said=side.said,
            collect_failed=side.collect_failed,
            patch_bytes=side.patch_bytes,
            test=run.test if run else None,
            reward=run.reward if run else None,
            reward_problem=run.reward_problem if run else None,
            undone=judge.undone_words(undone, [c.path for c in undone]) if undone else "",
            kept_changes=any(c.verdict == "keep" for c in policy) or not policy,
            problem=problem,
            policy_only=decided is not None,
            applies=decided is None or decided.applied,
            proved_for=side.proved_for,
            version=__version__,
        ),
        not_applicable=NOT_APPLICABLE,
    )
    patch_path = state.layout.agent_patch(exploit.trial.gate)
    patch = str(patch_path) if patch_path.is_file() else None
    data.exploits.append(
        ExploitResult(
            name=exploit.name,
            family=exploit.family,
            summary=exploit.summary,
            outcome=outcome,
            detail=detail,
            reward=run.reward if run else None,
            discarded=[c.path for c in undone] if decided is not None else list(evidence.discarded),
            undone=undone,
            evidence=evidence.summary if run else None,
            patch=patch,
            patch_bytes=side.patch_bytes,
            scope="runner" if outcome == "proved" else "task",
            proved_for=list(side.proved_for) if outcome == "proved" else [],
        )
    )
    if outcome == "earned-reward":
        stage.logs.append(str(patch_path))
    return judge.ExploitVerdict(
        name=exploit.name,
        summary=exploit.summary,
        outcome=outcome,
        patch=patch,
        said=evidence.last_lines.get("fail_to_pass", ""),
    )
