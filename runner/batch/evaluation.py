"""`evaluate`: an agent's predictions graded against sealed bundles, each by the path `grade`
takes (a `grade` child per prediction: a fresh verifier, the sealed census, per-test evidence,
the patch policy, the canaries), with bounded concurrency over one or more engines.

- A task's images are built once per engine: its first prediction there runs alone (it builds
  them, or finds them in the engine's cache); the rest then run side by side. Each task keeps to
  one engine, and the heaviest tasks start first.
- Each result is <out>/results/<key>.json, its key the content of the bundle and the patch
  (runner.model.evalinput.result_key): a run started again grades only what has no result, and
  a changed prediction (or bundle) is graded again. A result is written only once its grade has
  ended; an interrupted grade removes its containers and leaves no result.
- An empty patch is not run: nop already proved the tests fail on the base.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.base.safeio import private_dir
from runner.batch.engines import Engine as EngineSlot
from runner.batch.engines import EnginePool, endpoint_of, ping
from runner.batch.evalresults import (
    Instance,
    grade_files,
    grade_report,
    graded_result,
    result_of,
    write_result,
)
from runner.batch.evalsources import EvalTask
from runner.batch.model import EngineSpec
from runner.model.evaluation import InstanceResult
from runner.model.settings import child_environment
from runner.supervise.job import GradeJob
from runner.supervise.launcher import Child, Launcher

log = logging.getLogger(__name__)
# How often ended grades are looked for: a grade of a small task takes about a second, and
# a slot left idle costs as much as the look (measured: 0.2 s cost 0.25 s a prediction).
POLL_SECONDS = 0.05


@dataclass(kw_only=True)
class EvaluateProgress:
    """What the CLI shows: called from the coordinator's thread."""

    started: Callable[[Instance, str], None] = lambda instance, engine: None
    finished: Callable[[InstanceResult, int, int], None] = lambda result, done, total: None
    note: Callable[[str], None] = lambda text: None


@dataclass(kw_only=True)
class _Running:
    instance: Instance
    engine: EngineSlot
    child: Child
    run_dir: Path
    started: float
    attempt: int
    run_id: str


@dataclass(kw_only=True)
class _Plan:
    pending: list[Instance]
    running: list[_Running] = field(default_factory=list)
    built: set[tuple[str, str]] = field(default_factory=set)  # (task id, engine name)
    home: dict[str, EngineSlot] = field(default_factory=dict)  # task id -> its engine
    attempts: dict[str, int] = field(default_factory=dict)  # key -> grades started
    done: int = 0
    prebuilt: set[str] = field(default_factory=set)  # task ids an earlier run graded


class FleetGrader(Protocol):
    """What grades the predictions elsewhere: each result written (signed) in `results_dir`
    as it comes, and added to `results`."""

    def grade(
        self,
        todo: list[Instance],
        results_dir: Path,
        workflow_id: str,
        *,
        note: Callable[[str], None],
        finished: Callable[[InstanceResult, int, int], None],
        results: list[InstanceResult],
    ) -> None: ...


def grade_run_id(evaluation_id: str, key: str, attempt: int) -> str:
    """A grade's run id: `eval-<evaluation>-<key>-<attempt>-<unique>`. Its last part is this
    grade's alone: container and network names end with it, and a task's predictions run side
    by side on one engine (with the attempt last, they were all `-1`, and collided)."""
    return f"eval-{evaluation_id}-{key[:10]}-{attempt}-{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True, kw_only=True)
class EvaluateOptions:
    out: Path
    engines: list[EngineSpec]
    jobs: int
    retries: int = 1
    grade_options: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # for every grade (trusted keys)
    python: str = sys.executable
    fork: bool | None = None
    # The fleet instead of engines: `evaluate --temporal` (runner.worker.evalfleet.FleetGrade,
    # handed in by the command line: this layer does not reach up to the worker's).
    fleet: FleetGrader | None = None


