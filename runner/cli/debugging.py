"""Looking into runs: clean, debug, logs (and finding a run by its task)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from runner.base.errors import (
    UsageError,
)
from runner.base.safeio import require_directory
from runner.cli.common import PROG, _build_environment, _find_run, cli, interrupts, local_run
from runner.cli.options import (
    BASE_IMAGE,
    BUILD_NETWORK,
    EXTRA_CA,
    REPO,
    TOOLCHAIN_MIRROR,
    TOOLCHAIN_SOURCE,
    Choice,
    logs_root_option,
)
from runner.cli.output import Output
from runner.model.layout import RunLayout
from runner.model.settings import (
    VerifySettings,
    proxy_environment,
)
from runner.model.stages import DEBUGGABLE_STAGES, STAGE_NAMES
from runner.plan.debug import DebugSession, plan_debug
from runner.plan.debugcheck import plan_problem, refused_image


@cli.command("clean")
@click.option("--images", is_flag=True, help="Also remove the images (the build cache).")
@click.option("--run", "run_id", help="Only what this run created.")
def clean_command(images: bool, run_id: str | None) -> int:
    """Remove containers, networks and volumes the runner left behind (by label)."""
    from runner.engine.docker import connected
    from runner.plan.labels import runner_labels

    labels = runner_labels(run=run_id)
    with connected() as engine:
        removed = engine.cleanup(labels, images=images)
    click.echo(f"removed {removed} object(s)")
    return 0


def _load_run(run_dir: Path) -> tuple[Any, Any]:
    from pydantic import ValidationError

    from runner.base.errors import InvalidTaskError
    from runner.base.treeread import read_below
    from runner.model.layout import MAX_REPORT_BYTES
    from runner.model.report import Report
    from runner.plan.types import VerifyPlan

    layout = RunLayout(run_dir)
    try:
        report = Report.model_validate_json(
            read_below(run_dir, layout.report.name, limit=MAX_REPORT_BYTES)
        )
    except (OSError, ValueError, ValidationError, InvalidTaskError) as exc:
        raise UsageError(
            f"not a run directory with a readable report.json ({type(exc).__name__})",
            path=str(run_dir),
        ) from None
    plan = None
    try:
        plan = VerifyPlan.model_validate_json(
            read_below(run_dir, layout.plan.name, limit=MAX_REPORT_BYTES)
        )
    except (OSError, ValueError, ValidationError, InvalidTaskError):
        plan = None
    if plan is not None:
        problem = plan_problem(plan)
        if problem is not None:
            raise UsageError(
                f"refused: {problem} (debug starts containers from it)",
                path=str(RunLayout(run_dir).plan),
            )
    return report, plan


def _run_docker(
    argv: list[str], *, check: bool = True, quiet: bool = False, silent: bool = False
) -> int:
    import subprocess

    try:
        result = subprocess.run(
            argv,
            check=False,
            stdout=subprocess.DEVNULL if quiet or silent else None,
            stderr=subprocess.DEVNULL if silent else None,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise UsageError("the docker CLI is not installed", field="debug") from None
    if check and result.returncode != 0:
        from runner.base.errors import InfrastructureError

        raise InfrastructureError(f"`{' '.join(argv[:3])} ...` exited {result.returncode}")
    return result.returncode


def _docker_output(argv: list[str]) -> str:
    """What a docker CLI command prints (stripped); empty when it fails."""
    import subprocess

    try:
        result = subprocess.run(
            argv, check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise UsageError("the docker CLI is not installed", field="debug") from None
    return result.stdout.strip() if result.returncode == 0 else ""


@cli.command("debug")
@click.argument("target_arg", metavar="TARGET")
@click.option(
    "--stage",
    type=Choice(list(DEBUGGABLE_STAGES)),
    help="The stage to open (default: the first red one).",
)
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print a script of docker commands that recreates the state and reproduces the "
    "failure, instead of opening a shell.",
)
@logs_root_option("Where a TASK_DIR's runs are (and where a new one goes).")
@REPO
@BASE_IMAGE
@EXTRA_CA
@TOOLCHAIN_SOURCE
@TOOLCHAIN_MIRROR
@BUILD_NETWORK
def debug_command(
    target_arg: str,
    stage: str | None,
    print_only: bool,
    logs_root: Path,
    repo: str | None,
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    build_network: str | None,
) -> int:
    """Open a shell in the exact state a red stage failed in: the last good build layer, or a
    gate's verifier with its agent.patch applied and the held-out tests in place. TARGET is a
    run directory, a run in a fleet's store (`<store>/runs/<key>`), or a task directory (its
    last run, or a new verify).

    \b
    Examples:
      selfbench-runner debug runs/my-task/20261203T010203Z-1a2b3c
      selfbench-runner debug tasks/my-task --stage oracle --print
    """
    import secrets

    from runner.engine.owners import owner_id

    target = local_run(target_arg, field="TARGET")
    run_dir = target
    if (target / "definition.json").is_file() and not RunLayout(target).report.is_file():
        found = _find_run(target, logs_root)
        if found is None:
            from runner.run.pipeline import verify

            output = Output(quiet=False)
            settings = VerifySettings(
                repo=repo,
                build=_build_environment(
                    base_image, extra_ca_certs, sources, mirrors, build_network
                ),
                logs_root=logs_root,
            )
            click.echo(f"{PROG} debug: no run of this task yet; verifying it first", err=True)
            with interrupts():
                outcome = verify(target, settings, progress=output.progress)
            if outcome.run_dir is None:
                raise UsageError("the task could not be verified", path=str(target))
            found = outcome.run_dir
        else:
            click.echo(f"{PROG} debug: using the last run of this task, {found}", err=True)
        run_dir = found
    run_dir = run_dir.resolve()
    report, plan = _load_run(run_dir)
    session = plan_debug(
        report,
        plan,
        run_dir,
        stage=stage,
        debug_id=secrets.token_hex(4),
        # A printed script runs after this process has exited: its containers name no owner,
        # or any runner's stale-run reaper would remove them while the script uses them (the
        # script removes them itself at its end).
        owner="" if print_only else owner_id(),
        proxies=sorted(proxy_environment()),
    )
    if print_only:
        # The script checks each image's label itself, on the engine it runs against.
        click.echo(session.script(), nl=False)
        return 0
    for image in session.images:
        if _docker_output(session.image_check(image)) != "1":
            raise UsageError(refused_image(image), field="debug")
    if not sys.stdin.isatty():
        raise UsageError(
            "an interactive shell needs a terminal; use --print for the commands", field="--print"
        )
    _enter(session)
    return 0


def _enter(session: DebugSession) -> None:
    """Recreate the state, open the shell, and remove what was created, whatever happens."""
    import subprocess

    click.echo(f"{PROG} debug: {session.stage} ({session.why})", err=True)
    for note in session.notes:
        click.echo(f"  {note}", err=True)
    try:
        with interrupts():
            for argv in session.setup:
                _run_docker(argv, quiet=True)
            if session.show:
                click.echo("  the test commands (fail-to-pass, then pass-to-pass):", err=True)
                _run_docker(session.show)
            subprocess.run(session.shell, check=False)
    finally:
        for argv in session.cleanup:
            _run_docker([*argv], check=False, silent=True)
        click.echo(f"{PROG} debug: removed what debug created", err=True)


@cli.command("logs")
@click.argument("run_dir_arg", metavar="RUN_DIR")
@click.option(
    "--stage",
    type=Choice(list(STAGE_NAMES)),
    help="Only this stage's logs.",
)
@click.option(
    "--lines",
    type=click.IntRange(0, None),
    default=200,
    show_default=True,
    help="Last lines of each log (0: all); with --follow, of each log already there.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Tail a running verification's stage logs until its report is written.",
)
def logs_command(run_dir_arg: str, stage: str | None, lines: int, follow: bool) -> int:
    """A run's stage logs (build output, each test command's output, the reward), red stages
    first. RUN_DIR is any run directory: a verify's, the sidecar's (runs/.../verify-<k>/run)
    or a batch's; or a run in a fleet's store (`<store>/runs/<key>`, as its batch.json names
    it), fetched once into the cache.

    \b
    Examples:
      selfbench-runner logs runs/my-task/20261203T010203Z-1a2b3c --stage nop --lines 50
      selfbench-runner logs runs/my-task/20261203T010203Z-1a2b3c --follow
      selfbench-runner logs s3://selfbench-artifacts/fleet/runs/pool-1-0007 --stage oracle
    """
    from runner.present.runlogs import follow as follow_run
    from runner.present.runlogs import stage_logs, tail_lines

    run_dir = local_run(run_dir_arg, field="RUN_DIR")
    require_directory(run_dir, what="run directory")
    if follow:

        def emit(name: str, line: str) -> None:
            click.echo(f"{name}: {line}")

        with interrupts():
            follow_run(run_dir, emit, lines=lines, stage=stage)
        click.echo(f"{PROG} logs: the run ended ({RunLayout(run_dir).report})", err=True)
        return 0
    shown = stage_logs(run_dir, stage=stage)
    if not shown:
        raise UsageError("no logs here (not a run directory?)", path=str(run_dir))
    for entry in shown:
        status = f" {entry.status}" if entry.status else ""
        detail = f": {entry.detail}" if entry.detail else ""
        click.echo(f"== {entry.stage}{status}{detail}")
        for path in entry.files:
            text, cut = tail_lines(run_dir, path, lines)
            more = f" (last {lines} lines; {cut} earlier)" if cut else ""
            click.echo(f"-- {path}{more}")
            for line in text:
                click.echo(line)
    return 0
