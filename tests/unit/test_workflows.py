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


def test_the_live_view_reads_where_a_task_is_from_its_last_heartbeat_alone() -> None:
    """Temporal keeps only an activity's last heartbeat: each carries every stage's state."""
    from runner.worker.client import stage_summary

    beat = {
        "seq": 9,
        "stages": {
            "build": {"status": "passed", "detail": "images ready"},
            "nop": {"status": "running", "detail": "", "progress": "fail_to_pass: 3 passed"},
            "oracle": {"status": "running", "detail": ""},
            "smoke": {"status": "passed", "detail": ""},
        },
    }
    assert stage_summary(beat) == "nop: fail_to_pass: 3 passed, oracle running"
    # The worker moves a stage's latest event to the end.
    beat["stages"] = {
        "build": {"status": "passed", "detail": "images ready"},
        "smoke": {"status": "passed", "detail": ""},
        "nop": {"status": "passed", "detail": ""},
        "oracle": {"status": "passed", "detail": ""},
    }
    assert stage_summary(beat) == "oracle passed"
    # An earlier worker's heartbeat: the events since its previous one.
    assert stage_summary({"seq": 3, "events": [{"stage": "nop", "status": "running"}]}) == (
        "nop running"
    )
    assert stage_summary({"seq": 3, "events": []}) == ""
    assert stage_summary(None) == ""
