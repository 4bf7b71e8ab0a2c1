"""The command line. The only module (with cli_output) that prints; everything below it raises
RunnerError or returns a report.

Exit codes: 0 accepted, 1 rejected, 2 invalid input or usage, 3 infrastructure (and any
unexpected exception, with its traceback saved), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
import os
import re
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from runner import __version__
from runner import validation as v
from runner.cli_output import Output, print_problems
from runner.errors import (
    ExitCode,
    Interrupted,
    InvalidTaskError,
    Problem,
    RunnerError,
    UsageError,
)
from runner.launch import startup_finished
from runner.models import Toolchain
from runner.safeio import check_writable_file, read_regular, require_directory
from runner.settings import (
    DEFAULT_BASE_IMAGE,
    DEFAULT_LOGS_ROOT,
    DEFAULT_MAX_LOG_BYTES,
    DEFAULT_PIDS_LIMIT,
    ENV_BASE_IMAGE,
    ENV_BUILD_NETWORK,
    ENV_EXTRA_CA,
    ENV_LOGS_ROOT,
    ENV_SIDECAR_STATE,
    ENV_SIDECAR_TOKEN,
    ENV_STORAGE_LIMIT,
    ENV_TOOLCHAIN_MIRRORS,
    ENV_TOOLCHAIN_SOURCES,
    BuildEnvironment,
    CompileOptions,
    StorageLimit,
    VerifySettings,
    cache_root,
    environment_list,
    environment_value,
    proxy_environment,
)
from runner.stages import STAGE_NAMES

PROG = "selfbench-runner"
MAX_CA_BYTES = 16 * 1024 * 1024
_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")
_NETWORK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgGtT]?)(i?[bB])?\s*$")


# ---- signals -----------------------------------------------------------------------------------


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """Ctrl-C and SIGTERM raise Interrupted once; later signals are ignored while the runner
    removes what it created, so a second Ctrl-C cannot leave containers behind."""
    fired: list[str] = []

    def handler(signum: int, frame: object) -> None:
        if fired:
            return
        fired.append(signal.Signals(signum).name)
        raise Interrupted(fired[0])

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# ---- option types ------------------------------------------------------------------------------


class ByteSize(click.ParamType):  # type: ignore[type-arg]
    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return int(value)
        match = _SIZE.match(str(value))
        if not match:
            self.fail(f"{value!r} is not a size (e.g. 20MB, 512KiB, 1048576)", param, ctx)
        number, unit = int(match.group(1)), match.group(2).upper()
        size = number * 1024 ** " KMGT".index(unit or " ")
        if not 64 * 1024 <= size <= 1024**4:
            self.fail("must be between 64KiB and 1TiB", param, ctx)
        return int(size)


def _check_text_option(value: str | None, option: str, pattern: re.Pattern[str], what: str) -> None:
    if value is not None and not pattern.fullmatch(value):
        raise UsageError(f"{value[:80]!r} is not {what}", field=option)


def _read_ca(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        data = read_regular(path, limit=MAX_CA_BYTES)
    except InvalidTaskError as exc:
        raise UsageError(exc.message, path=str(path), field="--extra-ca-certs") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise UsageError("holds no PEM certificate", path=str(path), field="--extra-ca-certs")
    return data


def _compile_options(allowed_hosts: tuple[str, ...]) -> CompileOptions:
    for host in allowed_hosts:
        problem = v.host_problem(host)
        if problem:
            raise UsageError(problem, field="--agent-allowed-host")
    return CompileOptions(agent_allowed_hosts=tuple(dict.fromkeys(allowed_hosts)))


def _toolchain_settings(sources: tuple[str, ...], mirrors: tuple[str, ...]) -> Any:
    from runner.toolchains import settings_from

    for mirror in mirrors:
        problem = v.control_character(mirror)
        if problem:
            raise UsageError(f"mirror {problem}", field="--toolchain-mirror")
    return settings_from(
        [*environment_list(ENV_TOOLCHAIN_SOURCES), *sources],
        [*environment_list(ENV_TOOLCHAIN_MIRRORS), *mirrors],
    )


def _build_environment(
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    build_network: str | None,
) -> BuildEnvironment:
    _check_text_option(base_image, "--base-image", _IMAGE_REF, "an image reference")
    _check_text_option(build_network, "--build-network", _NETWORK, "a network name")
    return BuildEnvironment(
        base_image=base_image,
        extra_ca_certs=extra_ca_certs,
        extra_ca_pem=_read_ca(extra_ca_certs),
        toolchains=_toolchain_settings(sources, mirrors),
        build_network=build_network,
        proxies=proxy_environment(),
    )


def _stderr_logging(verbose: bool) -> None:
    """Warnings (or, with -v, everything) on stderr; the run's own log file gets everything
    regardless, so this handler carries its own level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG if verbose else logging.WARNING)


