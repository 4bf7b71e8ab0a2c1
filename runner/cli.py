"""The command line. The only module that prints; everything below it raises RunnerError."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from runner import __version__
from runner.audit import audit
from runner.cli_output import Output
from runner.compiler import compile_task, refresh_bundle
from runner.engine import LABEL_RUN, LABEL_RUNNER, Engine, cleanup, connect_for_cleanup
from runner.errors import ExitCode, RunnerError, UsageError
from runner.images import DEFAULT_BASE_IMAGE, BuildEnvironment, prepare_toolchains
from runner.models import Toolchain
from runner.render import CompileOptions
from runner.report import report_schema, write_atomic
from runner.taskdir import load_authored_task
from runner.toolchains import ToolchainSettings, load_catalog, settings_from
from runner.verify import Verifier, VerifySettings, new_run_id

F = TypeVar("F", bound=Callable[..., Any])


def _fail(error: RunnerError) -> None:
    click.echo(f"selfbench-runner: error: {error.one_line()}", err=True)
    sys.exit(int(error.exit_code))


def _errors_to_exit(func: F) -> F:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RunnerError as error:
            _fail(error)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="selfbench-runner")
def cli() -> None:
    """Compile SelfBench tasks into native Harbor bundles, build them with Docker and run the
    smoke, nop, oracle and determinism gates.

    Exit codes: 0 accepted, 1 rejected, 2 invalid input or usage, 3 infrastructure failure.
    """


TASK_DIR = click.argument("task_dir", type=click.Path(path_type=Path, file_okay=False))


@cli.command("audit")
@TASK_DIR
@click.option("--json", "as_json", is_flag=True, help="Print the audit as one JSON document.")
@_errors_to_exit
def audit_command(task_dir: Path, as_json: bool) -> None:
    """Static audit of an authored task (schema, patches, size, {tests} rules).

    Exit 0 when accepted, 1 with blockers, 2 when the task cannot be loaded.
    """
    task = load_authored_task(task_dir)
    result = audit(task.definition, gold=task.gold, tests=task.tests)
    if as_json:
        document = {
            "taskId": task.definition.task_id,
            "accepted": result.accepted,
            "blockers": result.blockers,
            "reason": result.reason(),
            "metrics": {
                "implementationFiles": result.metrics.implementation_files,
                "implementationChangedLines": result.metrics.implementation_changed_lines,
                "testFiles": result.metrics.test_files,
            },
        }
        click.echo(json.dumps(document, indent=2))
    else:
        m = result.metrics
        click.echo(
            f"{task.definition.task_id}: {m.implementation_files} implementation file(s), "
            f"{m.implementation_changed_lines} changed line(s), {m.test_files} test file(s)"
        )
        if result.accepted:
            click.echo("audit: accepted")
        else:
            for blocker in result.blockers:
                click.echo(f"blocker: {blocker}")
            click.echo(f"audit: rejected: {result.reason()}")
    sys.exit(int(ExitCode.ACCEPTED if result.accepted else ExitCode.REJECTED))


def _compile_options(allowed_hosts: tuple[str, ...]) -> CompileOptions:
    return CompileOptions(agent_allowed_hosts=tuple(dict.fromkeys(allowed_hosts)))


AGENT_ALLOWED_HOST = click.option(
    "--agent-allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST",
    help="Host the agent may reach (repeatable); the agent network becomes an allowlist. "
    "Without it the agent network is public.",
)


@cli.command("compile")
@TASK_DIR
@click.option(
    "--repo",
    metavar="PATH|URL",
    help="Repository holding baseCommit "
    "(default: definition.repo when it is a local path or git URL).",
)
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="Bundle directory to write (replaced atomically).",
)
@AGENT_ALLOWED_HOST
@_errors_to_exit
def compile_command(
    task_dir: Path, repo: str | None, out: Path, allowed_hosts: tuple[str, ...]
) -> None:
    """Compile an authored task into a native Harbor bundle."""
    task = load_authored_task(task_dir)
    compile_task(task, repo=repo, out=out, options=_compile_options(allowed_hosts))
    click.echo(str(out))


@cli.command("refresh")
@TASK_DIR
@click.argument("bundle", type=click.Path(path_type=Path, file_okay=False, exists=True))
@AGENT_ALLOWED_HOST
@_errors_to_exit
def refresh_command(task_dir: Path, bundle: Path, allowed_hosts: tuple[str, ...]) -> None:
    """Rewrite a bundle's definition-derived files from a repaired definition."""
    task = load_authored_task(task_dir)
    changed = refresh_bundle(task, bundle, _compile_options(allowed_hosts))
    for name in changed:
        click.echo(f"updated {name}")
    if not changed:
        click.echo("bundle already up to date")


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C, so the same cleanup runs."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _env_list(name: str) -> list[str]:
    value = os.environ.get(name, "")
    return [value] if value.strip() else []


def _toolchain_settings(sources: tuple[str, ...], mirrors: tuple[str, ...]) -> ToolchainSettings:
    return settings_from(
        [*_env_list("SELFBENCH_TOOLCHAIN_SOURCES"), *sources],
        [*_env_list("SELFBENCH_TOOLCHAIN_MIRRORS"), *mirrors],
    )


