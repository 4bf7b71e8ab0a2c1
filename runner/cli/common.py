"""What the commands share: the group, the option sets, option parsing and checks."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from runner import __version__
from runner.base import validation as v
from runner.base.errors import (
    Interrupted,
    InvalidTaskError,
    RunnerError,
    UsageError,
)
from runner.base.safeio import read_regular
from runner.cli.output import print_problems
from runner.cli.startup import startup_finished
from runner.model.settings import (
    DEFAULT_BASE_IMAGE,
    DEFAULT_LOGS_ROOT,
    DEFAULT_MAX_LOG_BYTES,
    DEFAULT_PIDS_LIMIT,
    ENV_BASE_IMAGE,
    ENV_BUILD_NETWORK,
    ENV_EXTRA_CA,
    ENV_LOGS_ROOT,
    ENV_STORAGE_LIMIT,
    ENV_TOOLCHAIN_MIRRORS,
    ENV_TOOLCHAIN_SOURCES,
    BuildEnvironment,
    CompileOptions,
    StorageLimit,
    VerifySettings,
    environment_list,
    proxy_environment,
)

PROG = "selfbench-runner"


MAX_CA_BYTES = 16 * 1024 * 1024


_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")


_NETWORK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgGtT]?)(i?[bB])?\s*$")


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
    from runner.model.toolchains import settings_from

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


def _find_run(target: Path, logs_root: Path) -> Path | None:
    """The newest run of this authored task (same four files) under the logs root."""
    from runner.base.validation import safe_dir_name
    from runner.compile.taskdir import load_authored_task

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


def _forwarded(child: ChildOptions) -> tuple[list[str], dict[str, Any]]:
    """A supervisor's own verify options, checked once, as arguments for every `verify` it
    starts; and the settings among them that change a verification's outcome."""
    settings = VerifySettings(
        build=_build_environment(
            child.base_image,
            child.extra_ca_certs,
            child.sources,
            child.mirrors,
            child.build_network,
        ),
        compile_options=_compile_options(child.allowed_hosts),
        pids_limit=child.pids_limit,
        max_log_bytes=child.max_log_size,
        storage_limit=StorageLimit(child.storage_limit),
        hack_gate=child.hack_gate,
        repeat=child.repeat,
    )
    return settings.argv(), settings.outcome_fields()
