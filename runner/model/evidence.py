"""What a verifier leaves of its test runs, as models (pure).

Each test run of tests/test.sh leaves `/logs/verifier/evidence/<run>.json`: the tests its runner
reported (from the verifier's reporters, loaded from outside /app), how each ended, which
selector selected them, and whether the run counts as passed under the evidence rules (SWE-bench
5's): every fail-to-pass selector has tests that ran and passed; a skipped or missing fail-to-pass
test is a failure; pass-to-pass tests may skip but not fail or vanish; a run with no evidence, a
run that ended early, or one whose exit code disagrees with its report is never a pass. A runner
the verifier does not know leaves no evidence and is judged by its exit code.

Beside them: the reward and its details (runner.model.reward), what the patch policy did, and
each selector run alone. runner.run.collect.read_verifier reads all of it once, into one
VerifierEvidence, which everything after it (the judgement, the report, the census) is handed
whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from runner.model.canaries import CanaryRun
from runner.model.reward import Reward, VerifierDetails

EVIDENCE_DIR = "evidence"  # under /logs/verifier: one document per test run
SUMMARY_FILE = "evidence.json"
POLICY_FILE = "policy.json"
MAX_EVIDENCE_BYTES = 64 * 1024 * 1024

# Only "passed" passes a fail-to-pass test; a pass-to-pass test may also skip, fail expectedly
# (xfailed) or pass unexpectedly (xpassed), as it did at the oracle.
Outcome = Literal["passed", "failed", "skipped", "error", "xfailed", "xpassed"]
PASS_TO_PASS_OUTCOMES: tuple[Outcome, ...] = ("passed", "skipped", "xfailed", "xpassed")
Mode = Literal["per-test", "exit-code", "none"]
EXIT_CODE_ONLY = "exit-code evidence only"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="ignore"
    )


class TestResult(_Model):
    id: str
    outcome: Outcome
    file: str | None = None
    # The assertions that passed in it, where the runner counts them (jest's expect() calls).
    asserts: int | None = None


class SelectorEvidence(_Model):
    """What one selector selected in a run (`attributed`: the tests could be told apart by
    selector; otherwise only the selection as a whole is judged)."""

    selector: str
    attributed: bool = False
    strict: bool = False
    ran: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    error: int = 0
    xfailed: int = 0
    xpassed: int = 0
    tests: list[str] = Field(default_factory=list)
    # False when the selector selected nothing at all (a typo, a file that does not exist): `why`
    # says what the runner, or the tree, said. None: it selected something, or no one can tell.
    matched: bool | None = None
    why: str | None = None


class Counts(_Model):
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    error: int = 0
    xfailed: int = 0
    xpassed: int = 0


class StoppedAt(_Model):
    runner: str
    id: str


class RunEvidence(_Model):
    """/logs/verifier/evidence/<run>.json"""

    name: str
    kind: str
    exit_code: int
    mode: Mode
    runners: list[str] = Field(default_factory=list)
    sealed: bool = False
    complete: bool = False
    counts: Counts = Field(default_factory=Counts)
    tests: list[TestResult] = Field(default_factory=list)
    selectors: list[SelectorEvidence] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    passed: bool = False
    # The hack gate's runs: the first failed test, at which the verifier stopped the run.
    stopped: StoppedAt | None = None
    # Each runner's version as its reporter said (pytest, jest...), for whoever reads the run.
    versions: dict[str, str] = Field(default_factory=dict)
    # The canaries written into this run's held-out files: their tests, apart from the others.
    canaries: list[CanaryRun] = Field(default_factory=list)

    def ids(self, *outcomes: Outcome) -> list[str]:
        return [t.id for t in self.tests if not outcomes or t.outcome in outcomes]


class PolicyChange(_Model):
    """One path the agent's patch changed, and what the patch policy did with it."""

    path: str
    status: str  # git's: A, M, D, T
    verdict: Literal["keep", "undo", "held-out"]
    reason: str


class PolicyCheck(_Model):
    """One patch through the verifier's patch policy without tests (verifier.pl policy-check):
    whether it applies, how many of its changes the policy keeps, how many of its undone ones a
    trusted manifest would replace."""

    applied: bool
    kept: int
    restores: int
    changes: list[PolicyChange] = Field(default_factory=list)

    @property
    def leaves_nop_tree(self) -> bool:
        """It applies, and the policy undoes every change back to the post-setup tree."""
        return self.applied and self.kept == 0 and self.restores == 0


