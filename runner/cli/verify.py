"""`verify` and `grade`: one task through the gates, one patch through a fresh verifier."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from runner import __version__
from runner.base.errors import (
    ExitCode,
    RunnerError,
)
from runner.base.safeio import check_writable_file
from runner.cli.common import (
    PROG,
    RUN_ID,
    _build_environment,
    _check_text_option,
    _stderr_logging,
    cli,
    interrupts,
    local_run,
    settings_of,
)
from runner.cli.options import (
    BASE_IMAGE,
    BUILD_NETWORK,
    EVIDENCE_CHECKS,
    EXTRA_CA,
    MAX_LOG_SIZE,
    PIDS_LIMIT,
    REPO,
    STORAGE_LIMIT,
    TOOLCHAIN_MIRROR,
    TOOLCHAIN_SOURCE,
    logs_root_option,
    verify_options,
    with_options,
)
from runner.cli.output import Output
from runner.cli.startup import startup_finished
from runner.model.report import Report, Verdict, write_report
from runner.model.settings import (
    ENV_LOGS_ROOT,
    EvidenceChecks,
    HackGate,
    SharedSettings,
    StorageLimit,
    VerifySettings,
)


@cli.command("verify")
@click.argument("target", type=click.Path(path_type=Path))
@REPO
@verify_options(repeat=1, from_json=True)
@logs_root_option(
    f"Root of run directories: each run writes <root>/<taskId>/<runId>/ (env {ENV_LOGS_ROOT})."
)
@with_options(
    click.option(
        "--run-dir",
        type=click.Path(path_type=Path),
        help="An exact run directory instead (must be new or empty).",
    ),
    click.option(
        "--report",
        "report_path",
        type=click.Path(path_type=Path),
        help="Also write the report here (atomically).",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout."),
    click.option(
        "--plan",
        "plan_only",
        is_flag=True,
        help="Print the verify plan as JSON; run no Docker, keep no run directory (but --run-dir).",
    ),
    click.option("--keep", is_flag=True, help="Keep containers and print how to enter them."),
    click.option(
        "--rm-images",
        is_flag=True,
        help="Remove this task's agent and verifier images afterwards (default: kept as the "
        "build cache; shared base and toolchain layers stay).",
    ),
    click.option(
        "--events",
        "events_path",
        type=click.Path(path_type=Path),
        help="Append one JSON line per stage start and end to this file (for a supervisor).",
    ),
    click.option(
        "--run-id",
        help="Name the run (directory, container labels) instead of a new id; must be unique.",
    ),
    click.option("-v", "--verbose", is_flag=True, help="Stream build output."),
    click.option("-q", "--quiet", is_flag=True, help="No progress lines."),
)
def verify_command(
    target: Path,
    repo: str | None,
    child: SharedSettings,
    logs_root: Path,
    run_dir: Path | None,
    report_path: Path | None,
    as_json: bool,
    plan_only: bool,
    keep: bool,
    rm_images: bool,
    events_path: Path | None,
    run_id: str | None,
    verbose: bool,
    quiet: bool,
) -> int:
    """Compile (when TARGET is an authored task), audit, build, and run the smoke, nop, oracle,
    determinism and hack gates. TARGET is an authored task directory or a compiled bundle.

    \b
    Examples:
      selfbench-runner verify examples/bash-calc
      selfbench-runner verify tasks/my-task --repo ~/src/project --keep-going --json
      selfbench-runner verify tasks/my-task --plan          # every build and container, no Docker
    """
    from runner.run.events import EventLog
    from runner.run.pipeline import verify
    from runner.run.state import PROGRESS, StageEvent

    if not plan_only:
        import runner.engine.docker  # noqa: F401  (docker-py: imported before the collector resumes)
    startup_finished()
    _stderr_logging(verbose)
    # -v's log lines go to the terminal as they come: no board redrawn over them.
    output = Output(quiet=quiet, live=not verbose)
    try:
        if report_path is not None:
            check_writable_file(report_path, option="--report")
        if events_path is not None:
            check_writable_file(events_path, option="--events")
        _check_text_option(run_id, "--run-id", RUN_ID, "a run id ([A-Za-z0-9._-], at most 64)")
        settings = settings_of(
            child,
            repo=repo,
            logs_root=logs_root,
            run_dir=run_dir,
            keep=keep,
            remove_images=rm_images,
        )
        with interrupts(), EventLog.open(events_path) as events:

            def on_stage(event: StageEvent) -> None:
                output.stage_event(event.stage, event.status, event.detail)
                if events is not None:
                    events.write(event)

            def progress(stage: str, message: str) -> None:
                # The supervisor (the sidecar, the worker) shows what each stage does too.
                output.progress(stage, message)
                if events is not None:
                    events.write(StageEvent(stage=stage, status=PROGRESS, detail=message))

            outcome = verify(
                target,
                settings,
                progress=progress,
                plan_only=plan_only,
                on_stage=on_stage,
                run_id=run_id,
            )
    except RunnerError as exc:
        if as_json:
            click.echo(_usage_report(exc).to_json(), nl=False)
        raise
    finally:
        output.close()
    if plan_only and outcome.plan is not None:
        click.echo(outcome.plan.to_json(), nl=False)
        return 0
    return _print_report(outcome.report, output, report_path, as_json=as_json, quiet=quiet)


def _print_report(
    report: Report, output: Output, report_path: Path | None, *, as_json: bool, quiet: bool
) -> int:
    if report_path is not None:
        write_report(report_path, report)
    if as_json:
        click.echo(report.to_json(), nl=False)
    if not quiet or not as_json:
        # The summary is the answer on stdout, but for input that is not valid: its problems
        # are errors, on stderr with every other error line (exit 2).
        output.summary(report, result=not as_json and report.verdict is not Verdict.INVALID)
    for kept in report.kept:
        click.echo(f"kept {kept.label} ({kept.name}): {kept.enter}", err=True)
    if report.kept:
        click.echo(f"remove them with: {PROG} clean", err=True)
    if report.interrupted:
        click.echo(f"{PROG}: interrupted; removed this run's containers", err=True)
    return int(report.exit_code)


def _usage_report(error: RunnerError) -> Any:
    """The report a program gets for a run refused before it started (bad options)."""
    from runner.model.report import InputProblem
    from runner.run.pipeline import new_run_id

    return Report(
        task_id=None,
        verdict=Verdict.INVALID
        if error.exit_code is ExitCode.INVALID
        else Verdict.INFRASTRUCTURE_FAILED,
        reason=error.one_line(),
        errors=[InputProblem.of(p) for p in error.problems],
        runner_version=__version__,
        run_id=new_run_id(),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )


@cli.command("grade")
@click.argument("target_arg", metavar="TARGET")
@click.option(
    "--patch",
    "patch_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The agent's patch (a git diff of /app, as Harbor collects it; empty: nothing done).",
)
@BASE_IMAGE
@EXTRA_CA
@TOOLCHAIN_SOURCE
@TOOLCHAIN_MIRROR
@BUILD_NETWORK
@logs_root_option(
    f"Root of run directories: a grade writes <root>/<taskId>/grade-<id>/ (env {ENV_LOGS_ROOT})."
)
@click.option("--run-dir", type=click.Path(path_type=Path), help="An exact run directory instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--keep", is_flag=True, help="Keep the verifier container.")
@PIDS_LIMIT
@MAX_LOG_SIZE
@STORAGE_LIMIT
@click.option(
    "--unsealed",
    is_flag=True,
    help="Grade a bundle whose files do not match its seal (or that has none); the result is "
    "then only as good as those files.",
)
@EVIDENCE_CHECKS
@click.option(
    "--reward-only",
    is_flag=True,
    help="The reward alone, sooner: a test run stops at its first failed test and pass-to-pass "
    "runs only once fail-to-pass passed (the evidence then covers what ran).",
)
@click.option(
    "--run-id",
    help="Name the grade (its containers' labels) instead of a new id; must be unique.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def grade_command(
    target_arg: str,
    patch_path: Path,
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    build_network: str | None,
    logs_root: Path,
    run_dir: Path | None,
    as_json: bool,
    keep: bool,
    pids_limit: int,
    max_log_size: int,
    storage_limit: str,
    unsealed: bool,
    evidence_checks: str,
    reward_only: bool,
    run_id: str | None,
    quiet: bool,
) -> int:
    """Grade an agent's patch against a sealed bundle (or a run directory's): the reward, what the
    patch policy undid and the per-test evidence, through a fresh verifier exactly as the gates
    run it. Exit 0 when the patch earns reward 1, 1 when it does not.

    \b
    TARGET is a bundle, a run directory or a run in a fleet's store (`<store>/runs/<key>`).

    \b
    Examples:
      selfbench-runner grade runs/my-task/20261203T010203Z-1a2b3c --patch agent.patch --json
      selfbench-runner grade file:///srv/selfbench-store/runs/pool-1-0007 --patch agent.patch
    """
    from runner.run.grading import grade

    target = local_run(target_arg, field="TARGET")
    _check_text_option(run_id, "--run-id", RUN_ID, "a run id ([A-Za-z0-9._-], at most 64)")

    output = Output(quiet=quiet)
    settings = VerifySettings(
        build=_build_environment(base_image, extra_ca_certs, sources, mirrors, build_network),
        logs_root=logs_root,
        run_dir=run_dir,
        keep=keep,
        pids_limit=pids_limit,
        max_log_bytes=max_log_size,
        storage_limit=StorageLimit(storage_limit),
        hack_gate=HackGate.OFF,
        repeat=0,
        evidence_checks=EvidenceChecks(evidence_checks),
        reward_only=reward_only,
    )
    with interrupts():
        report = grade(
            target,
            patch_path,
            settings,
            progress=output.progress,
            unsealed=unsealed,
            run_id=run_id,
        )
    if as_json:
        click.echo(report.to_json(), nl=False)
    if not quiet or not as_json:
        output.grade_summary(report, result=not as_json)
    return int(report.exit_code)
