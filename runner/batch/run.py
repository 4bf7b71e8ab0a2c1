"""`batch`: many tasks, bounded concurrency, several Docker engines.

Each task runs as a `verify` child process pointed at one engine (DOCKER_HOST or
DOCKER_CONTEXT in its environment), so its images are built where it runs and one task can
never disturb another. A task whose verification ends in an infrastructure failure is looked
at twice: if its engine no longer answers, the engine leaves the pool and the task moves to
another one (not counted as a retry); otherwise it is retried while `--retries` allows. Red
verdicts are never retried.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.batch.model import BatchResult, EngineSpec, TaskOutcome
from runner.engine.cachebudget import collect
from runner.engine.docker import connected
from runner.engine.hosts import Endpoint, SshTunnel, context_endpoint
from runner.engine.hosts import resolve as resolve_endpoint
from runner.model.settings import SharedSettings, child_environment
from runner.plan.labels import runner_labels
from runner.run.events import read_events
from runner.run.state import PROGRESS
from runner.supervise.job import VerifyJob
from runner.supervise.launcher import Child, Launcher

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2
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


@dataclass(kw_only=True)
class Running:
    index: int
    outcome: TaskOutcome
    engine: Engine
    child: Child
    run_dir: Path
    started: float
    run_id: str = ""
    events_offset: int = 0
    # Wall clock, as the cache budget's use records are: what it used since then stays.
    since: float = field(default_factory=time.time)
    stage: str = "starting"


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    targets: list[Path]
    out: Path
    engines: list[EngineSpec]
    jobs: int
    retries: int
    verify_settings: SharedSettings = field(default_factory=SharedSettings)
    cache_budget: int | None = None
    python: str = sys.executable
    fork: bool | None = None  # children forked from a pre-imported server (default: env)


@dataclass(kw_only=True)
class Progress:
    """What the CLI shows: called from the coordinator's thread."""

    started: Callable[[TaskOutcome, str], None] = lambda outcome, engine: None
    stage: Callable[[TaskOutcome, str], None] = lambda outcome, stage: None
    finished: Callable[[TaskOutcome, int, int], None] = lambda outcome, done, total: None
    note: Callable[[str], None] = lambda text: None


@dataclass(kw_only=True)
class _State:
    pending: list[int] = field(default_factory=list)
    running: list[Running] = field(default_factory=list)
    done: int = 0


def _declared_task_id(target: Path) -> str:
    """The task id its definition declares (a report of an invalid task may have none), or the
    directory's name."""
    with contextlib.suppress(OSError, ValueError):
        definition = json.loads((target / "definition.json").read_text(encoding="utf-8"))
        if isinstance(definition, dict) and isinstance(definition.get("taskId"), str):
            return str(definition["taskId"])[:128]
    return target.resolve().name


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


