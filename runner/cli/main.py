"""The command line. The only module (with cli_output) that prints; everything below it raises
RunnerError or returns a report.

Exit codes: 0 accepted, 1 rejected, 2 invalid input or usage, 3 infrastructure (and any
unexpected exception, with its traceback saved), 130 interrupted.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import traceback
from pathlib import Path

import click

from runner.base.errors import (
    ExitCode,
    Interrupted,
    RunnerError,
)

# Each command module registers its commands on the group when imported.
from runner.cli import (  # noqa: F401
    authoring,
    batch,
    collection,
    debugging,
    evaluate,
    review,
    serve,
    task,
    verify,
    worker,
)
from runner.cli.common import PROG, cli, interrupts
from runner.cli.leave import leave
from runner.cli.output import print_problems
from runner.model.settings import (
    cache_root,
)


def _crash_log(text: str) -> Path | None:
    """Where an unexpected exception's traceback goes when no run directory exists."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for directory in (cache_root() / "crashes", Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"selfbench-runner-crash-{stamp}-{os.getpid()}.log"
            path.write_text(text)
            return path
        except OSError:
            continue
    return None


def run_cli(args: list[str] | None = None) -> int:
    """Run the CLI and return its exit code: every outcome maps to one."""
    try:
        with interrupts():
            result = cli.main(args=args, prog_name=PROG, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        return int(ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        command = exc.ctx.command_path if getattr(exc, "ctx", None) else PROG  # type: ignore[attr-defined]
        message = " ".join(exc.format_message().split()).rstrip(".")
        click.echo(f"{PROG}: error: {message} (see `{command} --help`)", err=True)
        return int(ExitCode.INVALID)
    except RunnerError as error:
        print_problems(error.problems)
        return int(error.exit_code)
    except (KeyboardInterrupt, Interrupted):
        click.echo(f"{PROG}: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:
        path = _crash_log(traceback.format_exc())
        where = f"; traceback in {path}" if path else ""
        click.echo(f"{PROG}: internal error: {type(exc).__name__}: {exc}{where}", err=True)
        return int(ExitCode.INFRASTRUCTURE)
    return int(result or 0)


def main() -> None:
    leave(run_cli())  # (the installed command starts in runner.cli.launch)
