"""The one-task commands: audit, compile, refresh, verify, grade, prepare, schema."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from pathlib import Path
from typing import Any

import click

from runner import __version__
from runner.base.errors import (
    ExitCode,
    InvalidTaskError,
    Problem,
    RunnerError,
    UsageError,
)
from runner.base.safeio import check_writable_file
from runner.cli.common import (
    AGENT_ALLOWED_HOST,
    BASE_IMAGE,
    BUILD_NETWORK,
    EXTRA_CA,
    HACK_GATE,
    MAX_LOG_SIZE,
    PIDS_LIMIT,
    PROG,
    REPO,
    RUN_ID,
    STORAGE_LIMIT,
    TASK_DIR,
    TOOLCHAIN_MIRROR,
    TOOLCHAIN_SOURCE,
    _build_environment,
    _check_text_option,
    _compile_options,
    _print_invalid,
    _stderr_logging,
    cli,
    interrupts,
    logs_root_option,
    repeat_option,
)
from runner.cli.output import Output
from runner.cli.startup import startup_finished
from runner.model.settings import (
    ENV_LOGS_ROOT,
    StorageLimit,
    VerifySettings,
)
from runner.model.task import Toolchain


@cli.command("audit")
@TASK_DIR
@REPO
@click.option("--json", "as_json", is_flag=True, help="Print the audit as one JSON document.")
def audit_command(task_dir: Path, repo: str | None, as_json: bool) -> int:
    """Static audit of an authored task: schema, patches, size, {tests} rules, and (when the
    repository is at hand) the workdir and `git apply --check` of both patches at baseCommit.

    Exit 0 when accepted, 1 with blockers, 2 when the task cannot be loaded.
    """
    from runner.base.errors import RepositoryError
    from runner.compile.audit import audit
    from runner.compile.compiler import evidence_paths
    from runner.compile.coupling import candidates
    from runner.compile.repository import check_repository, resolve_repository
    from runner.compile.taskdir import load_authored_task

    try:
        task = load_authored_task(task_dir)
    except InvalidTaskError as exc:
        if as_json:
            click.echo(json.dumps(_audit_json(None, None, exc.problems, None), indent=2))
        else:
            _print_invalid(exc)
        return int(ExitCode.INVALID)
    definition = task.definition
    note = None
    try:
        path = resolve_repository(
            repo, definition.repo, definition.base_commit, task_dir=task.directory
        )
        facts = check_repository(
            path,
            definition.base_commit,
            workdir=definition.workdir_path,
            test_patch=task.test_patch,
            gold_patch=task.gold_patch,
            evidence=evidence_paths(definition),
            coupling_needles=candidates(task.tests, task.gold, task.instruction),
        )
    except RepositoryError as exc:
        if repo is not None:
            raise
        note = f"repository not checked: {exc.one_line()}"
        facts = None
    result = audit(
        definition,
        gold=task.gold,
        tests=task.tests,
        repository=facts.problems if facts is not None else None,
        instruction=task.instruction,
        present_at_base=facts.present_at_base if facts is not None else None,
    )
    if as_json:
        click.echo(json.dumps(_audit_json(definition.task_id, result, (), note), indent=2))
    else:
        m = result.metrics
        click.echo(
            f"{definition.task_id}: {m.implementation_files} implementation file(s), "
            f"{m.implementation_changed_lines} changed line(s), {m.test_files} test file(s)"
        )
        if note:
            click.echo(note)
        if result.accepted:
            click.echo("audit: accepted")
        else:
            for blocker in result.blockers:
                click.echo(f"blocker: {blocker}")
            click.echo(f"audit: rejected: {result.reason()}")
    return int(ExitCode.ACCEPTED if result.accepted else ExitCode.REJECTED)


def _audit_json(
    task_id: str | None,
    result: Any,
    problems: tuple[Problem, ...],
    note: str | None,
) -> dict[str, Any]:
    if result is None:
        return {
            "schemaVersion": 2,
            "taskId": task_id,
            "verdict": "invalid",
            "accepted": False,
            "blockers": [],
            "reason": problems[0].one_line() if problems else "",
            "errors": [p.as_json() for p in problems],
            "metrics": None,
            "repositoryChecked": False,
            "repositoryNote": None,
            "coupling": [],
        }
    return {
        "schemaVersion": 2,
        "taskId": task_id,
        "verdict": "accepted" if result.accepted else "rejected",
        "accepted": result.accepted,
        "blockers": result.blockers,
        "reason": result.reason(),
        "errors": [],
        "metrics": {
            "implementationFiles": result.metrics.implementation_files,
            "implementationChangedLines": result.metrics.implementation_changed_lines,
            "testFiles": result.metrics.test_files,
        },
        "repositoryChecked": result.repository_checked,
        "repositoryNote": note,
        "coupling": [item.model_dump(mode="json") for item in result.coupling],
    }


@cli.command("compile")
@TASK_DIR
@REPO
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="Bundle directory to write (replaced atomically; never a directory holding anything "
    "but this task's bundle).",
)
@AGENT_ALLOWED_HOST
def compile_command(
    task_dir: Path, repo: str | None, out: Path, allowed_hosts: tuple[str, ...]
) -> int:
    """Compile an authored task into a native Harbor bundle."""
    from runner.base.safeio import is_within
    from runner.compile.compiler import compile_task
    from runner.compile.taskdir import load_authored_task

    options = _compile_options(allowed_hosts)
    if is_within(out, task_dir):
        raise UsageError("must not be inside the task directory", path=str(out), field="--out")
    task = load_authored_task(task_dir)
    result = compile_task(task, repo=repo, out=out, options=options)
    click.echo(str(result.bundle))
    for problem in result.repository.problems:
        click.echo(f"warning: {problem} (verify's audit will reject it)", err=True)
    return 0


@cli.command("refresh")
@TASK_DIR
@click.argument("bundle", type=click.Path(path_type=Path))
@AGENT_ALLOWED_HOST
def refresh_command(task_dir: Path, bundle: Path, allowed_hosts: tuple[str, ...]) -> int:
    """Rewrite a bundle's definition-derived files from a repaired definition."""
    from runner.compile.compiler import refresh_bundle
    from runner.compile.taskdir import load_authored_task

    options = _compile_options(allowed_hosts)
    task = load_authored_task(task_dir)
    changed = refresh_bundle(task, bundle, options)
    for name in changed:
        click.echo(f"updated {name}")
    if not changed:
        click.echo("bundle already up to date")
    return 0