def parse_policy_check(raw: bytes) -> dict[str, PolicyCheck]:
    """policy-check's document: each patch's name to its check. A malformed document is an
    empty one (every patch then goes to a verifier of its own)."""
    try:
        document = json.loads(raw)
        if not isinstance(document, dict):
            return {}
        return {str(k): PolicyCheck.model_validate(v) for k, v in document.items()}
    except (ValueError, ValidationError):
        return {}


def parse_run(raw: bytes) -> RunEvidence | None:
    """One run's evidence document (None: not one)."""
    try:
        return RunEvidence.model_validate_json(raw)
    except ValidationError:
        return None


def parse_policy(raw: bytes, limit: int = 500) -> list[PolicyChange]:
    """policy.json: what the patch policy did with each path the patch changed."""
    try:
        document = json.loads(raw)
        changes = document.get("changes") if isinstance(document, dict) else None
        if not isinstance(changes, list):
            return []
        return [PolicyChange.model_validate(c) for c in changes[:limit]]
    except (ValueError, ValidationError):
        return []


class SelectorResult(_Model):
    """A selector run alone (selectors.tsv), and its exit code."""

    selector: str
    exit_code: int


# ---- what the report shows ---------------------------------------------------------------------


class SelectorSummary(_Model):
    kind: Literal["failToPass", "passToPass"]
    selector: str
    attributed: bool
    ran: int | None = None
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    error: int | None = None
    # False (with why) when the selector selected no test at all.
    matched: bool | None = None
    why: str | None = None


class CanaryCounts(_Model):
    """A run's canaries that ran: how many, how many failed (as each must), how many passed
    (tampering once the census is sealed)."""

    ran: int = 0
    failed: int = 0
    passed: int = 0


def canary_counts(runs: list[CanaryRun]) -> CanaryCounts | None:
    """None when the run ran no canary (it selected none of the held-out files that hold them)."""
    ran = [c for c in runs if c.outcome != "missing"]
    if not ran:
        return None
    return CanaryCounts(
        ran=len(ran),
        failed=sum(1 for c in ran if c.outcome in ("failed", "error")),
        passed=sum(1 for c in ran if c.outcome in ("passed", "xpassed")),
    )


class RunSummary(_Model):
    name: str
    passed: bool
    exit_code: int
    complete: bool
    counts: Counts
    problems: list[str] = Field(default_factory=list)
    missing: int = 0
    canaries: CanaryCounts | None = None


class EvidenceSummary(_Model):
    """A verifier run's evidence, for the report: the mode ("per-test", or "exit-code evidence
    only" for a runner the verifier does not know), per selector what ran, passed, failed and
    was skipped, and each run's problems."""

    mode: Mode
    runners: list[str] = Field(default_factory=list)
    sealed: bool = False
    note: str | None = None
    runs: list[RunSummary] = Field(default_factory=list)
    selectors: list[SelectorSummary] = Field(default_factory=list)


RUN_NAMES = ("fail_to_pass", "fail_to_pass_repeat", "pass_to_pass")
# The exit-code canary's run (one more run of the fail-to-pass command, over a held-out file
# whose expected value was changed): it must fail.
CANARY_RUN = "canary"


def summarize(runs: Mapping[str, RunEvidence]) -> EvidenceSummary | None:
    """The evidence of a verifier's test runs, for the report (None: no test ran)."""
    present = {name: runs[name] for name in (*RUN_NAMES, CANARY_RUN) if name in runs}
    if not present:
        return None
    leading = next((r for r in present.values() if r.mode != "none"), next(iter(present.values())))
    summary = EvidenceSummary(
        mode=leading.mode,
        runners=list(leading.runners),
        sealed=leading.sealed,
        note=EXIT_CODE_ONLY if leading.mode == "exit-code" else None,
        runs=[
            RunSummary(
                name=name,
                passed=run.passed,
                exit_code=run.exit_code,
                complete=run.complete,
                counts=run.counts,
                problems=run.problems,
                missing=len(run.missing),
                canaries=canary_counts(run.canaries),
            )
            for name, run in present.items()
        ],
    )
    for name, kind in (("fail_to_pass", "failToPass"), ("pass_to_pass", "passToPass")):
        run = present.get(name)
        if run is None:
            continue
        for selector in run.selectors:
            summary.selectors.append(
                SelectorSummary(
                    kind=kind,  # type: ignore[arg-type]
                    selector=selector.selector,
                    attributed=selector.attributed,
                    ran=selector.ran if selector.attributed else None,
                    passed=selector.passed if selector.attributed else None,
                    failed=selector.failed if selector.attributed else None,
                    skipped=selector.skipped if selector.attributed else None,
                    error=selector.error if selector.attributed else None,
                    matched=selector.matched,
                    why=selector.why,
                )
            )
    return summary


