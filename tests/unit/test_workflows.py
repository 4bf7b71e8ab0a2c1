"""The batch workflow's input, read as plain JSON: what it refuses and how (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from runner.worker.workflows import batch_input, request_problem


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ([1, 2], "the input is not an object"),
        ({"requests": {"a": 1}}, "requests is not a list"),
        ({"requests": [], "verify_timeout_seconds": -5}, "verify_timeout_seconds must be"),
        ({"requests": [], "concurrency": 0}, "concurrency must be"),
        ({"requests": [], "concurrency": 2.5}, "concurrency must be"),
        ({"requests": [], "max_attempts": True}, "max_attempts must be"),
        ({"requests": [], "heartbeat_timeout_seconds": float("nan")}, "heartbeat_timeout"),
    ],
)
def test_a_batch_that_cannot_run_says_why(raw: Any, words: str) -> None:
    _, problem = batch_input(raw)
    assert problem is not None and words in problem


def test_good_settings_pass_and_each_request_is_checked_alone() -> None:
    batch, problem = batch_input({"requests": [{"id": "a"}, 3], "concurrency": 2})
    assert problem is None and batch.concurrency == 2 and len(batch.requests) == 2
    assert request_problem({"id": "a"}) is None
    assert request_problem(3) == "is not an object"
    assert request_problem({"id": ""}) == "has no id"
