"""The verification round's commands: `review` (what the reviewing agent receives, from a run)
and `fix` (a green task and the reviewer's fix, as the fixed task)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from runner.base.errors import ExitCode, InvalidTaskError, Problem
from runner.cli.common import _print_invalid, cli
from runner.cli.options import REPO, TASK_DIR, out_directory
from runner.model.stages import Stage


@cli.command("review")
@click.argument("run_dir", type=click.Path(path_type=Path))
@out_directory("The directory to write (new, or empty).")
@click.option(
    "--task",
    "task_dir",
    type=click.Path(path_type=Path),
    help="The authored task, when the run holds none (it verified a bundle).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the index as JSON.")
def review_command(run_dir: Path, out: Path, task_dir: Path | None, as_json: bool) -> int:
    """What a verification round's reviewer receives, from RUN_DIR: the instruction, the
    held-out test patch, the gold patch, the environment contract, the rendered Harbor files,
    the report and the coupling evidence, with an index (index.json, index.md).

    \b
    Example:
      selfbench-runner review runs/my-task/20261203T010203Z-1a2b3c -o review/
    """
    from runner.run.review import write_review

    index = write_review(run_dir, out, task_dir=task_dir)
    if as_json:
        click.echo(json.dumps({"out": str(out), **index}, indent=2))
    else:
        click.echo(f"{out}: {len(index['items'])} items for the review of {index['taskId']}")
        if index["verdict"] != "accepted":
            click.echo(
                f"note: the run is {index['verdict']}, not green ({index['reason']})", err=True
            )
    return int(ExitCode.ACCEPTED)


@cli.command("fix")
@TASK_DIR
@click.option(
    "--tree",
    type=click.Path(path_type=Path),
    help="The reviewer's work tree: its held-out test edits become test.patch.",
)
@click.option(
    "--fix",
    "fix_dir",
    type=click.Path(path_type=Path),
    help="A directory with definition.json (the changed fields only) and/or test.patch (used "
    "instead of the one the tree gives).",
)
@out_directory("The fixed task's directory (new, or empty).")
@REPO
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def fix_command(
    task_dir: Path,
    tree: Path | None,
    fix_dir: Path | None,
    out: Path,
    repo: str | None,
    as_json: bool,
) -> int:
    """Write the fixed task from a green TASK_DIR and a reviewer's fix. A fix may change the
    held-out tests and the environment contract (setup, test command, selection, testPaths,
    toolchains, timeouts, resources, environment), never the gold patch, the base commit, the
    instruction, the task id, the repository, the source PR or the difficulty: each violation
    exits 2 naming it. The fixed task is audited before it is written (exit 1 when the audit
    rejects it, nothing written).

    \b
    Example:
      selfbench-runner fix tasks/my-task --tree /work/repo --fix /work/fix -o tasks/my-task-r2
    """
    from runner.compile.fix import FixRejectedError, fix_task

    try:
        fixed = fix_task(task_dir, out=out, tree=tree, fix_dir=fix_dir, repo=repo)
    except InvalidTaskError as exc:
        if as_json:
            click.echo(json.dumps(_refused(exc.problems), indent=2))
        _print_invalid(exc)
        return int(exc.exit_code)
    except FixRejectedError as exc:
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "fixed": False,
                        "reason": exc.message,
                        "blockers": exc.audited.result.blockers,
                        "changes": exc.summary.model_dump(mode="json"),
                    },
                    indent=2,
                )
            )
        else:
            click.echo(f"fix: rejected: {exc.message}", err=True)
        return int(exc.exit_code)
    summary = fixed.summary
    if as_json:
        click.echo(
            json.dumps(
                {
                    "fixed": True,
                    "task": str(out),
                    "taskId": fixed.task.definition.task_id,
                    "repo": fixed.repository,
                    "changes": summary.model_dump(mode="json"),
                    Stage.AUDIT.value: {
                        "accepted": fixed.audit.result.accepted,
                        "repositoryNote": fixed.audit.note,
                        "hints": fixed.audit.result.hints,
                    },
                },
                indent=2,
            )
        )
        return int(ExitCode.ACCEPTED)
    click.echo(f"{out}: the fixed task {fixed.task.definition.task_id} (audit accepted)")
    for line in _summary_lines(summary.model_dump(mode="json")):
        click.echo(f"  {line}")
    if summary.empty:
        click.echo("  no change: the fix is the green task")
    if fixed.repository:
        click.echo(f"  verify it with --repo {fixed.repository}")
    if fixed.audit.note:
        click.echo(f"  note: {fixed.audit.note}")
    return int(ExitCode.ACCEPTED)


def _refused(problems: tuple[Problem, ...]) -> dict[str, Any]:
    return {"fixed": False, "errors": [p.as_json() for p in problems]}


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    if summary["fields"]:
        lines.append(f"fields: {', '.join(summary['fields'])}")
    for kind, paths in summary["testFiles"].items():
        if paths:
            lines.append(f"test files {kind}: {', '.join(paths)}")
    for key in ("failToPass", "passToPass"):
        for kind, selectors in summary[key].items():
            if selectors:
                lines.append(f"{key} {kind}: {', '.join(selectors)}")
    return lines
