"""What one run knew by its end (RunRecord), and the report made from it once: every stage's
result, the verdict and its reason, the settings it ran with."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner import __version__
from runner.base.errors import Problem
from runner.compile.bundle import Bundle
from runner.judge import StageView, judge_report
from runner.model.canaries import CanaryCensus, CanaryPlan
from runner.model.layout import BundleLayout
from runner.model.report import (
    InputProblem,
    Report,
    ReportCanaries,
    ReportCensus,
    ReportSettings,
    Stages,
    TruncatedLog,
)
from runner.model.settings import STORAGE_SAMPLE_SECONDS, VerifySettings
from runner.model.stages import STAGE_NAMES, Stage
from runner.run.rundir import RUN_LOG
from runner.run.state import Execution, StageListener, StageResult

Progress = Callable[[str, str], None]


@dataclass(kw_only=True)
class RunRecord:
    run_id: str
    started: float
    started_at: str
    target: Path
    settings: VerifySettings
    progress: Progress
    on_stage: StageListener | None = None
    run_dir: Path | None = None
    task_id: str | None = None
    bundle: Bundle | None = None
    compile: StageResult = field(default_factory=StageResult)
    audit: StageResult = field(default_factory=StageResult)
    errors: list[Problem] = field(default_factory=list)
    invalid: bool = False
    internal: str | None = None
    interrupted: str | None = None
    execution: Execution | None = None
    sealed: Path | None = None  # the bundle with the census sealed in


def _stage_model(stages: Stages, name: str, result: StageResult) -> None:
    stage = stages.get(name)
    stage.status = result.status
    stage.detail = result.detail
    stage.seconds = result.seconds
    stage.logs = list(dict.fromkeys(result.logs))
    stage.truncated_logs = [
        TruncatedLog(path=t.path, original_bytes=t.original_bytes, kept_bytes=t.kept_bytes)
        for t in result.truncated
    ]
    if result.data is not None:
        stage.data = result.data  # type: ignore[assignment]


def _census_info(run: RunRecord) -> ReportCensus | None:
    census = run.execution.census if run.execution else None
    if census is None or run.sealed is None:
        return None
    return ReportCensus(
        file=str(BundleLayout(run.sealed).census),
        fail_to_pass=census.fail_to_pass.mode,
        pass_to_pass=census.pass_to_pass.mode,
        fail_to_pass_tests=len(census.fail_to_pass.tests),
        pass_to_pass_tests=len(census.pass_to_pass.tests),
        canaries=report_canaries(
            run.execution.canaries if run.execution else CanaryPlan(), census.canaries
        ),
    )


def report_canaries(plan: CanaryPlan, kept: CanaryCensus) -> ReportCanaries:
    none = list(kept.none)
    if not kept.count and plan.count and kept.dropped:
        whys = sorted({d.why for d in kept.dropped})
        none.append(f"the oracle kept none of the {plan.count} made ({', '.join(whys)})")
    elif not plan.count and not none:
        none.append("none was made")
    return ReportCanaries(
        made=plan.count,
        kept=kept.count,
        exit_code=len(kept.exit_code),
        guess=round(kept.guess, 6),
        dropped=list(kept.dropped),
        none=none if not kept.count else list(kept.none),
    )


def _tests_network(run: RunRecord) -> str | None:
    if run.bundle is None:
        return None
    contract = run.bundle.contract
    return contract.tests_network if contract else "no-network"


def _storage_words(mechanism: str | None) -> str | None:
    return {
        "quota": "enforced by the engine's quota (--storage-opt size)",
        "watchdog": (
            "enforced by the runner's watchdog (each container's filesystem measured at start, "
            f"every {STORAGE_SAMPLE_SECONDS:g} s and after each command)"
        ),
        "off": "not enforced (--storage-limit off)",
    }.get(mechanism or "")


def _results(run: RunRecord) -> dict[str, StageResult]:
    """Every stage's result in the report's order, as the run left them (copies: the report's
    own amendments, an internal error or an interrupt, never change the run's)."""
    from dataclasses import replace

    executed = run.execution.stages if run.execution else {}
    found = {Stage.COMPILE: run.compile, Stage.AUDIT: run.audit, **executed}
    return {name: replace(found.get(name) or StageResult()) for name in STAGE_NAMES}


def build_report(run: RunRecord) -> Report:
    """The report: the stages as the run left them, amended by the judge's marks, and its
    verdict (runner.judge.judge_report decides; this copies)."""
    settings = run.settings
    execution = run.execution
    results = _results(run)
    judgement = judge_report(
        {name: StageView(r.status, r.detail, r.skip) for name, r in results.items()},
        invalid=run.invalid,
        interrupted=run.interrupted,
        internal=run.internal,
        log=str(run.run_dir / RUN_LOG) if run.run_dir else "this run's log",
    )
    for name, mark in judgement.marks.items():
        results[name].mark(mark)
    stages = Stages()
    for name, result in results.items():
        _stage_model(stages, name, result)
    build = settings.build
    return Report(
        task_id=run.task_id,
        verdict=judgement.verdict,
        reason=judgement.reason,
        interrupted=run.interrupted is not None,
        errors=[InputProblem.of(p) for p in run.errors],
        stages=stages,
        seconds=round(time.monotonic() - run.started, 3),
        runner_version=__version__,
        run_id=run.run_id,
        started_at=run.started_at,
        run_dir=str(run.run_dir) if run.run_dir else None,
        bundle=str(run.sealed or run.bundle.root) if run.bundle else None,
        census=_census_info(run),
        settings=ReportSettings(
            base_image=build.base_image,
            extra_ca_certs=str(build.extra_ca_certs) if build.extra_ca_certs else None,
            toolchain_sources={k.value: v.value for k, v in build.toolchains.sources.items()},
            toolchain_mirrors={k.value: v for k, v in build.toolchains.mirrors.items()},
            build_network=build.build_network,
            pids_limit=settings.pids_limit,
            max_log_bytes=settings.max_log_bytes,
            storage_limit=_storage_words(execution.storage_mechanism if execution else None),
            tests_network=_tests_network(run),
            keep=settings.keep,
            keep_going=settings.keep_going,
            hand_caches=settings.hand_caches,
        ),
        kept=execution.kept if execution else [],
    )
