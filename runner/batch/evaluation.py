"""`evaluate`: an agent's predictions graded against sealed bundles, each by the path `grade`
takes (a `grade` child per prediction: a fresh verifier, the sealed census, per-test evidence,
the patch policy, the canaries), with bounded concurrency over one or more engines.

- A task's images are built once per engine: its first prediction there runs alone (it builds
  them, or finds them in the engine's cache); the rest then run side by side. Each task keeps to
  one engine, and the heaviest tasks start first.
- Each result is <out>/results/<key>.json, its key the content of the bundle and the patch
  (runner.model.evaluation.result_key): a run started again grades only what has no result, and
  a changed prediction (or bundle) is graded again. A result is written only once its grade has
  ended; an interrupted grade removes its containers and leaves no result.
- An empty patch is not run: nop already proved the tests fail on the base.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from runner.base.errors import Problem
from runner.base.safeio import write_atomic
from runner.batch.evalsources import EvalTask
from runner.batch.model import EngineSpec
from runner.batch.run import Engine as EngineSlot
from runner.batch.run import endpoint_of, ping
from runner.compile import signing
from runner.model.evaluation import InstanceResult, Prediction, result_key
from runner.model.layout import RunLayout
from runner.model.settings import child_environment
from runner.model.stages import Gate
from runner.run.grading import GRADE_FILE, GradeReport
from runner.supervise.job import GradeJob
from runner.supervise.launcher import Child, Launcher

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2
MAX_RESULT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Instance:
    prediction: Prediction
    task: EvalTask
    key: str


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


@dataclass(kw_only=True)
class _Plan:
    pending: list[Instance]
    running: list[_Running] = field(default_factory=list)
    built: set[tuple[str, str]] = field(default_factory=set)  # (task id, engine name)
    home: dict[str, EngineSlot] = field(default_factory=dict)  # task id -> its engine
    attempts: dict[str, int] = field(default_factory=dict)  # key -> grades started
    done: int = 0


def instances(
    predictions: list[Prediction], tasks: dict[str, EvalTask], problems: list[Problem]
) -> list[Instance]:
    """Each prediction with its task and result key; one that names no task is a problem."""
    found = []
    for prediction in predictions:
        task = tasks.get(prediction.instance_id)
        if task is None:
            problems.append(
                Problem(
                    file=prediction.where,
                    field="instance_id",
                    message=f"{prediction.instance_id} is no task of the source that can be "
                    "graded (none by that id, or its bundle was refused: see above)",
                )
            )
            continue
        found.append(
            Instance(prediction=prediction, task=task, key=result_key(task.digest, prediction))
        )
    return found


def stored_result(results: Path, instance: Instance) -> InstanceResult | None:
    """The result an earlier run left for this instance's key, if it is whole, its own, signed
    by a key this host trusts (a result planted in the directory is graded again), and not an
    error (a grade that could not run, the network down say, is tried again)."""
    path = results / f"{instance.key}.json"
    with contextlib.suppress(OSError, ValueError, ValidationError, RecursionError):
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_RESULT_BYTES:
            document = json.loads(path.read_bytes())
            if not isinstance(document, dict):
                return None
            if signing.document_problem(document, signing.trusted_keys()) is not None:
                return None
            result = InstanceResult.model_validate(document)
            own = result.key == instance.key
            if own and (result.instance_id, result.model) == instance.prediction.name:
                return None if result.status == "error" else result
    return None


def write_result(results: Path, result: InstanceResult) -> None:
    """results/<key>.json, signed with the runner's key."""
    document = json.loads(result.model_dump_json(exclude={"signature"}))
    signing.sign_document(document)
    write_atomic(results / f"{result.key}.json", json.dumps(document, indent=2) + "\n")


def empty_result(instance: Instance) -> InstanceResult:
    return _result(
        instance,
        status="empty-patch",
        reward=0,
        detail="the patch is empty: nothing to grade (nop proved the tests fail on the base)",
    )


def _result(instance: Instance, **values: object) -> InstanceResult:
    prediction, task = instance.prediction, instance.task
    return InstanceResult.model_validate(
        {
            "instance_id": prediction.instance_id,
            "task_id": task.task_id,
            "model": prediction.model,
            "key": instance.key,
            "bundle_digest": task.digest,
            "patch_sha256": prediction.patch_sha256,
            "patch_bytes": prediction.patch_bytes,
            "difficulty": task.difficulty,
            "repository": task.repository,
            **values,
        }
    )


def graded_result(
    instance: Instance, report: GradeReport, run_dir: str, evidence_files: list[str]
) -> InstanceResult:
    """The instance's result from its grade's report (`evidence_files`: what the verifier
    wrote beside its reward, the per-test evidence and the policy's record among them)."""
    reward = report.reward
    if report.verdict == "rewarded":
        status = "resolved"
    elif report.verdict == "not-rewarded":
        status = "not-applied" if reward is not None and reward.patch_applied != 1 else "unresolved"
    else:
        status = "error"
    tampering = []
    if report.discarded:
        shown = ", ".join(report.discarded[:5]) + (" ..." if len(report.discarded) > 5 else "")
        tampering.append(f"the patch policy undid {len(report.discarded)} change(s): {shown}")
    for run in report.evidence.runs if report.evidence else []:
        if run.canaries is not None and run.canaries.passed:
            tampering.append(f"{run.canaries.passed} canary test(s) passed in {run.name}")
    return _result(
        instance,
        status=status,
        reward=None if reward is None else reward.reward,
        fail_to_pass=None if reward is None else reward.fail_to_pass == 1,
        pass_to_pass=None if reward is None else reward.pass_to_pass == 1,
        detail=report.detail,
        tampering=tampering,
        undone=report.undone,
        discarded=report.discarded,
        evidence=report.evidence,
        run_dir=run_dir,
        logs=list(dict.fromkeys(_relative(p, run_dir) for p in [*evidence_files, *report.logs])),
        seconds=report.seconds,
    )


