"""The command line's options: each as a constant (used like a decorator), the verification
settings' set handed to a command as one `SharedSettings`, and sizes (20MB, 512KiB)."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click
import pydantic
from click.core import ParameterSource
from pydantic import TypeAdapter, ValidationError

from runner.base import validation as v
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
    EvidenceChecks,
    HackGate,
    SharedSettings,
    StorageLimit,
    environment_list,
)

_F = TypeVar("_F", bound=Callable[..., Any])
_BYTE_SIZE: TypeAdapter[pydantic.ByteSize] = TypeAdapter(pydantic.ByteSize)


class Choice(click.Choice):  # type: ignore[type-arg]
    """click's Choice that names the closest choice to a mistyped one ("did you mean 'oracle'?"),
    as git and click's own command names do."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1)
            if not close:
                raise
            self.fail(f"{exc.message.rstrip('.')}; did you mean {close[0]!r}?", param, ctx)


class ByteSize(click.ParamType):  # type: ignore[type-arg]
    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return int(value)
        # pydantic's ByteSize: SI and IEC units as they are defined (20MB is 20,000,000 bytes,
        # 20MiB 20,971,520), a plain number of bytes, a decimal point, any case.
        try:
            size = int(_BYTE_SIZE.validate_python(str(value).strip()))
        except ValidationError:
            self.fail(f"{value!r} is not a size (e.g. 20MB, 512KiB, 1048576)", param, ctx)
        if not 64 * 1024 <= size <= 1024**4:
            self.fail("must be between 64KiB and 1TiB", param, ctx)
        return size


TASK_DIR = click.argument("task_dir", type=click.Path(path_type=Path))


def out_directory(help_text: str) -> Callable[[_F], _F]:
    """`-o/--out DIR`: the directory a command writes."""
    return click.option(
        "-o", "--out", "out", required=True, type=click.Path(path_type=Path), help=help_text
    )


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


