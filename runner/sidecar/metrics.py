"""Prometheus metrics of one sidecar, in a registry of its own (no process-global state)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# The `_created` series double every counter and nobody here graphs them.
disable_created_metrics()  # type: ignore[no-untyped-call]

STAGE_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self, depth: Callable[[], tuple[int, int]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._verifications = Counter(
            "selfbench_verifications",
            "Finished verifications by verdict (accepted, rejected, invalid, "
            "infrastructure_failed) or by how they ended otherwise (error, cancelled).",
            ["verdict"],
            registry=self.registry,
        )
        self._stages = Histogram(
            "selfbench_stage_duration_seconds",
            "How long each stage of a verification took.",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self._reuse = Counter(
            "selfbench_reuse_hits",
            "Requests answered with the accepted report of an identical payload.",
            registry=self.registry,
        )
        self._freed = Counter(
            "selfbench_cache_freed_bytes",
            "Bytes of task images the cache budget (--cache-budget) removed.",
            registry=self.registry,
        )
        queued = Gauge("selfbench_queue_depth", "Requests waiting to run.", registry=self.registry)
        queued.set_function(lambda: float(depth()[0]))
        running = Gauge("selfbench_running", "Verifications running now.", registry=self.registry)
        running.set_function(lambda: float(depth()[1]))

    def finished(self, verdict: str) -> None:
        self._verifications.labels(verdict=verdict).inc()

    def stage(self, stage: str, seconds: float) -> None:
        self._stages.labels(stage=stage).observe(seconds)

    def reused(self) -> None:
        self._reuse.inc()

    def freed(self, size: int) -> None:
        self._freed.inc(size)

    def render(self) -> bytes:
        return generate_latest(self.registry)