# ---- the group ---------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name=PROG)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Compile SelfBench tasks into native Harbor bundles, build them with Docker and run the
    smoke, nop, oracle and determinism gates.

    Exit codes: 0 accepted, 1 rejected, 2 invalid input or usage, 3 infrastructure failure,
    130 interrupted.
    """
    if ctx.invoked_subcommand != "verify":  # verify resumes it after its own imports
        startup_finished()


TASK_DIR = click.argument("task_dir", type=click.Path(path_type=Path))
REPO = click.option(
    "--repo",
    metavar="PATH|URL",
    help="Repository holding baseCommit (default: definition.repo when it is a local path, a "
    "git bundle or a git URL).",
)
AGENT_ALLOWED_HOST = click.option(
    "--agent-allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST",
    help="Host the agent may reach (repeatable); the agent network becomes an allowlist. "
    "Without it the agent network is public.",
)
TOOLCHAIN_SOURCE = click.option(
    "--toolchain-source",
    "sources",
    multiple=True,
    metavar="NAME=upstream|registry",
    help=f"Where a toolchain comes from at build time (repeatable, or comma-separated; env "
    f"{ENV_TOOLCHAIN_SOURCES}). Default upstream.",
)
TOOLCHAIN_MIRROR = click.option(
    "--toolchain-mirror",
    "mirrors",
    multiple=True,
    metavar="NAME=URL",
    help=f"Mirror replacing a toolchain's upstream download base (repeatable; env "
    f"{ENV_TOOLCHAIN_MIRRORS}).",
)
BASE_IMAGE = click.option(
    "--base-image",
    envvar=ENV_BASE_IMAGE,
    default=DEFAULT_BASE_IMAGE,
    show_default=True,
    help=f"Image the bundle builds FROM (build arg BASE_IMAGE; env {ENV_BASE_IMAGE}).",
)
BUILD_NETWORK = click.option(
    "--build-network",
    metavar="MODE",
    envvar=ENV_BUILD_NETWORK,
    help="Network mode for image builds (e.g. host, to reach a mirror on 127.0.0.1).",
)
EXTRA_CA = click.option(
    "--extra-ca-certs",
    envvar=ENV_EXTRA_CA,
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=f"PEM file every build and container trusts (env {ENV_EXTRA_CA}).",
)

PIDS_LIMIT = click.option(
    "--pids-limit",
    type=click.IntRange(v.MIN_PIDS_LIMIT, v.MAX_PIDS_LIMIT),
    default=DEFAULT_PIDS_LIMIT,
    show_default=True,
    help="Per-container pids limit.",
)
MAX_LOG_SIZE = click.option(
    "--max-log-size",
    type=ByteSize(),
    default=DEFAULT_MAX_LOG_BYTES,
    show_default="20MiB",
    help="Cap per log file; the head and the tail are kept, the report says what was cut.",
)
STORAGE_LIMIT = click.option(
    "--storage-limit",
    type=click.Choice([s.value for s in StorageLimit]),
    envvar=ENV_STORAGE_LIMIT,
    default=StorageLimit.AUTO.value,
    show_default=True,
    help="How storage_mb is held: the engine's quota, the runner's watchdog, auto (quota "
    f"where the engine supports it) or off (env {ENV_STORAGE_LIMIT}).",
)
HACK_GATE = click.option(
    "--hack-gate/--no-hack-gate",
    default=True,
    show_default=True,
    help="Run the hack gate: canned hostile agent patches (a conftest.py that passes "
    "everything, the runner script rewritten to exit 0, ...) must each earn reward 0.",
)


def repeat_option(default: int) -> Callable[[_F], _F]:
    return click.option(
        "--repeat",
        type=click.IntRange(0, 10),
        default=default,
        show_default=True,
        help="Flakiness probe: verify the oracle's patch this many more times under "
        "perturbations (TZ, PYTHONHASHSEED, locale, selector order, CPU count); 0: off.",
    )


_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True)
class ChildOptions:
    """The verify options a supervisor (serve, batch) takes once for every verify it starts."""

    base_image: str
    extra_ca_certs: Path | None
    sources: tuple[str, ...]
    mirrors: tuple[str, ...]
    allowed_hosts: tuple[str, ...]
    build_network: str | None
    pids_limit: int
    max_log_size: int
    storage_limit: str
    hack_gate: bool
    repeat: int


def CHILD_VERIFY_OPTIONS(function: _F) -> _F:  # noqa: N802 - used like the option constants
    """The verify options a supervisor (serve, batch) takes once and passes to every verify it
    starts (see _forwarded), handed to the command as one `child: ChildOptions`."""
    names = [f.name for f in fields(ChildOptions)]

    @functools.wraps(function)
    def command(**kwargs: Any) -> Any:
        child = ChildOptions(**{name: kwargs.pop(name) for name in names})
        return function(child=child, **kwargs)

    for option in reversed(
        (
            BASE_IMAGE,
            EXTRA_CA,
            TOOLCHAIN_SOURCE,
            TOOLCHAIN_MIRROR,
            AGENT_ALLOWED_HOST,
            BUILD_NETWORK,
            PIDS_LIMIT,
            MAX_LOG_SIZE,
            STORAGE_LIMIT,
            HACK_GATE,
            repeat_option(3),
        )
    ):
        command = option(command)
    return cast(_F, command)


def logs_root_option(help_text: str) -> Callable[[_F], _F]:
    """`--logs DIR`: the root of run directories (env SELFBENCH_LOGS)."""
    return click.option(
        "--logs",
        "logs_root",
        type=click.Path(path_type=Path),
        envvar=ENV_LOGS_ROOT,
        default=DEFAULT_LOGS_ROOT,
        show_default=True,
        help=help_text,
    )


def _print_invalid(error: RunnerError) -> None:
    print_problems(error.problems)


# ---- audit -------------------------------------------------------------------------------------


@cli.command("audit")
@TASK_DIR
@REPO
@click.option("--json", "as_json", is_flag=True, help="Print the audit as one JSON document.")
def audit_command(task_dir: Path, repo: str | None, as_json: bool) -> int:
    """Static audit of an authored task: schema, patches, size, {tests} rules, and (when the
    repository is at hand) the workdir and `git apply --check` of both patches at baseCommit.

    Exit 0 when accepted, 1 with blockers, 2 when the task cannot be loaded.
    """
    from runner.audit import audit
    from runner.compiler import evidence_paths
    from runner.coupling import candidates
    from runner.errors import RepositoryError
    from runner.gitrepo import check_repository, resolve_repository
    from runner.taskdir import load_authored_task

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


# ---- compile and refresh -----------------------------------------------------------------------


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
    from runner.compiler import compile_task
    from runner.safeio import is_within
    from runner.taskdir import load_authored_task

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
    from runner.compiler import refresh_bundle
    from runner.taskdir import load_authored_task

    options = _compile_options(allowed_hosts)
    task = load_authored_task(task_dir)
    changed = refresh_bundle(task, bundle, options)
    for name in changed:
        click.echo(f"updated {name}")
    if not changed:
        click.echo("bundle already up to date")
    return 0


# ---- verify ------------------------------------------------------------------------------------


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
    from runner.events import EventLog
    from runner.pipeline import verify

    if not plan_only:
        import runner.engine  # noqa: F401  (docker-py: imported before the collector resumes)
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
        from runner.report import write_report

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
    from runner.pipeline import new_run_id
    from runner.report import InputProblem, Report, Verdict

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


# ---- grade -------------------------------------------------------------------------------------


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
    from runner.grading import grade

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


# ---- prepare, schema, clean --------------------------------------------------------------------


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
    from runner.engine import DockerEngine
    from runner.executor import prepare
    from runner.pipeline import default_env, host_facts
    from runner.plan import plan_prepare

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
        from runner.plan import VerifyPlan

        click.echo(json.dumps(VerifyPlan.model_json_schema(), indent=2))
        return 0
    from runner.report import report_schema

    click.echo(json.dumps(report_schema(), indent=2))
    return 0


@cli.command("clean")
@click.option("--images", is_flag=True, help="Also remove the images (the build cache).")
@click.option("--run", "run_id", help="Only what this run created.")
def clean_command(images: bool, run_id: str | None) -> int:
    """Remove containers, networks and volumes the runner left behind (by label)."""
    from runner.engine import DockerEngine
    from runner.plan import LABEL_RUN, LABEL_RUNNER

    labels = {LABEL_RUNNER: "1"}
    if run_id:
        labels[LABEL_RUN] = run_id
    engine = DockerEngine()
    try:
        removed = engine.cleanup(labels, images=images)
    finally:
        engine.close()
    click.echo(f"removed {removed} object(s)")
    return 0


# ---- debug and logs ----------------------------------------------------------------------------


def _find_run(target: Path, logs_root: Path) -> Path | None:
    """The newest run of this authored task (same four files) under the logs root."""
    from runner.taskdir import load_authored_task
    from runner.validation import safe_dir_name

    task = load_authored_task(target)
    wanted = task.digests()
    root = logs_root / safe_dir_name(task.definition.task_id)
    try:
        runs = sorted((p for p in root.iterdir() if p.is_dir()), reverse=True)
    except OSError:
        return None
    for run in runs:
        try:
            manifest = json.loads((run / "bundle" / ".selfbench-manifest.json").read_text())
        except (OSError, ValueError):
            continue
        if manifest.get("sha256") == wanted and (run / "report.json").is_file():
            return run
    return None


def _load_run(run_dir: Path) -> tuple[Any, Any]:
    from pydantic import ValidationError

    from runner.plan import VerifyPlan
    from runner.report import load_report

    try:
        report = load_report(run_dir / "report.json")
    except (OSError, ValueError, ValidationError) as exc:
        raise UsageError(
            f"not a run directory with a readable report.json ({type(exc).__name__})",
            path=str(run_dir),
        ) from None
    plan = None
    if (run_dir / "plan.json").is_file():
        try:
            plan = VerifyPlan.model_validate_json((run_dir / "plan.json").read_text())
        except (OSError, ValueError, ValidationError):
            plan = None
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
        from runner.errors import InfrastructureError

        raise InfrastructureError(f"`{' '.join(argv[:3])} ...` exited {result.returncode}")
    return result.returncode


@cli.command("debug")
@click.argument("target", type=click.Path(path_type=Path))
@click.option(
    "--stage",
    type=click.Choice(["build", "smoke", "nop", "oracle", "hack"]),
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
    target: Path,
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
    run directory, or a task directory (its last run, or a new verify)."""
    import secrets

    from runner.debug import plan_debug
    from runner.engine import owner_id

    run_dir = target
    if (target / "definition.json").is_file() and not (target / "report.json").is_file():
        found = _find_run(target, logs_root)
        if found is None:
            from runner.pipeline import verify

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
        owner=owner_id(),
        proxies=sorted(proxy_environment()),
    )
    if print_only:
        click.echo(session.script(), nl=False)
        return 0
    if not sys.stdin.isatty():
        raise UsageError(
            "an interactive shell needs a terminal; use --print for the commands", field="--print"
        )
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
            import subprocess

            subprocess.run(session.shell, check=False)
    finally:
        for argv in session.cleanup:
            _run_docker([*argv], check=False, silent=True)
        click.echo(f"{PROG} debug: removed what debug created", err=True)
    return 0