class Evaluation:
    """Grades the instances that have no result; `run` returns the results it wrote."""

    def __init__(self, options: EvaluateOptions, progress: EvaluateProgress) -> None:
        self.options = options
        self.progress = progress
        base = child_environment()
        self.pool = EnginePool(
            [
                EngineSlot(spec=s, env=endpoint_of(s, base).environment(base) | options.env)
                for s in options.engines
            ],
            note=progress.note,
        )
        self.engines = self.pool.engines
        self.evaluation_id = uuid.uuid4().hex[:10]
        self.launcher = Launcher(python=options.python, fork=options.fork)
        self.results: list[InstanceResult] = []

    def run(
        self, todo: list[Instance], *, built: frozenset[str] = frozenset()
    ) -> list[InstanceResult]:
        """Grade `todo`; `built`: tasks an earlier run graded here (their images are in the
        engine's cache, so their first grade need not run alone)."""
        # Heaviest task first; a task's predictions together (its first one builds).
        order = sorted(
            todo, key=lambda i: (-i.task.weight, i.task.task_id, i.prediction.instance_id)
        )
        plan = _Plan(pending=order, prebuilt=set(built))
        if not order:
            return self.results
        self.pool.open()
        total = len(order)
        try:
            while plan.pending or plan.running:
                self.pool.look_at_lost()
                if not self.pool.alive() and not plan.running:
                    self.progress.note("no engine answers: the rest is not graded")
                    break
                self._start_what_fits(plan)
                if not self._reap(plan, total):
                    time.sleep(POLL_SECONDS)
        finally:
            self._stop(plan)
            self.pool.close()
            self.launcher.close()
        return self.results

    def _home(self, plan: _Plan, task: EvalTask) -> EngineSlot | None:
        """The engine that grades this task (where its images are built): the least loaded
        engine that answers, chosen when the task first runs, again if its engine was lost."""
        home = plan.home.get(task.task_id)
        if home is None or not home.alive:
            alive = [e for e in self.engines if e.alive]
            if not alive:
                return None
            homed = [e.spec.name for e in plan.home.values()]
            home = min(alive, key=lambda e: (homed.count(e.spec.name) / e.spec.capacity, e.ran))
            plan.home[task.task_id] = home
        return home

    def _start_what_fits(self, plan: _Plan) -> None:
        slots = self.options.jobs - len(plan.running)
        building = {(r.instance.task.task_id, r.engine.spec.name) for r in plan.running}
        for instance in list(plan.pending):
            if slots <= 0:
                return
            engine = self._home(plan, instance.task)
            if engine is None or engine.running >= engine.spec.capacity:
                continue
            pair = (instance.task.task_id, engine.spec.name)
            # An earlier run's images are where it graded: with one engine, here.
            earlier = instance.task.task_id in plan.prebuilt and len(self.engines) == 1
            ready = pair in plan.built or earlier
            if not ready and pair in building:
                continue  # its images are being built by the task's first grade there
            plan.pending.remove(instance)
            plan.running.append(self._launch(plan, instance, engine))
            building.add(pair)
            slots -= 1

    def _launch(self, plan: _Plan, instance: Instance, engine: EngineSlot) -> _Running:
        attempt = plan.attempts.get(instance.key, 0) + 1
        plan.attempts[instance.key] = attempt
        run_dir = (
            self.options.out / "runs" / f"{instance.prediction.instance_id}-{instance.key[:12]}"
        )
        # An interrupted grade's leftovers (it left no result): removed, a link as a link (never
        # followed: the grade would write wherever it points), then made afresh.
        stderr = run_dir.with_name(run_dir.name + ".stderr.log")
        for path in (run_dir, stderr):
            _remove(path)
        private_dir(run_dir, exist_ok=False)
        run_id = grade_run_id(self.evaluation_id, instance.key, attempt)
        job = GradeJob(
            target=instance.task.bundle,
            patch=instance.prediction.patch,
            run_dir=run_dir,
            run_id=run_id,
            stderr=stderr,
            options=self.options.grade_options,
            env=engine.env,
        )
        child = self.launcher.start(job)
        engine.running += 1
        engine.ran += 1
        self.progress.started(instance, engine.spec.name)
        return _Running(
            instance=instance,
            engine=engine,
            child=child,
            run_dir=run_dir,
            started=time.monotonic(),
            attempt=attempt,
            run_id=run_id,
        )

    def _reap(self, plan: _Plan, total: int) -> int:
        """Each grade that ended: its result written, or it is tried again. How many ended."""
        ended = 0
        for entry in list(plan.running):
            code = entry.child.poll()
            if code is None:
                continue
            ended += 1
            plan.running.remove(entry)
            entry.engine.running -= 1
            instance = entry.instance
            plan.built.add((instance.task.task_id, entry.engine.spec.name))
            report = grade_report(entry.run_dir)
            if report is None or report.verdict == "infrastructure_failed":
                why = report.detail if report else _no_report(entry, code)
                lost = ping(entry.engine)
                if lost is not None:
                    self.pool.lose(entry.engine, lost, stranded=entry.run_id)
                if lost is not None or entry.attempt <= self.options.retries:
                    self.progress.note(f"{instance.prediction.instance_id}: {why[:200]}; again")
                    plan.pending.insert(0, instance)
                    continue
            relative = str(entry.run_dir.relative_to(self.options.out))
            # The grade's own copy of the bundle: the same sealed files as <out>/bundles/<task>,
            # whose digest the result names (kept, N predictions would keep N copies).
            shutil.rmtree(entry.run_dir / "bundle", ignore_errors=True)
            if report is None:
                result = result_of(
                    instance, status="error", detail=_no_report(entry, code), run_dir=relative
                )
            else:
                result = graded_result(instance, report, relative, grade_files(entry.run_dir))
            result.seconds = round(time.monotonic() - entry.started, 3)
            write_result(self.options.out / "results", result)
            self.results.append(result)
            plan.done += 1
            self.progress.finished(result, plan.done, total)
        return ended

    def _stop(self, plan: _Plan) -> None:
        """What still runs is stopped (each grade removes its own containers): no result."""
        for entry in plan.running:
            entry.child.send_signal(signal.SIGTERM)
        for entry in plan.running:
            if entry.child.wait(60) is None:
                entry.child.send_signal(signal.SIGKILL)
                entry.child.wait(10)


def _remove(path: Path) -> None:
    """Whatever is at `path`: a directory's tree, or the file or link itself."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _no_report(entry: _Running, code: int) -> str:
    tail = ""
    with contextlib.suppress(OSError):
        lines = entry.run_dir.with_name(entry.run_dir.name + ".stderr.log").read_text(
            errors="replace"
        )
        tail = (lines.strip().splitlines() or [""])[-1][:300]
    return f"grade exited {code} without a result" + (f": {tail}" if tail else "")