class Batch:
    def __init__(self, options: BatchOptions, progress: Progress) -> None:
        self.options = options
        self.progress = progress
        base = child_environment()
        # Every engine's endpoint resolved now, as the docker CLI resolves it: an unknown
        # context name stops the batch before anything runs (exit 2), never a silent default.
        self.engines = [
            Engine(spec=s, env=endpoint_of(s, base).environment(base)) for s in options.engines
        ]
        self.batch_id = uuid.uuid4().hex[:10]
        self.outcomes = [
            TaskOutcome(target=str(t), task_id=_declared_task_id(t)) for t in options.targets
        ]
        self.stop = threading.Event()
        self.freed = 0
        self.launcher = Launcher(python=options.python, fork=options.fork)

    # ---- the loop ----------------------------------------------------------------------

    def run(self) -> BatchResult:
        started = time.monotonic()
        state = _State(pending=list(range(len(self.outcomes))))
        for engine in self.engines:
            reason = self._connect(engine)
            if reason is not None:
                self._lose(engine, reason)
        try:
            while (state.pending or state.running) and not self.stop.is_set():
                self._start_what_fits(state)
                self._reap(state)
                self._look_at_lost_engines()
                if not any(e.alive for e in self.engines) and state.pending:
                    for index in state.pending:
                        outcome = self.outcomes[index]
                        outcome.reason = "no Docker engine of the batch answers: " + "; ".join(
                            f"{e.spec.name}: {e.lost_reason}" for e in self.engines
                        )
                        state.done += 1
                        self.progress.finished(outcome, state.done, len(self.outcomes))
                    state.pending.clear()
                time.sleep(POLL_SECONDS)
        finally:
            self._interrupt(state)
            for engine in self.engines:
                if engine.stranded:
                    engine.next_look = 0.0
            self._look_at_lost_engines(rejoin=False)
            for engine in self.engines:
                if engine.tunnel is not None:
                    engine.tunnel.close()
            self.launcher.close()
        return BatchResult(
            tasks=self.outcomes,
            seconds=time.monotonic() - started,
            engines=[e.as_json() for e in self.engines],
            freed_bytes=self.freed,
        )

    def _slots(self) -> int:
        return self.options.jobs - sum(e.running for e in self.engines)

    def _start_what_fits(self, state: _State) -> None:
        while state.pending and self._slots() > 0:
            free = [e for e in self.engines if e.alive and e.running < e.spec.capacity]
            if not free:
                return
            engine = min(free, key=lambda e: (e.running / e.spec.capacity, e.ran))
            index = state.pending.pop(0)
            state.running.append(self._launch(index, engine))

    def _launch(self, index: int, engine: Engine) -> Running:
        outcome = self.outcomes[index]
        outcome.attempts += 1
        outcome.engine = engine.spec.name
        name = Path(outcome.target).resolve().name or f"task-{index}"
        run_dir = self.options.out / "runs" / f"{index:04d}-{name}" / f"attempt-{outcome.attempts}"
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        # Unique to the attempt, its last part too: container names end with it, and the same
        # task may run twice at once on one engine (two engine URLs can reach one daemon).
        run_id = f"batch-{self.batch_id}-{index}-{outcome.attempts}-{uuid.uuid4().hex[:10]}"
        attempt = run_dir.parent / f"attempt-{outcome.attempts}"
        child = self.launcher.start(
            VerifyJob(
                target=Path(outcome.target),
                run_dir=run_dir,
                run_id=run_id,
                events=attempt.with_suffix(".events.jsonl"),
                stdout=attempt.with_suffix(".json"),
                stderr=attempt.with_suffix(".stderr.log"),
                settings=self.options.verify_settings,
                env=engine.env,
            )
        )
        engine.running += 1
        engine.ran += 1
        self.progress.started(outcome, engine.spec.name)
        return Running(
            index=index,
            outcome=outcome,
            engine=engine,
            child=child,
            run_dir=run_dir,
            started=time.monotonic(),
            run_id=run_id,
        )

    def _reap(self, state: _State) -> None:
        for entry in list(state.running):
            events, entry.events_offset = read_events(
                entry.run_dir.parent / f"attempt-{entry.outcome.attempts}.events.jsonl",
                entry.events_offset,
            )
            for event in events:
                if event.status == PROGRESS:
                    # What a stage of it does now (the tests so far): the live view's line.
                    self.progress.stage(entry.outcome, f"{event.stage}: {event.detail[:160]}")
                elif event.status == "running" and event.stage != entry.stage:
                    entry.stage = event.stage
                    self.progress.stage(entry.outcome, event.stage)
            if entry.child.poll() is None:
                continue
            state.running.remove(entry)
            entry.engine.running -= 1
            outcome = entry.outcome
            outcome.seconds += time.monotonic() - entry.started
            result = entry.child.result()
            report = result.document
            if result.report is None or result.lost:
                # A fork server lost under it is the machine's failure, retried like one.
                report_verdict, reason = "infrastructure_failed", result.failure()
            else:
                report_verdict = result.report.verdict.value
                reason = result.report.reason
            if report_verdict == "infrastructure_failed" and not self.stop.is_set():
                lost = ping(entry.engine)
                if lost is not None:
                    self._lose(entry.engine, lost)
                    entry.engine.stranded.append(entry.run_id)
                    outcome.moved += 1
                    self.progress.note(
                        f"{outcome.target}: engine {entry.engine.spec.name} stopped answering; "
                        "the task moves to another engine"
                    )
                    state.pending.insert(0, entry.index)
                    continue
                if outcome.attempts - outcome.moved <= self.options.retries:
                    self.progress.note(
                        f"{outcome.target}: infrastructure failure ({reason[:200]}); retrying"
                    )
                    state.pending.insert(0, entry.index)
                    continue
            outcome.verdict = report_verdict
            outcome.reason = reason
            outcome.report = report
            outcome.task_id = (report or {}).get("taskId") or outcome.task_id
            outcome.run_dir = str(entry.run_dir)
            state.done += 1
            self.progress.finished(outcome, state.done, len(self.outcomes))
            if self.options.cache_budget is not None and entry.engine.alive:
                # The tasks still running on this engine keep what they use.
                since = min(
                    (r.since for r in state.running if r.engine is entry.engine),
                    default=time.time(),
                )
                self.freed += apply_budget(
                    entry.engine, self.options.cache_budget, protect_since=since
                )

    def _connect(self, engine: Engine) -> str | None:
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

    def _look_at_lost_engines(self, *, rejoin: bool = True) -> None:
        """A lost engine that answers again: the containers of the attempts it stranded are
        removed, and it takes tasks again."""
        now = time.monotonic()
        for engine in self.engines:
            if engine.alive or now < engine.next_look:
                continue
            engine.next_look = now + LOST_ENGINE_LOOK_SECONDS
            if self._connect(engine) is not None:
                continue
            removed = remove_runs(engine, engine.stranded)
            engine.cleaned += removed
            if engine.stranded:
                self.progress.note(
                    f"engine {engine.spec.name} answers again: removed {removed} container(s), "
                    f"network(s) and volume(s) of {len(engine.stranded)} stranded attempt(s)"
                )
            engine.stranded = []
            if rejoin:
                engine.alive = True
                self.progress.note(f"engine {engine.spec.name} rejoins the pool")

    def _lose(self, engine: Engine, reason: str) -> None:
        if engine.alive:
            engine.alive = False
            engine.lost_reason = reason
            self.progress.note(f"engine {engine.spec.name} left the pool: {reason}")

    def _interrupt(self, state: _State) -> None:
        """Stop what still runs (each verification removes its own containers)."""
        for entry in state.running:
            entry.child.send_signal(signal.SIGTERM)
        for entry in state.running:
            if entry.child.wait(60) is None:
                entry.child.send_signal(signal.SIGKILL)
                entry.child.wait(10)
            entry.outcome.reason = "interrupted: the batch was stopped"
