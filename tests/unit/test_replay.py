"""Running workflows survive a new release: recorded histories of every registered workflow
(`selfbench.batch`, `selfbench.pool` after a continue-as-new and one of kind "grade",
`selfbench.task`, `selfbench.grade`), taken from a
real Temporal server, replay against the current workflow code without a nondeterminism error.

A change that makes one of them fail is a change running workflows would fail on: put it behind
`workflow.patched(...)` or ship it under a new workflow name (runner/worker/pool.py). The
histories are re-recorded by `UPDATE_HISTORIES=1 pytest tests/integration/test_fleet.py -k
long_pool` (the pool and the task), by `UPDATE_HISTORIES=1 pytest
tests/integration/test_evaluate.py -k fleet` (the grade pool and the grade) and by a `batch
--temporal` run (the batch)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from runner.worker.pool import GradeWorkflow, PoolWorkflow, TaskWorkflow
from runner.worker.workflows import BatchWorkflow

HISTORIES = Path(__file__).resolve().parents[1] / "data" / "histories"
RECORDED = sorted(HISTORIES.glob("*.json"))


def test_every_registered_workflow_has_a_recorded_history() -> None:
    # `selfbench.pool-grade`: a pool of kind "grade" (evaluate --temporal), beside a verify one.
    kinds = {path.name.split("--", 1)[0] for path in RECORDED}
    assert kinds == {
        "selfbench.batch",
        "selfbench.pool",
        "selfbench.pool-grade",
        "selfbench.task",
        "selfbench.grade",
    }


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_a_recorded_history_replays_on_the_current_code(path: Path) -> None:
    workflow_id = path.stem.split("--", 1)[1].replace("--", "/")
    history = WorkflowHistory.from_json(workflow_id, path.read_text())
    replayer = Replayer(workflows=[BatchWorkflow, PoolWorkflow, TaskWorkflow, GradeWorkflow])
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
    assert result.replay_failure is None, result.replay_failure


def test_a_changed_pool_fails_its_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a pool that names its children differently no longer replays."""
    path = next(p for p in RECORDED if p.name.startswith("selfbench.pool--"))
    events = json.loads(path.read_text())["events"]
    assert any("startChildWorkflowExecutionInitiatedEventAttributes" in e for e in events)
    from runner.worker import pool

    monkeypatch.setattr(pool, "TASK_WORKFLOW", "selfbench.task.v2")
    history = WorkflowHistory.from_json("pool-1", path.read_text())
    # Outside the sandbox, which would import the module afresh (without the change).
    replayer = Replayer(
        workflows=[pool.PoolWorkflow, pool.TaskWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
    assert result.replay_failure is not None
