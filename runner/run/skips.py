"""A stage that cannot run: the exception its thread raises, with the typed reason
(runner.model.stages.Skip) the verdict and the report read."""

from __future__ import annotations

from runner.model.stages import Skip


class SkippedError(Exception):
    """A stage that cannot run because another did not pass; the reason says which."""

    def __init__(self, reason: Skip, why: str | None = None) -> None:
        super().__init__(reason.value if why is None else f"skipped: {why}")
        self.reason = reason
        self.why = why
