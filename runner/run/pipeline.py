"""The main job, end to end: load the target, compile, audit, plan, execute, and build the report
once from the stages' results.

Every outcome (accepted, rejected, invalid input, infrastructure failure, an unexpected crash,
an interrupt) ends in a report written to the run directory. The run directory is
`<logs root>/<taskId>/<runId>/` (or an exact `--run-dir`), never inside the task directory, so
nothing left by another run can change a verdict.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import secrets
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner import __version__
from runner.base.errors import Interrupted, InvalidTaskError, RunnerError, UsageError
from runner.base.safeio import require_directory, write_atomic
from runner.compile.audit import AuditResult, audit
from runner.compile.bundle import is_bundle, load_bundle
from runner.compile.compiler import compile_task
from runner.compile.seal import seal
from runner.compile.taskdir import AuthoredTask, load_authored_task, write_authored
from runner.model.layout import RunLayout
from runner.model.predictions import PatchPredictions
from runner.model.report import (
    AuditData,
    AuditMetrics,
    CompileData,
    InputProblem,
    Report,
    Status,
    write_report,
)
from runner.model.settings import VerifySettings, cache_root
from runner.model.stages import Skip, Stage
from runner.model.task import Toolchain
from runner.model.toolchains import Arch, load_catalog
from runner.plan.runtime import Engine
from runner.plan.types import EngineFacts, RunIdentity, VerifyPlan
from runner.plan.verify import plan_verify
from runner.run.artifacts import fetch_registry_artifact
from runner.run.context import ExecutionEnv
from runner.run.executor import Executor
from runner.run.remembered import Remembered
from runner.run.reporting import Progress, RunRecord, build_report
from runner.run.rundir import RUN_LOG, check_run_location, make_run_dir, run_log
from runner.run.state import Execution, StageEvent, StageListener, StageResult

log = logging.getLogger(__name__)

EngineFactory = Callable[[], Engine]


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def host_facts() -> EngineFacts:
    """Engine facts assumed from this host, for a plan made without an engine."""
    import platform

    arch: Arch = "arm64" if platform.machine() in ("aarch64", "arm64") else "amd64"
    return EngineFacts(ncpu=os.cpu_count() or 1, arch=arch, storage_quota=None, source="host")


def default_env(settings: VerifySettings) -> ExecutionEnv:
    def fetch(name: str, arch: Arch) -> Path:
        return fetch_registry_artifact(load_catalog().toolchains[Toolchain(name)], arch)

    return ExecutionEnv(
        proxies=dict(settings.build.proxies),
        extra_ca_pem=settings.build.extra_ca_pem,
        fetch_artifact=fetch,
        predictions=PatchPredictions(cache_root()),
        remembered=Remembered(cache_root()) if settings.hack_memory else None,
    )


@dataclass(kw_only=True)
class VerifyOutcome:
    report: Report
    plan: VerifyPlan | None = None
    run_dir: Path | None = None


# ---- stages before Docker ------------------------------------------------------------------


def _timed(stage: StageResult, started: float) -> None:
    stage.seconds = round(time.monotonic() - started, 3)


def _event(run: RunRecord, name: Stage, stage: StageResult | None = None) -> None:
    if run.on_stage is None:
        return
    if stage is None:
        run.on_stage(StageEvent(stage=name, status="running"))
    else:
        run.on_stage(
            StageEvent(
                stage=name, status=stage.status.value, detail=stage.detail, seconds=stage.seconds
            )
        )


def _load(run: RunRecord) -> AuthoredTask | None:
    """Read the target without writing anything: an authored task or a compiled bundle."""
    started = time.monotonic()
    try:
        if is_bundle(run.target):
            run.bundle = load_bundle(run.target)
            run.task_id = run.bundle.task_id
            return None
        require_directory(run.target)
        task = load_authored_task(run.target)
        run.task_id = task.definition.task_id
        return task
    finally:
        _timed(run.compile, started)


def _compile_and_audit(run: RunRecord, task: AuthoredTask | None) -> None:
    assert run.run_dir is not None
    started = time.monotonic()
    if task is None:
        assert run.bundle is not None
        run.compile.set(Status.PASSED, "compiled bundle given; verified as it is")
        run.compile.data = CompileData(bundle=str(run.target))
        run.audit.skipped(Skip.BUNDLE)
        _event(run, Stage.COMPILE, run.compile)
        return
    out = RunLayout(run.run_dir).bundle
    result = compile_task(
        task, repo=run.settings.repo, out=out, options=run.settings.compile_options
    )
    run.bundle = load_bundle(out)
    # The task as verified, beside its bundle: what a verification round starts from.
    write_authored(task, RunLayout(run.run_dir).authored)
    run.compile.set(Status.PASSED, f"compiled to {out}")
    run.compile.data = CompileData(bundle=str(out))
    _timed(run.compile, started)
    run.progress(Stage.COMPILE, f"passed: {run.compile.detail}")
    _event(run, Stage.COMPILE, run.compile)
    _event(run, Stage.AUDIT)
    started = time.monotonic()
    result_audit: AuditResult = audit(
        task.definition,
        gold=task.gold,
        tests=task.tests,
        repository=result.repository.problems,
        instruction=task.instruction,
        present_at_base=result.repository.present_at_base,
    )
    metrics = result_audit.metrics
    run.audit.data = AuditData(
        blockers=result_audit.blockers,
        metrics=AuditMetrics(
            implementation_files=metrics.implementation_files,
            implementation_changed_lines=metrics.implementation_changed_lines,
            test_files=metrics.test_files,
        ),
        repository_checked=result_audit.repository_checked,
        coupling=result_audit.coupling,
        hints=result_audit.hints,
    )
    if result_audit.accepted:
        run.audit.set(
            Status.PASSED,
            f"{metrics.implementation_files} implementation file(s), "
            f"{metrics.implementation_changed_lines} changed line(s), "
            f"{metrics.test_files} test file(s)",
        )
    else:
        run.audit.set(Status.FAILED, result_audit.reason())
    _timed(run.audit, started)
    run.progress(Stage.AUDIT, f"{run.audit.status.value}: {run.audit.detail}")
    _event(run, Stage.AUDIT, run.audit)


# ---- the job ---------------------------------------------------------------------------------


def verify(
    target: Path,
    settings: VerifySettings,
    *,
    progress: Progress,
    engine_factory: EngineFactory | None = None,
    plan_only: bool = False,
    env: ExecutionEnv | None = None,
    on_stage: StageListener | None = None,
    run_id: str | None = None,
) -> VerifyOutcome:
    """Verify one task. Raises only UsageError (before any work); every other outcome is a
    report. `on_stage` hears each stage start and end; `run_id` names the run (labels, run
    directory) instead of a new one."""
    check_run_location(target, settings)
    run = RunRecord(
        run_id=run_id or new_run_id(),
        started=time.monotonic(),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        target=target,
        settings=settings,
        progress=progress,
        on_stage=on_stage,
    )
    plan: VerifyPlan | None = None
    task: AuthoredTask | None = None
    try:
        _event(run, Stage.COMPILE)
        try:
            task = _load(run)
        except InvalidTaskError as exc:
            _invalid(run, exc)
            _event(run, Stage.COMPILE, run.compile)
        run.run_dir = make_run_dir(
            settings, run.task_id or target.resolve().name, run.run_id, target
        )
        with run_log(run.run_dir, limit=settings.max_log_bytes):
            log.info("selfbench-runner %s verify %s (run %s)", __version__, target, run.run_id)
            if not run.invalid:
                plan = _run_stages(run, task, engine_factory, plan_only, env)
            if run.errors:
                for problem in run.errors:
                    log.info("invalid input: %s", problem.one_line())
    except (KeyboardInterrupt, Interrupted) as exc:
        run.interrupted = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
    except UsageError:
        raise
    except Exception as exc:
        run.internal = f"internal error: {type(exc).__name__}: {exc}"
        _record_traceback(run)
    report = build_report(run)
    if run.run_dir is not None and not plan_only:
        write_report(RunLayout(run.run_dir).report, report)
        _write_html(run.run_dir, report)
    if plan_only and plan is not None and settings.run_dir is None and run.run_dir is not None:
        # A plan is printed, not kept (as `terraform plan` without -out): the bundle it was made
        # from goes with its scratch run directory. --run-dir keeps it; a plan that could not be
        # made keeps its runner.log.
        _remove_run_dir(run.run_dir)
        return VerifyOutcome(report=report, plan=plan, run_dir=None)
    return VerifyOutcome(report=report, plan=plan, run_dir=run.run_dir)


def _remove_run_dir(run_dir: Path) -> None:
    """A run directory the runner made, and its task's directory when that is left empty."""
    shutil.rmtree(run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        run_dir.parent.rmdir()


def _write_html(run_dir: Path, report: Report) -> None:
    """report.html beside report.json; a page that cannot be made never changes the run."""
    try:
        from runner.present.html import render_html
        from runner.present.runlogs import report_view

        write_atomic(RunLayout(run_dir).report_html, render_html(report_view(report)))
    except Exception:
        log.exception("report.html could not be written")


def _invalid(run: RunRecord, exc: InvalidTaskError) -> None:
    run.invalid = True
    run.errors = list(exc.problems)
    run.compile.set(Status.FAILED, exc.one_line())
    run.compile.data = CompileData(errors=[InputProblem.of(p) for p in exc.problems])


def _record_traceback(run: RunRecord) -> None:
    text = traceback.format_exc()
    if run.run_dir is not None:
        with contextlib.suppress(OSError), (run.run_dir / RUN_LOG).open("a") as handle:
            handle.write(text)
        run.compile.data = run.compile.data or CompileData()
        if isinstance(run.compile.data, CompileData):
            run.compile.data.traceback_log = str(run.run_dir / RUN_LOG)


def _run_stages(
    run: RunRecord,
    task: AuthoredTask | None,
    engine_factory: EngineFactory | None,
    plan_only: bool,
    env: ExecutionEnv | None,
) -> VerifyPlan | None:
    try:
        _compile_and_audit(run, task)
    except InvalidTaskError as exc:
        _invalid(run, exc)
        _event(run, Stage.COMPILE, run.compile)
        return None
    except RunnerError as exc:
        run.compile.set(Status.ERROR, exc.one_line())
        _event(run, Stage.COMPILE, run.compile)
        return None
    if run.audit.status is Status.FAILED or run.bundle is None:
        return None
    assert run.run_dir is not None
    identity = RunIdentity(run_id=run.run_id, owner=_owner())
    if plan_only:
        plan = plan_verify(run.bundle, run.settings, host_facts(), identity)
        RunLayout(run.run_dir).plan.write_text(plan.to_json())
        return plan
    engine: Engine | None = None
    try:
        factory = engine_factory or _docker_engine
        engine = factory()
        facts = engine.facts()
    except RunnerError as exc:
        build = StageResult()
        build.set(Status.ERROR, exc.one_line())
        run.execution = Execution(stages={Stage.BUILD: build})
        if engine is not None:
            engine.close()
        return None
    try:
        plan = plan_verify(run.bundle, run.settings, facts, identity)
    except InvalidTaskError as exc:
        # A limit the engine cannot give (more memory than it has): the task's error.
        engine.close()
        _invalid(run, exc)
        _event(run, Stage.COMPILE, run.compile)
        return None
    try:
        RunLayout(run.run_dir).plan.write_text(plan.to_json())
        _used(plan, hold=run.run_id)  # from the first build on, no cache budget removes them
        executor = Executor(
            plan,
            engine,
            run_dir=run.run_dir,
            env=env or default_env(run.settings),
            progress=run.progress,
            on_stage=run.on_stage,
        )
        run.execution = executor.run()
        run.interrupted = run.execution.interrupted
        _seal(run)
        _used(plan)  # the cache budget's "last used"
    finally:
        _released(run.run_id)
        engine.close()
    return plan


def _used(plan: VerifyPlan, *, hold: str | None = None) -> None:
    from runner.engine.cachebudget import record_use

    with contextlib.suppress(OSError):
        record_use((b.tag for b in plan.builds), hold=hold)


def _released(hold: str) -> None:
    from runner.engine.cachebudget import release

    with contextlib.suppress(OSError):
        release(hold)


def _seal(run: RunRecord) -> None:
    """The census the run's nop and oracle made, sealed into its bundle (a compiled bundle given
    as the target is copied into the run directory first: the input is never changed)."""
    execution = run.execution
    if execution is None or execution.census is None or run.bundle is None:
        return
    assert run.run_dir is not None
    try:
        run.sealed = seal(run.bundle.root, execution.census, RunLayout(run.run_dir).bundle)
    except OSError as exc:
        log.warning("the census could not be sealed into the bundle: %s", exc)


def _docker_engine() -> Engine:
    from runner.engine.docker import connect

    engine = connect()
    try:
        if removed := engine.reap_stale():
            log.info("removed %d container(s) of runner processes that no longer exist", removed)
    except RunnerError as exc:
        log.warning("could not look for stale containers: %s", exc)
    return engine


def _owner() -> str:
    from runner.engine.owners import owner_id

    return owner_id()
