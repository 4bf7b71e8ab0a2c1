"""What the commands share: the group, the option sets, option parsing and checks."""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from runner.model.layout import RunLayout
from runner.model.settings import (
    BuildEnvironment,
    CompileOptions,
    EvidenceChecks,
    SharedSettings,
    StorageLimit,
    VerifySettings,
    cache_root,
    proxy_environment,
)

PROG = "selfbench-runner"


MAX_CA_BYTES = 16 * 1024 * 1024


_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")


_NETWORK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


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


EXTRAS = {
    "sidecar": ("fastapi", "starlette", "uvicorn", "h11", "prometheus_client"),
    "fleet": (
        "temporalio",
        "boto3",
        "fastapi",
        "starlette",
        "uvicorn",
        "h11",
        "prometheus_client",
    ),
}


def require_extra(extra: str, command: str) -> None:
    """Exit 2 with the install line when `command` needs an extra that is not installed (a
    task author installs what `verify` needs; `serve` and `worker` need more)."""
    import importlib.util

    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"{command} needs the optional dependencies of selfbench-runner[{extra}] (missing: "
            f"{', '.join(missing)}): pip install 'selfbench-runner[{extra}]'"
        )


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


def toolchain_settings(sources: tuple[str, ...], mirrors: tuple[str, ...]) -> Any:
    from runner.model.toolchains import settings_from

    for mirror in mirrors:
        problem = v.control_character(mirror)
        if problem:
            raise UsageError(f"mirror {problem}", field="--toolchain-mirror")
    # The variables are in the options' values already (runner.cli.options._after_variable).
    return settings_from(sources, mirrors)


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
        toolchains=toolchain_settings(sources, mirrors),
        build_network=build_network,
        proxies=proxy_environment(),
    )


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when it writes: verify's live board (rich) swaps in a
    proxy that prints each line above the board instead of through it."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        del value


class _Informative(logging.Filter):
    """Below WARNING, only the loggers named (their INFO lines are what the command is for)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.startswith(self.names)


def _stderr_logging(verbose: bool, *, informative: tuple[str, ...] = ()) -> None:
    """Warnings (or, with -v, everything) on stderr, and the INFO lines of the `informative`
    loggers; the run's own log file gets everything regardless, so this handler carries its
    own level."""
    handler = _CurrentStderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    if verbose:
        handler.setLevel(logging.DEBUG)
    else:
        handler.setLevel(logging.INFO if informative else logging.WARNING)
        handler.addFilter(_Informative(informative))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG if verbose else logging.WARNING)
    for name in informative:
        if not verbose:
            logging.getLogger(name).setLevel(logging.INFO)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name=PROG)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Compile SelfBench tasks into native Harbor bundles, build them with Docker and run the
    smoke, nop, oracle, determinism and hack gates.

    \b
    Examples:
      selfbench-runner verify examples/bash-calc
      selfbench-runner logs runs/bash-calc-ops/<runId> --stage nop
      selfbench-runner grade runs/bash-calc-ops/<runId> --patch agent.patch

    Exit codes: 0 accepted, 1 rejected, 2 invalid input or usage, 3 infrastructure failure,
    130 interrupted.
    """
    if ctx.invoked_subcommand != "verify":  # verify resumes it after its own imports
        startup_finished()


def settings_of(child: SharedSettings, **per_run: Any) -> VerifySettings:
    """The verification settings these options make, checked (exit 2 naming the option), with
    a run's own settings (repository, logs, run directory, keep, ...)."""
    return VerifySettings(
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
        probe_pass_to_pass=child.probe_pass_to_pass,
        keep_going=child.keep_going,
        hand_caches=child.hand_caches,
        evidence_checks=EvidenceChecks(child.evidence_checks),
        hack_memory=child.hack_memory,
        **per_run,
    )


def _print_invalid(error: RunnerError) -> None:
    print_problems(error.problems)


def _find_run(target: Path, logs_root: Path) -> Path | None:
    """The newest run of this authored task (same four files) under the logs root: its own
    runs (`<logs>/<taskId>/<run>`) and a batch's (`<logs>/batch-*/runs/<n>-<name>/attempt-*`),
    newest report first."""
    from runner.base.validation import safe_dir_name
    from runner.compile.bundle import read_manifest
    from runner.compile.taskdir import load_authored_task

    task = load_authored_task(target)
    wanted = task.digests()
    own = logs_root / safe_dir_name(task.definition.task_id)
    candidates = [
        *own.glob("*/report.json"),
        *logs_root.glob("batch-*/runs/*/attempt-*/report.json"),
    ]

    def newest_first(report: Path) -> tuple[float, str]:
        try:
            return (-report.stat().st_mtime, str(report))
        except OSError:
            return (0.0, str(report))

    for run in (report.parent for report in sorted(candidates, key=newest_first)):
        try:
            manifest = read_manifest(RunLayout(run).bundle)
        except RunnerError:
            continue
        if manifest.sha256 == wanted and RunLayout(run).report.is_file():
            return run
    return None


def _forwarded(child: SharedSettings) -> tuple[SharedSettings, dict[str, Any]]:
    """A supervisor's own verify settings, checked once, for every `verify` it starts (the CA
    by its absolute path: a child may start elsewhere); and those that change an outcome."""
    settings = settings_of(child)
    ca = child.extra_ca_certs
    shared = child.model_copy(update={"extra_ca_certs": ca.resolve() if ca else None})
    return shared, settings.outcome_fields()


def local_run(value: str, *, field: str) -> Path:
    """A run named on the command line as a directory on this host: a path as it is, a run's
    store address (`<store>/runs/<key>`, as a fleet's batch.json names it) fetched once into
    the cache (file:// with the core install; s3:// needs the fleet extra)."""
    from runner.artifacts.address import is_address

    if not is_address(value):
        return Path(value)
    if value.startswith("s3://"):
        require_extra("fleet", f"{field} {value[:60]}")
    from runner.artifacts.runs import local_run_dir

    return local_run_dir(value, cache=cache_root(), field=field)
