"""`worker`, wired: the job store and the service (as `serve` has them), a Temporal client and
worker polling one task queue, and the Prometheus metrics, until SIGTERM or SIGINT. Then the
worker stops polling, running activities get the grace period to finish, and what is still
running is interrupted (its containers removed) and handed back: Temporal retries it on another
worker."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from runner.artifacts.cachebound import BoundedBlobs
from runner.artifacts.store import open_store
from runner.model.settings import SharedSettings, child_environment
from runner.sidecar.run import open_service
from runner.supervise.job import grade_arguments
from runner.worker.activities import MAX_INFRASTRUCTURE_ATTEMPTS, VerifyActivities
from runner.worker.client import connect
from runner.worker.gradestored import GradeActivities
from runner.worker.pool import GradeWorkflow, PoolWorkflow, TaskWorkflow
from runner.worker.stored import StoredActivities
from runner.worker.workflows import BatchWorkflow

log = logging.getLogger(__name__)
# Time for an interrupted verification to remove its containers (runner.sidecar.service
# KILL_WAIT_SECONDS) once the grace period is over.
HANDBACK_SECONDS = 10.0
HEARTBEAT_THROTTLE_SECONDS = 3.0
DEFAULT_STORE_CACHE_BYTES = 20 * 1024**3


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    address: str
    namespace: str
    task_queue: str
    jobs: int
    state_dir: Path
    grace_seconds: float
    verify_settings: SharedSettings
    tls: Any = None  # temporalio.service.TLSConfig, or None for plain TCP
    metrics_address: tuple[str, int] | None = None
    allow_repo_roots: tuple[Path, ...] = ()
    allow_repo_urls: tuple[str, ...] = ()
    digest_settings: dict[str, Any] = field(default_factory=dict)
    base_image: str | None = None
    store: str | None = None  # the artifact store's URL: tasks by reference when given
    cache_budget: int | None = None  # bytes of task images kept (runner.engine.cachebudget)
    keep_runs: bool = False  # a published run's archive stays in the state directory too
    store_cache_budget: int = DEFAULT_STORE_CACHE_BYTES  # fetched blobs kept (LRU)
    # Infrastructure failures in a row after which an activity is final (activities.py).
    max_infrastructure_attempts: int = MAX_INFRASTRUCTURE_ATTEMPTS


def run_worker(options: WorkerOptions, *, announce: Callable[[str], None]) -> int:
    artifacts = blobs = None
    if options.store is not None:
        # Bundles fetched from the store are this worker's own files: its cache is a root
        # local repositories may come from (a reference's repository is a digest, never a path).
        cache = options.state_dir.resolve() / "cache"
        artifacts = open_store(options.store, cache=cache)
        blobs = BoundedBlobs(cache / "blobs", options.store_cache_budget)
        options = dataclasses.replace(
            options, allow_repo_roots=(*options.allow_repo_roots, blobs.directory)
        )
    store, service, metrics = open_service(options)
    activities = VerifyActivities(
        service, max_infrastructure_attempts=options.max_infrastructure_attempts
    )
    stored = grades = None
    if artifacts is not None:
        stored = StoredActivities(activities, artifacts, keep_runs=options.keep_runs, blobs=blobs)
        # evaluate's predictions, graded with this worker's own build options.
        grades = GradeActivities(
            artifacts,
            options.state_dir / "grades",
            grade_arguments(options.verify_settings),
            env=child_environment(),
        )
        # A fix whose green verification ran on another worker: its published run is the
        # reference, never the request's own copy.
        service.green_elsewhere = stored.green
    metrics_server: Any = None
    started = False

    def start() -> None:
        # Once Temporal answered: a worker that cannot reach it takes nothing in hand (no
        # recovery of the last stop's runs, no scheduler, no metrics port) before it exits 3.
        nonlocal metrics_server, started
        service.recover()
        # What the last stop left queued or running (a SIGKILL gives no hand-back) is
        # Temporal's now: after the heartbeat timeout it went to another worker.
        parked = activities.park_queued()
        if parked:
            announce(
                f"handed back {parked} verification(s) the last stop left unfinished: "
                "Temporal retries them"
            )
        if stored is not None and (swept := stored.sweep()):
            announce(f"removed {swept} unpublished run archive(s) the last stop left")
        service.start()
        started = True
        if options.metrics_address is not None:
            from prometheus_client import start_http_server

            host, port = options.metrics_address
            metrics_server, _ = start_http_server(port, addr=host, registry=metrics.registry)
            announce(f"metrics: http://{host}:{metrics_server.server_port}/metrics")

    try:
        asyncio.run(_poll(options, activities, stored, grades, announce, start))
    finally:
        if grades is not None:
            grades.close()
        if started:
            # The Temporal worker already gave running activities the grace period: what is
            # still running was handed back, so the service only interrupts it (its containers
            # removed) and requeues it in this store.
            announce("stopping: interrupting what is still running")
            service.stop(grace=HANDBACK_SECONDS)
            activities.park_queued()
            if stored is not None:
                stored.sweep()
        if metrics_server is not None:
            metrics_server.shutdown()
        store.close()
    announce("stopped")
    return 0


async def _poll(
    options: WorkerOptions,
    activities: VerifyActivities,
    stored: StoredActivities | None,
    grades: GradeActivities | None,
    announce: Callable[[str], None],
    start: Callable[[], None],
) -> None:
    from temporalio.worker import Worker

    client = await connect(options.address, options.namespace, options.tls)
    start()
    worker = Worker(
        client,
        task_queue=options.task_queue,
        workflows=[BatchWorkflow, PoolWorkflow, TaskWorkflow, GradeWorkflow],
        activities=[
            activities.verify,
            *([stored.verify_stored, stored.page, stored.record] if stored else []),
            *([grades.grade_stored] if grades else []),
        ],
        max_concurrent_activities=options.jobs,
        graceful_shutdown_timeout=timedelta(seconds=options.grace_seconds),
        # A cancellation reaches a running activity only in the answer to a heartbeat the SDK
        # sends: by default at most every 0.8 x the heartbeat timeout (48 s for the batch's
        # 60 s). A verification holding containers should stop within seconds.
        max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_THROTTLE_SECONDS),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    announce(
        f"polling {options.task_queue!r} in namespace {options.namespace!r} at "
        f"{options.address}; {options.jobs} verification(s) at once"
        + (f"; store {options.store}" if options.store else "; no store (inline requests only)")
    )
    async with worker:
        await stop.wait()
        # Leaving the block shuts the worker down: it stops polling, waits the grace period
        # for running activities, then cancels them (each cancel stops its verification).
        announce(
            f"stopping: no more activities taken; up to {options.grace_seconds:g} s for the "
            "running ones"
        )
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(sig)
