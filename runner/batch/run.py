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

from runner.batch.engines import Engine, EnginePool, apply_budget, endpoint_of, ping
from runner.batch.model import BatchResult, EngineSpec, TaskOutcome
from runner.model.settings import SharedSettings, child_environment
from runner.run.events import read_events
from runner.run.state import PROGRESS
from runner.supervise.job import VerifyJob
from runner.supervise.launcher import Child, Launcher

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2


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


class Batch:
    def __init__(self, options: BatchOptions, progress: Progress) -> None:
        self.options = options
        self.progress = progress
        base = child_environment()
        # Every engine's endpoint resolved now, as the docker CLI resolves it: an unknown
        # context name stops the batch before anything runs (exit 2), never a silent default.
        self.pool = EnginePool(
            [Engine(spec=s, env=endpoint_of(s, base).environment(base)) for s in options.engines],
            note=progress.note,
        )
        self.engines = self.pool.engines
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
        self.pool.open()
        try:
            while (state.pending or state.running) and not self.stop.is_set():
                self._start_what_fits(state)
                self._reap(state)
                self.pool.look_at_lost()
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
            self.pool.close()
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
                    self.pool.lose(entry.engine, lost, stranded=entry.run_id)
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

    def _interrupt(self, state: _State) -> None:
        """Stop what still runs (each verification removes its own containers)."""
        for entry in state.running:
            entry.child.send_signal(signal.SIGTERM)
        for entry in state.running:
            if entry.child.wait(60) is None:
                entry.child.send_signal(signal.SIGKILL)
                entry.child.wait(10)
            entry.outcome.reason = "interrupted: the batch was stopped"