def _relative(path: str, run_dir: str) -> str:
    """A log's path as the page links it: below the evaluation's directory when it is."""
    marker = f"/{run_dir}/"
    return run_dir + "/" + path.split(marker, 1)[1] if marker in path else path


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


class Evaluation:
    """Grades the instances that have no result; `run` returns the results it wrote."""

    def __init__(self, options: EvaluateOptions, progress: EvaluateProgress) -> None:
        self.options = options
        self.progress = progress
        base = child_environment()
        self.engines = [
            EngineSlot(spec=s, env=endpoint_of(s, base).environment(base) | options.env)
            for s in options.engines
        ]
        self.evaluation_id = uuid.uuid4().hex[:10]
        self.launcher = Launcher(python=options.python, fork=options.fork)
        self.results: list[InstanceResult] = []

    def run(self, todo: list[Instance]) -> list[InstanceResult]:
        # Heaviest task first; a task's predictions together (its first one builds).
        order = sorted(
            todo, key=lambda i: (-i.task.weight, i.task.task_id, i.prediction.instance_id)
        )
        plan = _Plan(pending=order)
        if not order:
            return self.results
        for engine in self.engines:
            reason = ping(engine)
            if reason is not None:
                engine.alive, engine.lost_reason = False, reason
                self.progress.note(f"engine {engine.spec.name} does not answer: {reason}")
        total = len(order)
        try:
            while plan.pending or plan.running:
                if not any(e.alive for e in self.engines):
                    self.progress.note("no engine answers: the rest is not graded")
                    break
                self._start_what_fits(plan)
                self._reap(plan, total)
                time.sleep(POLL_SECONDS)
        finally:
            self._stop(plan)
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
            if pair not in plan.built and pair in building:
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
        shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted grade's: it left no result
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        job = GradeJob(
            target=instance.task.bundle,
            patch=instance.prediction.patch,
            run_dir=run_dir,
            run_id=f"eval-{self.evaluation_id}-{instance.key[:10]}-{attempt}",
            stderr=run_dir.with_name(run_dir.name + ".stderr.log"),
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
        )

    def _reap(self, plan: _Plan, total: int) -> None:
        for entry in list(plan.running):
            code = entry.child.poll()
            if code is None:
                continue
            plan.running.remove(entry)
            entry.engine.running -= 1
            instance = entry.instance
            plan.built.add((instance.task.task_id, entry.engine.spec.name))
            report = _grade_report(entry.run_dir)
            if report is None or report.verdict == "infrastructure_failed":
                why = report.detail if report else _no_report(entry, code)
                lost = ping(entry.engine)
                if lost is not None:
                    entry.engine.alive, entry.engine.lost_reason = False, lost
                    self.progress.note(f"engine {entry.engine.spec.name} left: {lost}")
                if lost is not None or entry.attempt <= self.options.retries:
                    self.progress.note(f"{instance.prediction.instance_id}: {why[:200]}; again")
                    plan.pending.insert(0, instance)
                    continue
            relative = str(entry.run_dir.relative_to(self.options.out))
            # The grade's own copy of the bundle: the same sealed files as <out>/bundles/<task>,
            # whose digest the result names (kept, N predictions would keep N copies).
            shutil.rmtree(entry.run_dir / "bundle", ignore_errors=True)
            if report is None:
                result = _result(
                    instance, status="error", detail=_no_report(entry, code), run_dir=relative
                )
            else:
                result = graded_result(instance, report, relative, _files(entry.run_dir))
            result.seconds = round(time.monotonic() - entry.started, 3)
            write_result(self.options.out / "results", result)
            self.results.append(result)
            plan.done += 1
            self.progress.finished(result, plan.done, total)

    def _stop(self, plan: _Plan) -> None:
        """What still runs is stopped (each grade removes its own containers): no result."""
        for entry in plan.running:
            entry.child.send_signal(signal.SIGTERM)
        for entry in plan.running:
            if entry.child.wait(60) is None:
                entry.child.send_signal(signal.SIGKILL)
                entry.child.wait(10)


def _files(run_dir: Path) -> list[str]:
    """What a grade's page links to: its report, its log, and what its verifier left (the
    reward, the per-test evidence, the policy's record)."""
    layout = RunLayout(run_dir)
    verifier = layout.verifier_logs(Gate.GRADE)
    found = [p for p in sorted(verifier.glob("*")) if p.is_file() and not p.is_symlink()]
    return [str(run_dir / GRADE_FILE), str(layout.runner_log), *map(str, found)]


def _grade_report(run_dir: Path) -> GradeReport | None:
    path = run_dir / GRADE_FILE
    with contextlib.suppress(OSError, ValueError, ValidationError):
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_RESULT_BYTES:
            return GradeReport.model_validate(json.loads(path.read_bytes()))
    return None


def _no_report(entry: _Running, code: int) -> str:
    tail = ""
    with contextlib.suppress(OSError):
        lines = entry.run_dir.with_name(entry.run_dir.name + ".stderr.log").read_text(
            errors="replace"
        )
        tail = (lines.strip().splitlines() or [""])[-1][:300]
    return f"grade exited {code} without a result" + (f": {tail}" if tail else "")