@cli.command("logs")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--stage",
    type=click.Choice(list(STAGE_NAMES)),
    help="Only this stage's logs.",
)
@click.option(
    "--lines",
    type=click.IntRange(0, None),
    default=200,
    show_default=True,
    help="Last lines of each log (0: all).",
)
@click.option(
    "--follow", is_flag=True, help="Tail a running verification until its report is written."
)
def logs_command(run_dir: Path, stage: str | None, lines: int, follow: bool) -> int:
    """A run's stage logs (build output, each test command's output, the reward), red stages
    first. RUN_DIR is any run directory: a verify's, the sidecar's (runs/.../verify-<k>/run)
    or a batch's."""
    from runner.runlogs import follow as follow_run
    from runner.runlogs import stage_logs, tail_lines

    require_directory(run_dir, what="run directory")
    if follow:

        def emit(name: str, line: str) -> None:
            click.echo(f"{name}: {line}")

        with interrupts():
            follow_run(run_dir, emit)
        click.echo(f"{PROG} logs: the run ended ({run_dir / 'report.json'})", err=True)
        return 0
    shown = stage_logs(run_dir, stage=stage)
    if not shown:
        raise UsageError("no logs here (not a run directory?)", path=str(run_dir))
    for entry in shown:
        status = f" {entry.status}" if entry.status else ""
        detail = f": {entry.detail}" if entry.detail else ""
        click.echo(f"== {entry.stage}{status}{detail}")
        for path in entry.files:
            text, cut = tail_lines(path, lines)
            more = f" (last {lines} lines; {cut} earlier)" if cut else ""
            click.echo(f"-- {path}{more}")
            for line in text:
                click.echo(line)
    return 0


