"""The few Docker calls the sidecar makes itself: is the engine there, remove a run's
containers, a base image's id for the payload digest, the image cache budget."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from runner.base.errors import RunnerError

log = logging.getLogger(__name__)


class EngineOps:
    """The few Docker calls the sidecar makes itself (through runner.engine.docker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: Any = None
        self._ping_at = 0.0
        self._ping_ok = False
        self._budget_lock = threading.Lock()

    def _get(self) -> Any:
        from runner.engine.docker import connect

        if self._engine is None:
            self._engine = connect(timeout=30)
        return self._engine

    def reachable(self) -> bool:
        with self._lock:
            if time.monotonic() - self._ping_at < 2.0:
                return self._ping_ok
            try:
                self._get()._ping()
                self._ping_ok = True
            except Exception:
                self._ping_ok = False
                self._engine = None
            self._ping_at = time.monotonic()
            return self._ping_ok

    def remove_run(self, run_id: str) -> int:
        from runner.plan.labels import runner_labels

        with self._lock:
            try:
                return int(self._get().cleanup(runner_labels(run=run_id)))
            except (RunnerError, Exception) as exc:
                log.warning("could not remove the containers of run %s: %s", run_id, exc)
                self._engine = None
                return 0

    def image_id(self, ref: str) -> str | None:
        with self._lock:
            try:
                info = self._get().image(ref)
            except Exception:
                self._engine = None
                return None
            return str(info.id) if info is not None else None

    def apply_budget(self, budget: int, *, protect_since: float) -> int:
        """One pass of the image cache budget, on a connection of its own (removals take a
        while; the other calls go on meanwhile); the bytes it freed. A pass already running
        makes this one needless: it lists the images after this run ended."""
        from runner.engine.cachebudget import collect
        from runner.engine.docker import connected

        if not self._budget_lock.acquire(blocking=False):
            return 0
        try:
            with connected(timeout=120) as engine:
                result = collect(engine, budget, protect_since=protect_since)
        except Exception as exc:
            log.warning("cache budget: %s", exc)
            return 0
        finally:
            self._budget_lock.release()
        if result.removed:
            log.info(
                "cache budget: removed %d image(s), %.2f GB freed, %.2f GB kept",
                len(result.removed),
                result.freed_bytes / 1e9,
                result.kept_bytes / 1e9,
            )
        return result.freed_bytes

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                with contextlib.suppress(Exception):
                    self._engine.close()
            self._engine = None
