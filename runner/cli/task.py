"""The one-task commands: audit, compile, refresh, prepare, schema."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click

from runner.base.errors import (
    ExitCode,
    InvalidTaskError,
    Problem,
    UsageError,
)
from runner.cli.common import _build_environment, _compile_options, _print_invalid, cli, interrupts
from runner.cli.options import (
    AGENT_ALLOWED_HOST,
    BASE_IMAGE,
    BUILD_NETWORK,
    EXTRA_CA,
    REPO,
    TASK_DIR,
    TOOLCHAIN_MIRROR,
    TOOLCHAIN_SOURCE,
    out_directory,
)
from runner.cli.output import Output
from runner.model.settings import (
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

    \b
    Example:
      selfbench-runner audit tasks/my-task --repo ~/src/project
    """
    from runner.compile.taskaudit import audit_task
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
    audited = audit_task(task, repo)
    result, note = audited.result, audited.note
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
        for blocker in result.blockers:
            click.echo(f"blocker: {blocker}")
        for hint in result.hints:
            click.echo(f"note: {hint}")
        # What `audit --json` gives as `coupling`: each held-out test line that names what
        # only the gold patch brings (a reviewer's first look at a task that leaks its fix).
        for item in result.coupling:
            click.echo(
                f"coupling: {item.kind} {item.name!r}: {item.test_file}:{item.test_line} "
                f"-> {item.gold_file}:{item.gold_line}"
            )
        if result.accepted:
            click.echo("audit: accepted")
        else:
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
            "hints": [],
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
        "hints": result.hints,
    }


@cli.command("compile")
@TASK_DIR
@REPO
@out_directory(
    "Bundle directory to write (replaced atomically; never a directory holding anything "
    "but this task's bundle)."
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
    from runner.engine.docker import connected
    from runner.plan.images import plan_prepare
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
    with connected() as engine:
        plan = plan_prepare(selected, settings, engine.facts())
        with interrupts(), tempfile.TemporaryDirectory(prefix="selfbench-prepare.") as tmp:
            cached = prepare(
                plan, engine, env=default_env(settings), workdir=Path(tmp), progress=output.progress
            )
    if not quiet:
        click.echo(f"{'cached' if cached else 'built'}: {', '.join(plan.toolchains)}", err=True)
    click.echo(plan.tag)
    return 0


@cli.command("schema")
@click.option("--plan", "plan", is_flag=True, help="The verify plan's schema instead.")
@click.option("--request", "request", is_flag=True, help="The sidecar request's schema instead.")
@click.option("--response", "response", is_flag=True, help="The sidecar response's schema.")
@click.option(
    "--evaluation", "evaluation", is_flag=True, help="The evaluation summary's schema (evaluate)."
)
@click.option(
    "--instance", "instance", is_flag=True, help="An evaluated instance's result's schema."
)
def schema_command(
    plan: bool, request: bool, response: bool, evaluation: bool, instance: bool
) -> int:
    """Print the report's JSON Schema (or the verify plan's, a sidecar request's or
    response's, an evaluation summary's or an evaluated instance's)."""
    if sum((plan, request, response, evaluation, instance)) > 1:
        raise UsageError(
            "choose one of --plan, --request, --response, --evaluation, --instance", field="--plan"
        )
    if evaluation or instance:
        from runner.model.evaluation import EvaluationSummary, InstanceResult

        model = EvaluationSummary if evaluation else InstanceResult
        click.echo(json.dumps(model.model_json_schema(by_alias=True), indent=2))
        return 0
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
