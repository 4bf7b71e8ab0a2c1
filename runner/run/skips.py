"""Why a stage did not run: the typed reasons the verdict and the report read."""

from __future__ import annotations

from enum import StrEnum


class Skip(StrEnum):
    """Why a stage did not run (its detail says it in these words): what the verdict and the
    report decide from, never the detail's text."""

    NOT_RUN = "not run"
    INTERRUPTED = "skipped: interrupted"
    BUILD_RED = "skipped: build did not pass"
    SMOKE_RED = "skipped: smoke did not pass"
    ORACLE_RED = "skipped: oracle did not pass"
    # A red gate decided the verdict while this one waited or ran (its detail names the gate).
    SETTLED = "skipped: verdict settled by"
    BUNDLE = "skipped: compiled bundle (no definition.json to audit)"
    # A hack stage skipped for one of these does not keep a task from being accepted.
    HACK_DISABLED = "skipped: --no-hack-gate"
    HACK_NONE = "skipped: no canned exploit applies to this task"
    # Another stage's own words (e.g. why the census is missing): `skipped: <why>`.
    OTHER = "skipped"

    @property
    def optional(self) -> bool:
        return self in (Skip.HACK_DISABLED, Skip.HACK_NONE)

    @property
    def on_another(self) -> bool:
        """Skipped because a stage it builds on did not pass: a reason more precise than a
        settled verdict."""
        return self in (Skip.BUILD_RED, Skip.SMOKE_RED, Skip.ORACLE_RED)


class SkippedError(Exception):
    """A stage that cannot run because another did not pass; the reason says which."""

    def __init__(self, reason: Skip, why: str | None = None) -> None:
        super().__init__(reason.value if why is None else f"skipped: {why}")
        self.reason = reason
        self.why = why