@cli.command("verify")
@click.argument("target", type=click.Path(path_type=Path))
@REPO
@BASE_IMAGE
@EXTRA_CA
@TOOLCHAIN_SOURCE
@TOOLCHAIN_MIRROR
@AGENT_ALLOWED_HOST
@BUILD_NETWORK
@logs_root_option(
    f"Root of run directories: each run writes <root>/<taskId>/<runId>/ (env {ENV_LOGS_ROOT})."
)
@click.option(
    "--run-dir",
    type=click.Path(path_type=Path),
    help="An exact run directory instead (must be new or empty).",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path),
    help="Also write the report here (atomically).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option(
    "--plan", "plan_only", is_flag=True, help="Print the verify plan as JSON; run no Docker."
)
@click.option("--keep", is_flag=True, help="Keep containers and print how to enter them.")
@click.option(
    "--rm-images",
    is_flag=True,
    help="Remove this task's agent and verifier images afterwards (default: kept as the build "
    "cache; shared base and toolchain layers stay).",
)
@PIDS_LIMIT
@MAX_LOG_SIZE
@STORAGE_LIMIT
@HACK_GATE
@repeat_option(1)
@click.option(
    "--events",
    "events_path",
    type=click.Path(path_type=Path),
    help="Append one JSON line per stage start and end to this file (for a supervisor).",
)
@click.option(
    "--run-id",
    help="Name the run (directory, container labels) instead of a new id; must be unique.",
)
@click.option("-v", "--verbose", is_flag=True, help="Stream build output.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def verify_command(
    target: Path,
    repo: str | None,
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    build_network: str | None,
    logs_root: Path,
    run_dir: Path | None,
    report_path: Path | None,
    as_json: bool,
    plan_only: bool,
    keep: bool,
    rm_images: bool,
    pids_limit: int,
    max_log_size: int,
    storage_limit: str,
    hack_gate: bool,
    repeat: int,
    events_path: Path | None,
    run_id: str | None,
    verbose: bool,
    quiet: bool,
) -> int:
    """Compile (when TARGET is an authored task), audit, build, and run the smoke, nop, oracle
    and determinism gates. TARGET is an authored task directory or a compiled bundle."""
    from runner.run.events import EventLog
    from runner.run.pipeline import verify

    if not plan_only:
        import runner.engine.docker  # noqa: F401  (docker-py: imported before the collector resumes)
    startup_finished()
    _stderr_logging(verbose)
    output = Output(quiet=quiet)
    try:
        if report_path is not None:
            check_writable_file(report_path, option="--report")
        if events_path is not None:
            check_writable_file(events_path, option="--events")
        _check_text_option(run_id, "--run-id", RUN_ID, "a run id ([A-Za-z0-9._-], at most 64)")
        settings = VerifySettings(
            repo=repo,
            build=_build_environment(base_image, extra_ca_certs, sources, mirrors, build_network),
            compile_options=_compile_options(allowed_hosts),
            logs_root=logs_root,
            run_dir=run_dir,
            keep=keep,
            remove_images=rm_images,
            pids_limit=pids_limit,
            max_log_bytes=max_log_size,
            storage_limit=StorageLimit(storage_limit),
            hack_gate=hack_gate,
            repeat=repeat,
        )
        with interrupts(), EventLog.open(events_path) as events:
            outcome = verify(
                target,
                settings,
                progress=output.progress,
                plan_only=plan_only,
                on_stage=events.write if events else None,
                run_id=run_id,
            )
    except RunnerError as exc:
        if as_json:
            click.echo(_usage_report(exc).to_json(), nl=False)
        raise
    report = outcome.report
    if plan_only and outcome.plan is not None:
        click.echo(outcome.plan.to_json(), nl=False)
        return 0
    if report_path is not None:
        from runner.model.report import write_report

        write_report(report_path, report)
    if as_json:
        click.echo(report.to_json(), nl=False)
    if not quiet or not as_json:
        output.summary(report)
    for kept in report.kept:
        click.echo(f"kept {kept.label} ({kept.name}): {kept.enter}", err=True)
    if report.kept:
        click.echo(f"remove them with: {PROG} clean", err=True)
    if report.interrupted:
        click.echo(f"{PROG}: interrupted; removed this run's containers", err=True)
    return int(report.exit_code)