# ---- serve -------------------------------------------------------------------------------------

MIN_TOKEN_CHARS = 16
_LISTEN = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>\d{1,5})$")


def _listen_address(value: str) -> tuple[str, int]:
    match = _LISTEN.fullmatch(value)
    port = int(match.group("port")) if match else -1
    if match is None or not 0 <= port <= 65535:
        raise UsageError(f"{value[:80]!r} is not HOST:PORT (e.g. 127.0.0.1:8765)", field="--http")
    return match.group("v6") or match.group("host"), port


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_token(token_file: Path | None) -> str | None:
    if token_file is not None:
        try:
            raw = read_regular(token_file, limit=4096)
        except InvalidTaskError as exc:
            raise UsageError(exc.message, path=str(token_file), field="--token-file") from None
        token = raw.decode(errors="replace").strip()
        where, field = str(token_file), "--token-file"
    else:
        token = (environment_value(ENV_SIDECAR_TOKEN) or "").strip()
        where, field = None, ENV_SIDECAR_TOKEN
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token:
        raise UsageError(
            f"a token is at least {MIN_TOKEN_CHARS} printable characters without spaces",
            path=where,
            field=field,
        )
    return token


def _bind(host: str, port: int) -> Any:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--http"
        ) from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def _forwarded(child: ChildOptions) -> tuple[list[str], dict[str, Any]]:
    """A supervisor's own verify options, checked once, as arguments for every `verify` it
    starts; and the settings among them that change a verification's outcome."""
    import hashlib

    build = _build_environment(
        child.base_image, child.extra_ca_certs, child.sources, child.mirrors, child.build_network
    )
    compile_options = _compile_options(child.allowed_hosts)
    toolchains = build.toolchains
    forwarded = [
        "--base-image",
        child.base_image,
        "--pids-limit",
        str(child.pids_limit),
        "--max-log-size",
        str(child.max_log_size),
        "--storage-limit",
        child.storage_limit,
        "--hack-gate" if child.hack_gate else "--no-hack-gate",
        "--repeat",
        str(child.repeat),
    ]
    if child.extra_ca_certs is not None:
        forwarded += ["--extra-ca-certs", str(child.extra_ca_certs.resolve())]
    for name, source in toolchains.sources.items():
        forwarded += ["--toolchain-source", f"{name.value}={source.value}"]
    for name, url in toolchains.mirrors.items():
        forwarded += ["--toolchain-mirror", f"{name.value}={url}"]
    for host in compile_options.agent_allowed_hosts:
        forwarded += ["--agent-allowed-host", host]
    if child.build_network:
        forwarded += ["--build-network", child.build_network]
    digest_settings = {
        "baseImage": child.base_image,
        "extraCa": hashlib.sha256(build.extra_ca_pem).hexdigest() if build.extra_ca_pem else None,
        "toolchainSources": {k.value: v.value for k, v in toolchains.sources.items()},
        "toolchainMirrors": {k.value: v for k, v in toolchains.mirrors.items()},
        "agentAllowedHosts": list(compile_options.agent_allowed_hosts),
        "buildNetwork": child.build_network,
        "pidsLimit": child.pids_limit,
        "maxLogBytes": child.max_log_size,
        "storageLimit": child.storage_limit,
        "hackGate": child.hack_gate,
        "repeat": child.repeat,
    }
    return forwarded, digest_settings


