"""`init`: a task directory from a repository's change, for an author to finish."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from runner.base.errors import ExitCode
from runner.cli.common import cli, toolchain_settings
from runner.cli.options import TOOLCHAIN_MIRROR, TOOLCHAIN_SOURCE, out_directory


@cli.command("init")
@click.argument("repo", metavar="REPO")
@click.option("--base", required=True, help="The change's base: a commit id, branch or tag.")
@click.option("--head", required=True, help="The change's head: a commit id, branch or tag.")
@out_directory("The new task directory (must not exist, or be empty).")
@click.option(
    "--test-glob",
    "test_globs",
    multiple=True,
    metavar="GLOB",
    help="A changed file matching it is a test and goes to test.patch (repeatable; read as a "
    ".gitignore line: * within a path component, ** across them; replaces the default rules: "
    "test_*.py, *_test.go, *.test.*, tests/**, ...).",
)
@click.option("--task-id", help="The task's id (default: the repository's name and the head).")
@click.option("--source-url", help="The pull request's URL.")
@click.option("--source-pr", type=click.IntRange(1, None), help="The pull request's number.")
@click.option("--prompt", help="What the agent is asked to do (default: marked TODO).")
@TOOLCHAIN_SOURCE
@TOOLCHAIN_MIRROR
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def init_command(
    repo: str,
    base: str,
    head: str,
    out: Path,
    test_globs: tuple[str, ...],
    task_id: str | None,
    source_url: str | None,
    source_pr: int | None,
    prompt: str | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    as_json: bool,
) -> int:
    """Write a task directory from a change of REPO (a path, a git bundle or a git URL):
    test.patch (the changed test files), gold.patch (the rest) and a definition.json with every
    field filled from the repository or marked TODO, then audit it and say what is missing.
    Each proposed toolchain's download is asked whether it answers from this machine (with
    the sources and mirrors verify would take); one that does not is said, with what to do
    instead, before anything is built. Exit 0 when the audit accepts it, nothing is marked TODO
    and every toolchain can be downloaded, 1 when something is left to do (the task is written
    either way), 2 on bad input.

    \b
    Example:
      selfbench-runner init ~/src/project --base 1a2b3c4 --head my-feature -o tasks/my-task
    """
    from runner.compile.init import init_task
    from runner.run.reach import unreachable_downloads

    settings = toolchain_settings(sources, mirrors)
    made = init_task(
        repo,
        base,
        head,
        out,
        test_globs=test_globs,
        task_id=task_id,
        source_url=source_url,
        source_pr=source_pr,
        prompt=prompt,
    )
    audited = made.audit
    accepted = audited is not None and audited.result.accepted
    toolchains = made.definition.get("toolchains")
    unreachable = (
        unreachable_downloads([t for t in toolchains if isinstance(t, str)], settings)
        if isinstance(toolchains, list)
        else []
    )
    ready = accepted and not made.todo and not unreachable
    if as_json:
        document = _init_json(made, accepted, ready)
        document["unreachable"] = [
            {"toolchain": u.toolchain.value, "url": u.url, "reason": u.reason, "instead": u.instead}
            for u in unreachable
        ]
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(f"wrote {made.directory}")
        click.echo(f"  test.patch: {len(made.test_files)} file(s): {', '.join(made.test_files)}")
        click.echo(f"  gold.patch: {len(made.gold_files)} file(s): {', '.join(made.gold_files)}")
        for note in [*made.notes, *(u.sentence() for u in unreachable)]:
            click.echo(f"review: {note}")
        if audited is not None:
            if audited.note:
                click.echo(audited.note)
            for blocker in audited.result.blockers:
                click.echo(f"blocker: {blocker}")
            verdict = "accepted" if accepted else f"rejected: {audited.result.reason()}"
            click.echo(f"audit: {verdict}")
        if made.todo:
            click.echo(f"not ready: still marked TODO: {', '.join(made.todo)}")
        if unreachable:
            names = ", ".join(u.toolchain.value for u in unreachable)
            click.echo(f"not ready: cannot be downloaded on this machine: {names} (see review)")
        click.echo(f"next: edit {made.directory}/definition.json, then selfbench-runner verify "
                   f"{made.directory}")  # fmt: skip
    return int(ExitCode.ACCEPTED if ready else ExitCode.REJECTED)


def _init_json(made: Any, accepted: bool, ready: bool) -> dict[str, Any]:
    audited = made.audit
    return {
        "directory": str(made.directory),
        "ready": ready,
        "todo": made.todo,
        "definition": made.definition,
        "testFiles": made.test_files,
        "goldFiles": made.gold_files,
        "proposedFrom": made.proposal.found if made.proposal else [],
        "review": made.notes,
        "staticAudit": {
            "accepted": accepted,
            "blockers": audited.result.blockers if audited else [],
            "note": audited.note if audited else None,
        },
    }
