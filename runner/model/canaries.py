"""Canaries (pure): tests the reference solution must fail, copied from the held-out tests with
one expected value changed, written among them at every verifier run.

The compiler derives them (runner.runners.canaries) into the bundle's tests/canaries.json, which
only root reads inside the verifier; the verifier's helper writes them into the held-out files
right after test.patch and tells them apart from the held-out tests by `idPattern` (before the
census) or by the ids the census sealed. A canary the reference solution does not kill at the
oracle, or kills in one run and not another, is dropped; the census keeps the rest
(CanaryCensus). Once sealed, a canary that passes is tampering: whatever made it pass makes
tests report "passed" without the code being right.

tests/unit/test_verifier_evidence.py checks that every key the helper reads is a field here."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

# The rule a passing canary breaks, as every report says it: never which test it was.
CANARY_RULE = "a test the reference solution fails passed"
# The rule a kept canary breaks when the full fail-to-pass run did not run it (or only skipped
# it): code that takes tests out of the run must not leave only those it can answer.
CANARY_SILENT_RULE = "a test the reference solution fails did not run"
# A blind guess must get past every canary with at most this chance (each held-out test with k
# canaries of its own is guessed right with 1/k, 1/2 for one: blind_guess).
GUESS_TARGET = 1 / 8
CanaryOutcome = Literal["killed", "passed", "not-run", "flaky", "interfered", "unplaced"]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="ignore"
    )


class Canary(_Model):
    """One canary of a per-test runner: `text` is inserted before line `line` (0-based) of
    `file` as test.patch leaves it; the canaries inserted before one line go in `order`
    (lowest first: a random order of the group's, never the order they were made in; the
    copies after a test are negative, to go before the next test's copies at that line)."""

    key: str
    runner: str
    file: str  # repository path
    line: int
    text: str
    order: int = 0
    name: str  # its test's name as written
    of: str  # the held-out test it copies
    group: str  # that test's key: the canaries of one test are guessed together
    id_pattern: str  # a reported test id is this canary's (or one of its cases') when it matches
    mutation: str  # what changed, for whoever reads the bundle or the report


class ExitCodeCanary(_Model):
    """The held-out file `file` with one expected value changed: the test command run over it
    must exit non-zero."""

    key: str
    file: str
    content: str
    mutation: str


class CanarySet(_Model):
    """tests/canaries.json."""

    schema_version: Literal[1] = 1
    # The sha256 of each file canaries go into, as test.patch leaves it: they are written into
    # that file only.
    files: dict[str, str] = Field(default_factory=dict)
    canaries: list[Canary] = Field(default_factory=list)
    exit_code: list[ExitCodeCanary] = Field(default_factory=list)
    # Why a held-out file, or the task, has none (the report says it, never silently).
    none: list[str] = Field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True), indent=2, ensure_ascii=True) + "\n"

    @property
    def guess(self) -> float:
        return blind_guess([c.group for c in self.canaries]) if self.canaries else 1.0


class CanaryPlan(_Model):
    """What a verification knows of its bundle's canaries (the plan's): their keys, the test
    each copies, the exit-code ones, and why a file or the task has none."""

    keys: list[str] = Field(default_factory=list)
    groups: dict[str, str] = Field(default_factory=dict)
    exit_code: list[str] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, canaries: CanarySet) -> CanaryPlan:
        return cls(
            keys=[c.key for c in canaries.canaries],
            groups={c.key: c.group for c in canaries.canaries},
            exit_code=[c.key for c in canaries.exit_code],
            none=list(canaries.none),
        )

    @property
    def count(self) -> int:
        return len(self.keys) + len(self.exit_code)


class DroppedCanary(_Model):
    key: str
    why: CanaryOutcome
    detail: str = ""


class CanaryCensus(_Model):
    """The canaries the verification kept (the census's `canaries`): each per-test one with the
    ids its tests had at the oracle, and the exit-code ones."""

    keys: list[str] = Field(default_factory=list)
    ids: dict[str, list[str]] = Field(default_factory=dict)
    groups: dict[str, str] = Field(default_factory=dict)  # key -> the test it copies
    exit_code: list[str] = Field(default_factory=list)
    dropped: list[DroppedCanary] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.keys) + len(self.exit_code)

    @property
    def guess(self) -> float:
        per_test = blind_guess([self.groups.get(k, k) for k in self.keys]) if self.keys else 1.0
        return per_test * (0.5 if self.exit_code else 1.0)


class CanaryRun(_Model):
    """What one run's evidence says of one canary: its tests' ids and the worst outcome."""

    key: str
    ids: list[str] = Field(default_factory=list)
    outcome: str  # passed, failed, error, skipped... or "missing" (not run)


def blind_guess(groups: list[str]) -> float:
    """The chance that a guess, blind to which tests are canaries, passes every held-out test
    and fails every canary: per copied test with k canaries, 1/k, or 1/2 for one. Not
    1/(k+1): a test's copies are made around its first one (the pivot), which code that reads
    the file finds at the centre of its group, so a forger that knows how canaries are made
    picks among the k others (runner.runners.canaries.derive)."""
    counts: dict[str, int] = {}
    for group in groups:
        counts[group] = counts.get(group, 0) + 1
    chance = 1.0
    for k in counts.values():
        chance /= max(k, 2)
    return chance


def read_canaries(raw: bytes | None) -> CanarySet | None:
    if raw is None:
        return None
    try:
        return CanarySet.model_validate_json(raw)
    except ValidationError:
        return None