def _after_variable(variable: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A repeatable option's values after its variable's (comma-separated) ones: the later
    wins, so an option beats the variable, and the variable is in the value every command hands
    on (the children of batch, serve and worker start without it: child_environment)."""

    def callback(_context: click.Context, _param: click.Parameter, value: Any) -> Any:
        return (*environment_list(variable), *value)

    return callback


TOOLCHAIN_SOURCE = click.option(
    "--toolchain-source",
    "sources",
    multiple=True,
    callback=_after_variable(ENV_TOOLCHAIN_SOURCES),
    metavar="NAME=upstream|registry",
    help=f"Where a toolchain comes from at build time (repeatable, or comma-separated; env "
    f"{ENV_TOOLCHAIN_SOURCES}). Default upstream.",
)


TOOLCHAIN_MIRROR = click.option(
    "--toolchain-mirror",
    "mirrors",
    multiple=True,
    callback=_after_variable(ENV_TOOLCHAIN_MIRRORS),
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
    help="Cap per log file; the head and the tail are kept, the report says what was cut. "
    "[default: 20MiB]",
)


STORAGE_LIMIT = click.option(
    "--storage-limit",
    type=Choice([s.value for s in StorageLimit]),
    envvar=ENV_STORAGE_LIMIT,
    default=StorageLimit.AUTO.value,
    show_default=True,
    help="How storage_mb is held: the engine's quota, the runner's watchdog, auto (quota "
    f"where the engine supports it) or off (env {ENV_STORAGE_LIMIT}).",
)


HACK_GATE = click.option(
    "--hack-gate",
    type=Choice([mode.value for mode in HackGate]),
    is_flag=False,
    flag_value=HackGate.TASK.value,
    default=HackGate.TASK.value,
    show_default=True,
    help="The hack gate: canned hostile agent patches (a conftest.py that passes everything, "
    "the runner script rewritten to exit 0, ...) must each earn reward 0. task: the exploits "
    "whose outcome depends on this task, the others reported as proved for its runner by this "
    "runner version; full: every exploit through a verifier; off: none.",
)

NO_HACK_GATE = click.option(
    "--no-hack-gate",
    is_flag=True,
    help="The same as --hack-gate off.",
)


def repeat_option(default: int) -> Callable[[_F], _F]:
    return click.option(
        "--repeat",
        type=click.IntRange(0, v.MAX_REPEAT),
        default=default,
        show_default=True,
        help="Flakiness probe: verify the oracle's patch this many more times under "
        "perturbations (TZ, PYTHONHASHSEED, locale, selector order, CPU count); 0: off.",
    )


PROBE_PASS_TO_PASS = click.option(
    "--probe-pass-to-pass/--no-probe-pass-to-pass",
    default=False,
    show_default=True,
    help="The flakiness probe's runs take the pass-to-pass selection too (by default only the "
    "fail-to-pass one, which the gold patch makes pass).",
)

KEEP_GOING = click.option(
    "--keep-going/--no-keep-going",
    default=False,
    show_default=True,
    help="Run every gate to its end even once a red gate has settled the verdict (by default "
    "the others stop: 'skipped: verdict settled by <gate>').",
)

HAND_CACHES = click.option(
    "--hand-caches/--no-hand-caches",
    default=True,
    show_default=True,
    help="Hand the build caches nop's verifier warmed (Go's build cache) to the verifiers "
    "after it, each a private copy; --no-hand-caches: every verifier builds on its own.",
)


EVIDENCE_CHECKS = click.option(
    "--evidence-checks",
    type=Choice([c.value for c in EvidenceChecks]),
    default=EvidenceChecks.ALL.value,
    show_default=True,
    help="Which of the verifier's defences judge: both (all), the canaries alone, or the "
    "in-process checks alone (a test mode: each shown on its own, docs/gates.md).",
)

HACK_MEMORY = click.option(
    "--hack-memory/--no-hack-memory",
    default=True,
    show_default=True,
    help="Let the hack gate take each exploit's agent side, policy check and reward-0 early run "
    "from an earlier verify of the same images whose hack stage passed (the runner's cache); "
    "--no-hack-memory: run them all afresh, the same exploits as the default.",
)

# The options that make a command's SharedSettings (in its field order).
_SETTINGS_OPTIONS = (
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
    NO_HACK_GATE,
)
_AFTER_REPEAT = (PROBE_PASS_TO_PASS, KEEP_GOING, HAND_CACHES, EVIDENCE_CHECKS, HACK_MEMORY)

SETTINGS_JSON = click.option(
    "--settings-json",
    metavar="JSON",
    hidden=True,  # a supervisor's, never a person's: the settings it checked, as one document
    help="Every verify setting as the JSON of one SharedSettings (instead of their options).",
)


def verify_options(*, repeat: int, from_json: bool = False) -> Callable[[_F], _F]:
    """The options that make a verification's settings (base image, CA, toolchains, agent
    hosts, build network, limits, hack gate, probe), handed to the command as one
    `child: SharedSettings`. `from_json`: the hidden --settings-json a supervisor passes
    instead (with any of these options beside it: exit 2)."""
    names = list(SharedSettings.model_fields)

    def decorate(function: _F) -> _F:
        @functools.wraps(function)
        def command(**kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names}
            if kwargs.pop("no_hack_gate"):
                given["hack_gate"] = HackGate.OFF
            document = kwargs.pop("settings_json", None) if from_json else None
            child = SharedSettings(**given) if document is None else _settings_from_json(document)
            return function(child=child, **kwargs)

        for option in reversed(
            (*_SETTINGS_OPTIONS, repeat_option(repeat), *_AFTER_REPEAT)
            + ((SETTINGS_JSON,) if from_json else ())
        ):
            command = option(command)
        return cast(_F, command)

    return decorate


def _settings_from_json(document: str) -> SharedSettings:
    context = click.get_current_context()
    mixed = [
        param.opts[0]
        for param in context.command.params
        if (param.name in SharedSettings.model_fields or param.name == "no_hack_gate")
        and context.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
    ]
    if mixed:
        raise click.UsageError(f"--settings-json takes every setting; drop {', '.join(mixed)}")
    try:
        return SharedSettings.model_validate_json(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(document)"
        raise click.UsageError(f"--settings-json: {where}: {first['msg']}") from None


# The verify options a supervisor (serve, batch) takes once and passes to every verify it
# starts (see _forwarded).
CHILD_VERIFY_OPTIONS = verify_options(repeat=3)


def with_options(*options: Callable[[_F], _F]) -> Callable[[_F], _F]:
    """Several click options as one decorator, in the order given (as --help lists them)."""

    def decorate(function: _F) -> _F:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


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