TOOLCHAIN_SOURCE = click.option(
    "--toolchain-source",
    "sources",
    multiple=True,
    metavar="NAME=upstream|registry",
    help="Where a toolchain comes from at build time (repeatable, or comma-separated; env "
    "SELFBENCH_TOOLCHAIN_SOURCES). Default upstream.",
)
TOOLCHAIN_MIRROR = click.option(
    "--toolchain-mirror",
    "mirrors",
    multiple=True,
    metavar="NAME=URL",
    help="Mirror replacing a toolchain's upstream download base (repeatable; env "
    "SELFBENCH_TOOLCHAIN_MIRRORS).",
)
BASE_IMAGE = click.option(
    "--base-image",
    envvar="SELFBENCH_BASE_IMAGE",
    default=DEFAULT_BASE_IMAGE,
    show_default=True,
    help="Image the bundle builds FROM (build arg BASE_IMAGE; env SELFBENCH_BASE_IMAGE).",
)
BUILD_NETWORK = click.option(
    "--build-network",
    metavar="MODE",
    envvar="SELFBENCH_BUILD_NETWORK",
    help="Network mode for image builds (e.g. host, to reach a mirror on 127.0.0.1).",
)
EXTRA_CA = click.option(
    "--extra-ca-certs",
    envvar="SELFBENCH_EXTRA_CA_CERTS",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="PEM file every build and container trusts (env SELFBENCH_EXTRA_CA_CERTS).",
)


@cli.command("verify")
@click.argument("target", type=click.Path(path_type=Path, file_okay=False))
@click.option("--repo", metavar="PATH|URL", help="Repository holding baseCommit.")
@BASE_IMAGE
@EXTRA_CA
@TOOLCHAIN_SOURCE
@TOOLCHAIN_MIRROR
@AGENT_ALLOWED_HOST
@click.option(
    "--logs",
    "logs_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run directory (default runs/<taskId>/<timestamp>/).",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the report here (atomically).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--keep", is_flag=True, help="Keep containers and print how to enter them.")
@click.option(
    "--rm-images",
    is_flag=True,
    help="Remove this task's agent and verifier images afterwards (default: kept as "
    "the build cache; shared base and toolchain layers stay).",
)
@click.option("--pids-limit", default=4096, show_default=True, help="Per-container pids limit.")
@BUILD_NETWORK
@click.option("-v", "--verbose", is_flag=True, help="Stream build output.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@_errors_to_exit
def verify_command(
    target: Path,
    repo: str | None,
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    logs_dir: Path | None,
    report_path: Path | None,
    as_json: bool,
    keep: bool,
    rm_images: bool,
    pids_limit: int,
    build_network: str | None,
    verbose: bool,
    quiet: bool,
) -> None:
    """Compile (when TARGET is an authored task), audit, build, and run the smoke, nop, oracle
    and determinism gates. TARGET is an authored task directory or a compiled bundle."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(message)s", stream=sys.stderr
    )
    if extra_ca_certs is not None and not extra_ca_certs.is_file():
        raise UsageError("file not found", path=str(extra_ca_certs), field="--extra-ca-certs")
    settings = VerifySettings(
        repo=repo,
        base_image=base_image,
        extra_ca_certs=extra_ca_certs,
        toolchains=_toolchain_settings(sources, mirrors),
        logs_dir=logs_dir,
        keep=keep,
        remove_images=rm_images,
        compile_options=_compile_options(allowed_hosts),
        pids_limit=pids_limit,
        build_network=build_network,
    )
    output = Output(quiet=quiet)
    verifier = Verifier(target, settings, output.progress)
    try:
        with _terminate_as_interrupt():
            report = verifier.run()
    except KeyboardInterrupt:
        click.echo("selfbench-runner: interrupted; removed this run's containers", err=True)
        sys.exit(130)
    if report_path is not None:
        write_atomic(report_path, report.to_json())
    if as_json:
        click.echo(report.to_json(), nl=False)
    if not quiet or not as_json:
        output.summary(report)
    for line in report.settings.get("kept") or []:
        click.echo(f"kept {line}", err=True)
    if report.settings.get("kept"):
        click.echo("remove them with: selfbench-runner clean", err=True)
    sys.exit(int(report.verdict.exit_code))


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
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@_errors_to_exit
def prepare_command(
    toolchain_list: str,
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    build_network: str | None,
    quiet: bool,
) -> None:
    """Prebuild the base and toolchain layers (e.g. once in CI before a matrix of verifies).
    Prints the image tag."""
    names = [n.strip() for n in toolchain_list.split(",") if n.strip()]
    try:
        selected = [Toolchain(n) for n in names]
    except ValueError:
        known = ", ".join(t.value for t in Toolchain)
        raise UsageError(
            f"--toolchains: expected some of {known}, got {toolchain_list!r}"
        ) from None
    if not selected:
        raise UsageError("--toolchains: name at least one toolchain")
    environment = BuildEnvironment(
        base_image=base_image,
        extra_ca_certs=extra_ca_certs,
        toolchains=_toolchain_settings(sources, mirrors),
        build_network=build_network,
    )
    layers = load_catalog().close(selected)
    engine = Engine(new_run_id())
    with tempfile.TemporaryDirectory(prefix="selfbench-prepare.") as tmp:
        tag, cached = prepare_toolchains(
            engine, environment, layers, Path(tmp), Output(quiet=quiet).progress
        )
    if not quiet:
        click.echo(
            f"{'cached' if cached else 'built'}: {', '.join(s.name for s in layers)}", err=True
        )
    click.echo(tag)


@cli.command("schema")
def schema_command() -> None:
    """Print the report's JSON Schema."""
    click.echo(json.dumps(report_schema(), indent=2))


@cli.command("clean")
@click.option("--images", is_flag=True, help="Also remove the images (the build cache).")
@click.option("--run", "run_id", help="Only what this run created.")
@_errors_to_exit
def clean_command(images: bool, run_id: str | None) -> None:
    """Remove containers, networks and volumes the runner left behind (by label)."""
    labels = {LABEL_RUNNER: "1"}
    if run_id:
        labels[LABEL_RUN] = run_id
    removed = cleanup(connect_for_cleanup(), labels, images=images)
    click.echo(f"removed {removed} object(s)")


def main() -> None:
    cli(prog_name="selfbench-runner")
