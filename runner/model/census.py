"""The census (pure): what the verification that accepts a task saw, the test ids of each
selection at the oracle (and the fail-to-pass ones that failed at nop), made from their
evidence (runner.model.evidence). It is sealed into the bundle (tests/expected-tests.json,
runner.compile.seal), so the same test.sh grades any later agent, under Harbor too, by the same
ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from runner.model.canaries import CanaryCensus, CanaryPlan, DroppedCanary
from runner.model.evidence import CANARY_RUN, PASS_TO_PASS_OUTCOMES, Mode, RunEvidence

CENSUS_SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="ignore"
    )


class SelectionCensus(_Model):
    mode: Mode
    runners: list[str] = Field(default_factory=list)
    tests: list[str] = Field(default_factory=list)
    selectors: dict[str, list[str]] = Field(default_factory=dict)
    # The tests that passed assertions at the oracle (where the runner counts them): each must
    # pass at least one again (an agent must not take the assertions away).
    asserts: dict[str, int] = Field(default_factory=dict)


class Census(_Model):
    """tests/expected-tests.json once sealed."""

    schema_version: Literal[1] = 1
    sealed: Literal[True] = True
    fail_to_pass: SelectionCensus
    pass_to_pass: SelectionCensus
    failed_at_nop: list[str] = Field(default_factory=list)
    run_id: str
    runner_version: str
    # The canaries the oracle killed, by which every later run is also graded.
    canaries: CanaryCensus = Field(default_factory=CanaryCensus)

    @property
    def exit_code_only(self) -> bool:
        return self.fail_to_pass.mode != "per-test"

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


class CensusError(ValueError):
    """The census cannot be made from these runs."""


def build_census(
    *,
    nop_fail_to_pass: RunEvidence | None,
    oracle_fail_to_pass: RunEvidence,
    oracle_pass_to_pass: RunEvidence | None,
    run_id: str,
    runner_version: str,
    canaries: CanaryCensus | None = None,
) -> Census:
    """The census of a verification whose nop and oracle passed (and the canaries its oracle
    kept, runner.model.census.canary_census)."""
    f2p = oracle_fail_to_pass
    if f2p.mode == "per-test":
        passed = f2p.ids("passed")
        if not passed:
            raise CensusError("the oracle's fail-to-pass run reported no passing test")
        seen = set(passed)
        fail_to_pass = SelectionCensus(
            mode="per-test",
            runners=list(f2p.runners),
            tests=passed,
            selectors={
                s.selector: [t for t in s.tests if t in seen] for s in f2p.selectors if s.attributed
            },
            asserts={t.id: t.asserts for t in f2p.tests if t.outcome == "passed" and t.asserts},
        )
        failed_at_nop = (
            [t for t in nop_fail_to_pass.ids("failed", "error") if t in seen]
            if nop_fail_to_pass is not None and nop_fail_to_pass.mode == "per-test"
            else []
        )
    else:
        fail_to_pass = SelectionCensus(mode="exit-code")
        failed_at_nop = []
    p2p = oracle_pass_to_pass
    if p2p is None or p2p.mode == "none":
        pass_to_pass = SelectionCensus(mode="none")
    elif p2p.mode == "per-test":
        pass_to_pass = SelectionCensus(
            mode="per-test", runners=list(p2p.runners), tests=p2p.ids(*PASS_TO_PASS_OUTCOMES)
        )
    else:
        pass_to_pass = SelectionCensus(mode="exit-code")
    return Census(
        fail_to_pass=fail_to_pass,
        pass_to_pass=pass_to_pass,
        failed_at_nop=failed_at_nop,
        run_id=run_id,
        runner_version=runner_version,
        canaries=canaries or CanaryCensus(),
    )


def read_census(raw: bytes | None) -> Census | None:
    """A sealed census, or None (absent, unsealed, or not one)."""
    if raw is None:
        return None
    try:
        return Census.model_validate_json(raw)
    except ValidationError:
        return None


_KILLED = ("failed", "error")


def canary_census(
    plan: CanaryPlan, runs: Mapping[str, RunEvidence], *, interfered: str | None = None
) -> CanaryCensus:
    """The canaries the oracle's runs kept: each per-test one that failed in its fail-to-pass
    run and in every other run it ran in; the exit-code one whose run failed. The rest are
    dropped, each with why (`interfered`: the oracle passed only without them)."""
    census = CanaryCensus(none=list(plan.none))
    if interfered is not None:
        census.dropped = [
            DroppedCanary(key=k, why="interfered", detail=interfered)
            for k in (*plan.keys, *plan.exit_code)
        ]
        return census
    first = runs.get("fail_to_pass")
    seen: dict[str, dict[str, str]] = {}
    ids: dict[str, list[str]] = {}
    for name, run in runs.items():
        for canary in run.canaries:
            seen.setdefault(canary.key, {})[name] = canary.outcome
            if name == "fail_to_pass":
                ids[canary.key] = list(canary.ids)
    for key in plan.keys:
        outcomes = seen.get(key, {})
        at_first = outcomes.get("fail_to_pass") if first is not None else None
        if not outcomes:
            census.dropped.append(
                DroppedCanary(key=key, why="unplaced", detail="it could not be written")
            )
        elif at_first in (None, "missing", "skipped"):
            census.dropped.append(
                DroppedCanary(
                    key=key,
                    why="not-run",
                    detail="the fail-to-pass selection ran none of its tests",
                )
            )
        elif at_first not in _KILLED:
            census.dropped.append(
                DroppedCanary(key=key, why="passed", detail="the reference solution passed it")
            )
        elif any(o not in _KILLED and o != "missing" for o in outcomes.values()):
            others = ", ".join(f"{n}: {o}" for n, o in sorted(outcomes.items()))
            census.dropped.append(DroppedCanary(key=key, why="flaky", detail=others))
        else:
            census.keys.append(key)
            census.ids[key] = ids.get(key, [])
            census.groups[key] = plan.groups.get(key, key)
    canary_run = runs.get(CANARY_RUN)
    for key in plan.exit_code:
        outcome = (
            next((c.outcome for c in canary_run.canaries if c.key == key), None)
            if canary_run is not None
            else None
        )
        if outcome in _KILLED:
            census.exit_code.append(key)
        elif outcome is None:
            census.dropped.append(
                DroppedCanary(
                    key=key,
                    why="not-run",
                    detail="the oracle ran no canary run (per-test evidence)",
                )
            )
        else:
            census.dropped.append(
                DroppedCanary(
                    key=key,
                    why="passed",
                    detail="the test command passed with the reference solution",
                )
            )
    return census
