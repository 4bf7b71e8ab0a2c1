"""The Docker engines a `batch` or an `evaluate` spreads its children over: each engine's
endpoint (resolved as the docker CLI resolves it, an ssh engine through one login), whether it
answers, and the pool's rule for a lost one: it leaves the pool, what it was running moves,
and once it answers again the containers of the attempts it stranded are removed and it takes
work again (looked at every LOST_ENGINE_LOOK_SECONDS)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.base.errors import RunnerError
from runner.batch.model import EngineSpec
from runner.engine.cachebudget import collect
from runner.engine.docker import connected
from runner.engine.hosts import Endpoint, SshTunnel, context_endpoint
from runner.engine.hosts import resolve as resolve_endpoint
from runner.plan.labels import runner_labels

log = logging.getLogger(__name__)
LOST_ENGINE_LOOK_SECONDS = 10.0


@dataclass(kw_only=True)
class Engine:
    spec: EngineSpec
    env: dict[str, str]
    alive: bool = True
    running: int = 0
    ran: int = 0
    lost_reason: str | None = None
    tunnel: SshTunnel | None = None  # an ssh engine: one login for every task sent there
    # Attempts that were running when the engine was lost: their containers are removed once
    # it answers again.
    stranded: list[str] = field(default_factory=list)
    next_look: float = 0.0
    cleaned: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.spec.name,
            "capacity": self.spec.capacity,
            "tasks": self.ran,
            "alive": self.alive,
            "lostReason": self.lost_reason,
            "strandedRuns": list(self.stranded),
            "removedAfterLoss": self.cleaned,
        }


def ping(engine: Engine) -> str | None:
    """None when the engine answers, else why not."""
    try:
        with connected(environment=engine.env, timeout=15):
            return None
    except RunnerError as exc:
        return exc.message


def remove_runs(engine: Engine, run_ids: list[str]) -> int:
    """Remove what these runs left on the engine (labelled by run id); how many objects."""
    if not run_ids:
        return 0
    try:
        with connected(environment=engine.env, timeout=60) as docker_engine:
            return sum(docker_engine.cleanup(runner_labels(run=r)) for r in run_ids)
    except RunnerError as exc:
        log.warning("removing stranded runs on %s: %s", engine.spec.name, exc)
        return 0


def endpoint_of(spec: EngineSpec, base: dict[str, str]) -> Endpoint:
    if spec.inherit:
        return resolve_endpoint(base)
    if spec.url is not None:
        return Endpoint(url=spec.url, name=spec.url, from_host_variable=True)
    return context_endpoint(spec.name, base, field="--engine")


def apply_budget(engine: Engine, budget: int, *, protect_since: float) -> int:
    try:
        with connected(environment=engine.env, timeout=60) as docker_engine:
            return collect(docker_engine, budget, protect_since=protect_since).freed_bytes
    except RunnerError as exc:
        log.warning("cache budget on %s: %s", engine.spec.name, exc)
        return 0


class EnginePool:
    """The engines of one batch or evaluation, and what happens when one is lost."""

    def __init__(self, engines: list[Engine], note: Callable[[str], None]) -> None:
        self.engines = engines
        self.note = note

    def open(self) -> None:
        """Each engine's first look (an ssh engine's login): one that does not answer starts
        outside the pool, and is looked at again as a lost one."""
        for engine in self.engines:
            reason = self.connect(engine)
            if reason is not None:
                self.lose(engine, reason)

    def alive(self) -> list[Engine]:
        return [e for e in self.engines if e.alive]

    def connect(self, engine: Engine) -> str | None:
        """Open an ssh engine's one login (again, after a loss), then ping. None: it answers."""
        url = engine.env.get("DOCKER_HOST", "")
        if engine.tunnel is not None or url.startswith("ssh://"):
            try:
                if engine.tunnel is None:
                    engine.tunnel = SshTunnel(url)
                if not engine.tunnel.alive():
                    engine.env = {**engine.env, "DOCKER_HOST": engine.tunnel.open()}
            except RunnerError as exc:
                return exc.message
        return ping(engine)

    def lose(self, engine: Engine, reason: str, *, stranded: str | None = None) -> None:
        """`engine` leaves the pool; `stranded`: the run id of an attempt it was running, whose
        containers are removed once it answers again."""
        if stranded is not None:
            engine.stranded.append(stranded)
        if engine.alive:
            engine.alive = False
            engine.lost_reason = reason
            self.note(f"engine {engine.spec.name} left the pool: {reason}")

    def look_at_lost(self, *, rejoin: bool = True) -> None:
        """A lost engine that answers again: the containers of the attempts it stranded are
        removed, and it takes work again."""
        now = time.monotonic()
        for engine in self.engines:
            if engine.alive or now < engine.next_look:
                continue
            engine.next_look = now + LOST_ENGINE_LOOK_SECONDS
            if self.connect(engine) is not None:
                continue
            removed = remove_runs(engine, engine.stranded)
            engine.cleaned += removed
            if engine.stranded:
                self.note(
                    f"engine {engine.spec.name} answers again: removed {removed} container(s), "
                    f"network(s) and volume(s) of {len(engine.stranded)} stranded attempt(s)"
                )
            engine.stranded = []
            if rejoin:
                engine.alive = True
                self.note(f"engine {engine.spec.name} rejoins the pool")

    def close(self) -> None:
        """At the end: a lost engine with stranded attempts is looked at once more (their
        containers removed if it answers; it does not rejoin), and every ssh login closed."""
        for engine in self.engines:
            if engine.stranded:
                engine.next_look = 0.0
        self.look_at_lost(rejoin=False)
        for engine in self.engines:
            if engine.tunnel is not None:
                engine.tunnel.close()