def _usage_report(error: RunnerError) -> Any:
    """The report a program gets for a run refused before it started (bad options)."""
    from runner.model.report import InputProblem, Report, Verdict
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
@click.argument("target", type=click.Path(path_type=Path))
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
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def grade_command(
    target: Path,
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
    quiet: bool,
) -> int:
    """Grade an agent's patch against a sealed bundle (or a run directory's): the reward, what the
    patch policy undid and the per-test evidence, through a fresh verifier exactly as the gates
    run it. Exit 0 when the patch earns reward 1, 1 when it does not."""
    from runner.run.grading import grade

    output = Output(quiet=quiet)
    settings = VerifySettings(
        build=_build_environment(base_image, extra_ca_certs, sources, mirrors, build_network),
        logs_root=logs_root,
        run_dir=run_dir,
        keep=keep,
        pids_limit=pids_limit,
        max_log_bytes=max_log_size,
        storage_limit=StorageLimit(storage_limit),
        hack_gate=False,
        repeat=0,
    )
    with interrupts():
        report = grade(target, patch_path, settings, progress=output.progress)
    if as_json:
        click.echo(report.to_json(), nl=False)
    if not quiet or not as_json:
        output.grade_summary(report)
    return int(report.exit_code)


@cli.command("prepare")
@click.option(
    "--toolchains",
    "toolchain_list",
    required=True,
    metavar="LIST",
    help="Comma-separated toolchains, e.g. go,bun,uv (implied ones are added).",
)
@BASE_IMAGE
@EXTRA_CA
@TOOLCHAIN_SOURCE
@TOOLCHAIN_MIRROR
@BUILD_NETWORK
@click.option("--plan", "plan_only", is_flag=True, help="Print the plan as JSON; run no Docker.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def prepare_command(
    toolchain_list: str,
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    build_network: str | None,
    plan_only: bool,
    quiet: bool,
) -> int:
    """Prebuild the base and toolchain layers (e.g. once in CI before a matrix of verifies).
    Prints the image tag."""
    from runner.engine.docker import DockerEngine
    from runner.plan.verify import plan_prepare
    from runner.run.images import prepare
    from runner.run.pipeline import default_env, host_facts

    names = [n.strip() for n in toolchain_list.split(",") if n.strip()]
    try:
        selected = [Toolchain(n) for n in names]
    except ValueError:
        known = ", ".join(t.value for t in Toolchain)
        raise UsageError(
            f"expected some of {known}, got {toolchain_list!r}", field="--toolchains"
        ) from None
    if not selected:
        raise UsageError("name at least one toolchain", field="--toolchains")
    settings = VerifySettings(
        build=_build_environment(base_image, extra_ca_certs, sources, mirrors, build_network)
    )
    if plan_only:
        click.echo(plan_prepare(selected, settings, host_facts()).to_json(), nl=False)
        return 0
    output = Output(quiet=quiet)
    engine = DockerEngine()
    try:
        plan = plan_prepare(selected, settings, engine.facts())
        with interrupts(), tempfile.TemporaryDirectory(prefix="selfbench-prepare.") as tmp:
            cached = prepare(
                plan, engine, env=default_env(settings), workdir=Path(tmp), progress=output.progress
            )
    finally:
        engine.close()
    if not quiet:
        click.echo(f"{'cached' if cached else 'built'}: {', '.join(plan.toolchains)}", err=True)
    click.echo(plan.tag)
    return 0


@cli.command("schema")
@click.option("--plan", "plan", is_flag=True, help="The verify plan's schema instead.")
@click.option("--request", "request", is_flag=True, help="The sidecar request's schema instead.")
@click.option("--response", "response", is_flag=True, help="The sidecar response's schema.")
def schema_command(plan: bool, request: bool, response: bool) -> int:
    """Print the report's JSON Schema (or the verify plan's, a sidecar request's or
    response's)."""
    if sum((plan, request, response)) > 1:
        raise UsageError("choose one of --plan, --request, --response", field="--plan")
    if request or response:
        from runner.sidecar.request import request_schema, response_schema

        schema = request_schema() if request else response_schema()
        click.echo(json.dumps(schema, indent=2))
        return 0
    if plan:
        from runner.plan.types import VerifyPlan

        click.echo(json.dumps(VerifyPlan.model_json_schema(), indent=2))
        return 0
    from runner.model.report import report_schema

    click.echo(json.dumps(report_schema(), indent=2))
    return 0