@dataclass(frozen=True)
class Unmatched:
    """A selector that selected no test in some run of a verifier (a typo, a missing file)."""

    kind: Literal["failToPass", "passToPass"]
    selector: str
    why: str

    def sentence(self) -> str:
        which = "fail-to-pass" if self.kind == "failToPass" else "pass-to-pass"
        return f"{which} selector {self.selector} matched no test ({self.why})"


def unmatched_selectors(runs: Mapping[str, RunEvidence]) -> list[Unmatched]:
    """Every selector that some run of a verifier found selecting nothing, once each."""
    found: dict[tuple[str, str], Unmatched] = {}
    for name in sorted(runs):
        kind: Literal["failToPass", "passToPass"] = (
            "passToPass" if name.startswith("pass_to_pass") else "failToPass"
        )
        for selector in runs[name].selectors:
            if selector.matched is False and (kind, selector.selector) not in found:
                found[(kind, selector.selector)] = Unmatched(
                    kind=kind, selector=selector.selector, why=selector.why or "no test selected"
                )
    return list(found.values())


def ids_changed(runs: Mapping[str, RunEvidence]) -> list[str]:
    """Test ids the fail-to-pass run and its repeat disagree on (tests whose ids are not stable
    cannot be graded by a census)."""
    first, second = runs.get("fail_to_pass"), runs.get("fail_to_pass_repeat")
    if first is None or second is None or first.mode != "per-test" or second.mode != "per-test":
        return []
    return sorted(set(first.ids()) ^ set(second.ids()))


@dataclass(frozen=True, kw_only=True)
class VerifierEvidence:
    """Everything one verifier left of a gate (its /logs/verifier, copied out), read once."""

    reward: Reward | None = None
    details: VerifierDetails | None = None
    reward_problem: str | None = None  # reward.json present but malformed
    files: tuple[str, ...] = ()  # the reward's and details' files that exist (a stage's logs)
    runs: Mapping[str, RunEvidence] = field(default_factory=dict)  # by run name
    policy: tuple[PolicyChange, ...] = ()
    discarded: tuple[str, ...] = ()  # the harness paths test.sh undid
    selectors: tuple[SelectorResult, ...] = ()  # each fail-to-pass selector alone
    pass_to_pass_selectors: tuple[SelectorResult, ...] = ()
    # The last line each test command printed (`fail_to_pass`, `pass_to_pass`).
    last_lines: Mapping[str, str] = field(default_factory=dict)

    def problem(self, name: str) -> str | None:
        """The first problem the evidence rules found in run `name`."""
        run = self.runs.get(name)
        return run.problems[0] if run is not None and run.problems else None

    @property
    def problems(self) -> dict[str, str]:
        return {name: p for name in (*RUN_NAMES, CANARY_RUN) if (p := self.problem(name))}

    @property
    def selects_pass_to_pass(self) -> bool:
        """False when the task selects no pass-to-pass test: its run was judged as "none"."""
        run = self.runs.get("pass_to_pass")
        return run is None or run.mode != "none"

    @property
    def undone(self) -> list[PolicyChange]:
        return [c for c in self.policy if c.verdict != "keep"]

    @property
    def summary(self) -> EvidenceSummary | None:
        return summarize(self.runs)

    @property
    def unmatched(self) -> list[Unmatched]:
        return unmatched_selectors(self.runs)

    @property
    def ids_changed(self) -> list[str]:
        return ids_changed(self.runs)
