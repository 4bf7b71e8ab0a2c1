"""The command line. The only module that prints; everything below it raises RunnerError."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from runner import __version__
from runner.audit import audit
from runner.compiler import compile_task, refresh_bundle
from runner.errors import ExitCode, RunnerError
from runner.render import CompileOptions
from runner.taskdir import load_authored_task

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


TASK_DIR = click.argument(
    "task_dir", type=click.Path(path_type=Path, file_okay=False)
)


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
@click.option("--repo", metavar="PATH|URL", help="Repository holding baseCommit "
              "(default: definition.repo when it is a local path or git URL).")
@click.option("-o", "--out", "out", required=True, type=click.Path(path_type=Path),
              help="Bundle directory to write (replaced atomically).")
@AGENT_ALLOWED_HOST
@_errors_to_exit
def compile_command(task_dir: Path, repo: str | None, out: Path,
                    allowed_hosts: tuple[str, ...]) -> None:
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


def main() -> None:
    cli(prog_name="selfbench-runner")
