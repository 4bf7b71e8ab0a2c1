"""What Temporal's server keeps of the worker's errors: an infrastructure failure at its
largest (a reason and a build log far past the budgets of runner.worker.activities), raised by
a real activity, stays whole as the pending activity's last failure on a real server, instead
of being cut to "Failure exceeds size limit." with its details dropped."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from runner.sidecar.jobs import Job
from runner.sidecar.request import JobState
from runner.worker.activities import outcome
from tests.temporal import temporal, temporal_server
from tests.unit.test_worker import WIDE_FAILURE, finished

ACTIVITY = "selfbench.test.fails"


class Failing:
    def __init__(self, job: Job) -> None:
        self.job = job

    @activity.defn(name=ACTIVITY)
    async def fails(self) -> None:
        outcome(self.job)  # raises the error the worker's activity raises for this job


@workflow.defn(name="selfbench.test.retried", sandboxed=False)
class Retried:
    @workflow.run
    async def run(self) -> None:
        # A retry far away: the failure stays the pending activity's last one.
        await workflow.execute_activity(
            ACTIVITY,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(initial_interval=timedelta(minutes=10)),
        )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with temporal_server(tmp_path / "temporal") as address:
        yield address


async def _fail_once(server: str, queue: str, failing: Failing) -> None:
    client = await Client.connect(server)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[Retried],
        activities=[failing.fails],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(Retried.run, id=queue, task_queue=queue)
        for _ in range(300):
            pending = (await handle.describe()).raw_description.pending_activities
            if pending and pending[0].attempt > 1:
                return
            await asyncio.sleep(0.1)
        raise AssertionError("the activity did not fail once")


def test_the_largest_failed_attempt_is_kept_whole_by_the_server(
    server: str, tmp_path: Path
) -> None:
    _, job = finished(
        tmp_path, state=JobState.DONE, verdict="infrastructure_failed", report=WIDE_FAILURE
    )
    queue = f"selfbench-{uuid.uuid4().hex[:8]}"
    asyncio.run(_fail_once(server, queue, Failing(job)))
    described = temporal(server, "workflow", "describe", "--workflow-id", queue, "-o", "json")
    assert described.returncode == 0, described.stderr
    failure = json.loads(described.stdout)["pendingActivities"][0]["lastFailure"]
    assert failure["message"].startswith("build: éé") and failure["message"].endswith("…")
    info = failure["applicationFailureInfo"]
    assert info["type"] == "InfrastructureFailure", failure
    (details,) = info["details"]  # the temporal CLI prints payloads decoded
    assert details["runId"] == WIDE_FAILURE["runId"]
    tail = details["buildLogTail"]
    assert len(tail) >= 5 and tail[-1].startswith("199 ") and tail[-1].endswith("x…"), tail
    temporal(server, "workflow", "terminate", "--workflow-id", queue)
