"""A stage that cannot run: the exception its thread raises, with the typed reason
(runner.model.stages.Skip) the verdict and the report read."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TypeVar

from runner.model.stages import Skip

log = logging.getLogger(__name__)
T = TypeVar("T")


class SkippedError(Exception):
    """A stage that cannot run because another did not pass; the reason says which."""

    def __init__(self, reason: Skip, why: str | None = None) -> None:
        super().__init__(reason.value if why is None else f"skipped: {why}")
        self.reason = reason
        self.why = why


def side_run_result(future: Future[T], what: str) -> T | None:
    """A run started beside a gate (a predicted or early one): its result, or None when it did
    not finish (said in the log: its caller verifies again). A SkippedError passes through: the
    run is stopping."""
    try:
        return future.result()
    except SkippedError:
        raise
    except Exception as exc:
        log.warning("%s did not finish (%s); verifying again", what, exc)
        return None