@cli.command("serve")
@click.option(
    "--mailbox",
    type=click.Path(path_type=Path, file_okay=False),
    help="Serve the mailbox protocol in DIR (requests/, responses/, runs/).",
)
@click.option(
    "--http",
    "listen",
    metavar="HOST:PORT",
    help="Serve the HTTP API (e.g. 127.0.0.1:8765; port 0 picks a free one).",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar=ENV_SIDECAR_STATE,
    help=f"Job store and HTTP archives (default: <cache>/sidecar; env {ENV_SIDECAR_STATE}).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Verifications at once.",
)
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help=f"Bearer token every HTTP request must carry (or env {ENV_SIDECAR_TOKEN}); required "
    "for a non-loopback --http.",
)
@click.option(
    "--allow-repo-root",
    "repo_roots",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="A directory local repositories may come from (repeatable). Without it only git URLs "
    "are taken.",
)
@click.option(
    "--allow-repo-url",
    "repo_urls",
    multiple=True,
    metavar="PATTERN",
    help="Git URLs requests may name, as a shell-style pattern matched against the whole URL "
    "(repeatable), e.g. 'https://git.example.org/team/*'. Without it every git URL is refused: "
    "the sidecar fetches from the host, so an open list would let a request reach any address.",
)
@click.option(
    "--max-body",
    type=ByteSize(),
    default=64 * 1024 * 1024,
    show_default="64MiB",
    help="Largest request (HTTP body or mailbox file); larger is refused (413).",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(0.5, 600),
    default=10.0,
    show_default=True,
    help="Seconds a client has to send a request's line and headers (then 408 and closed); a "
    "body's pieces get three times as long each.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 65536),
    default=128,
    show_default=True,
    help="HTTP connections at once; more are closed as they open, requests beyond answer 503.",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(1, 3600),
    default=30.0,
    show_default=True,
    help="Seconds SIGTERM waits for running verifications before it interrupts and requeues them.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0.05, 60),
    default=0.2,
    show_default=True,
    help="Seconds between two looks at the mailbox.",
)
@CHILD_VERIFY_OPTIONS
@click.option("-v", "--verbose", is_flag=True, help="Log each request and stage.")
def serve_command(
    mailbox: Path | None,
    listen: str | None,
    state_dir: Path | None,
    jobs: int,
    token_file: Path | None,
    repo_roots: tuple[Path, ...],
    repo_urls: tuple[str, ...],
    max_body: int,
    header_timeout: float,
    max_connections: int,
    grace_period: float,
    poll_interval: float,
    child: ChildOptions,
    verbose: bool,
) -> int:
    """Run as the orchestrator's sidecar: take verification requests from a mailbox
    directory and/or over HTTP, run them (at most --jobs at once), answer each exactly once,
    and answer an identical payload from its last accepted report."""
    if mailbox is None and listen is None:
        raise UsageError("name --mailbox DIR, --http HOST:PORT or both", field="--mailbox")
    address = _listen_address(listen) if listen is not None else None
    token = _read_token(token_file)
    if address is not None and not _is_loopback(address[0]) and token is None:
        raise UsageError(
            f"{address[0]} is not a loopback address: a sidecar reachable from other hosts "
            f"needs a token (--token-file FILE or env {ENV_SIDECAR_TOKEN})",
            field="--http",
        )
    for root in repo_roots:
        if not root.is_dir():
            raise UsageError("is not a directory", path=str(root), field="--allow-repo-root")
    from runner.gitrepo import is_remote

    for pattern in repo_urls:
        if not is_remote(pattern) or any(ch in pattern for ch in "\n\r\0"):
            raise UsageError(
                f"{pattern!r} is not a git URL pattern (https://, ssh://, git:// or "
                "user@host:path)",
                field="--allow-repo-url",
            )
    forwarded, digest_settings = _forwarded(child)
    from runner.sidecar.run import SidecarOptions, run_sidecar

    options = SidecarOptions(
        mailbox=mailbox,
        address=address,
        state_dir=state_dir or cache_root() / "sidecar",
        jobs=jobs,
        token=token,
        allow_repo_roots=tuple(r.resolve() for r in repo_roots),
        allow_repo_urls=repo_urls,
        max_body=max_body,
        header_timeout=header_timeout,
        max_connections=max_connections,
        grace_seconds=grace_period,
        poll_seconds=poll_interval,
        verify_args=tuple(forwarded),
        digest_settings=digest_settings,
        base_image=child.base_image,
    )
    _stderr_logging(verbose)
    if not verbose:
        logging.getLogger("runner.sidecar").setLevel(logging.INFO)
    sock = _bind(*address) if address is not None else None
    return run_sidecar(options, sock, announce=lambda line: click.echo(line, err=True))


# ---- main --------------------------------------------------------------------------------------


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
    sys.exit(run_cli())  # (the installed command starts in runner.launch)


# The many-task commands register themselves on the group (they import it from here).
from runner import cli_batch  # noqa: E402, F401
