"""`worker`: a Temporal worker running the `selfbench.verify` activity and the
`selfbench.batch` workflow on this host's Docker engine (runner.worker)."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from runner.base.errors import InvalidTaskError, UsageError
from runner.base.safeio import read_regular
from runner.cli.common import _forwarded, _stderr_logging, cli, require_extra
from runner.cli.options import CHILD_VERIFY_OPTIONS, ByteSize
from runner.cli.serve import (
    ALLOW_REPO_ROOT,
    ALLOW_REPO_URL,
    SERVICE_CACHE_BUDGET,
    _check_repository_policy,
    _listen_address,
)
from runner.model.settings import SharedSettings, cache_root

MAX_PEM_BYTES = 1024 * 1024
_F = TypeVar("_F", bound=Callable[..., Any])
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


def _pem(path: Path | None, option: str) -> bytes | None:
    if path is None:
        return None
    try:
        data = read_regular(path, limit=MAX_PEM_BYTES)
    except InvalidTaskError as exc:
        raise UsageError(exc.message, path=str(path), field=option) from None
    if b"-----BEGIN " not in data:
        raise UsageError("is not PEM (no -----BEGIN line)", path=str(path), field=option)
    return data


def _tls(cert: Path | None, key: Path | None, ca: Path | None, server_name: str | None) -> Any:
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together", field="--tls-cert")
    if server_name is not None and not _DNS_NAME.fullmatch(server_name):
        raise UsageError(f"{server_name[:100]!r} is not a DNS name", field="--tls-server-name")
    if cert is None and ca is None and server_name is None:
        return None
    require_extra("fleet", "TLS to Temporal")
    from temporalio.service import TLSConfig

    return TLSConfig(
        server_root_ca_cert=_pem(ca, "--tls-ca"),
        domain=server_name,
        client_cert=_pem(cert, "--tls-cert"),
        client_private_key=_pem(key, "--tls-key"),
    )


_TLS_NAMES = ("tls_cert", "tls_key", "tls_ca", "tls_server_name")
_TLS_OPTIONS = (
    click.option(
        "--tls-cert",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Client certificate (PEM) for mutual TLS to Temporal; with --tls-key.",
    ),
    click.option(
        "--tls-key",
        type=click.Path(path_type=Path, dir_okay=False),
        help="The client certificate's private key (PEM).",
    ),
    click.option(
        "--tls-ca",
        type=click.Path(path_type=Path, dir_okay=False),
        help="CA certificate(s) (PEM) the Temporal frontend's certificate is checked against "
        "(default: the system's). Any --tls-* option turns TLS on.",
    ),
    click.option(
        "--tls-server-name",
        metavar="NAME",
        help="The name the frontend's certificate is checked for, when it is not the host of "
        "the address (an IP address, a tunnel, a proxy).",
    ),
)


def temporal_queue(function: _F) -> _F:
    """--namespace and --task-queue: where `worker` polls and `batch --temporal` sends."""
    namespace = click.option(
        "--namespace", default="default", show_default=True, help="The Temporal namespace."
    )
    queue = click.option(
        "--task-queue",
        default="selfbench",
        show_default=True,
        help="The task queue the workers poll (and `batch --temporal` sends to).",
    )
    return namespace(queue(function))


def temporal_tls(function: _F) -> _F:
    """--tls-cert, --tls-key, --tls-ca and --tls-server-name, handed to the command as one
    `tls` (temporalio's TLSConfig, or None for plain TCP): `worker`'s and `batch
    --temporal`'s connection to Temporal."""

    @functools.wraps(function)
    def command(**kwargs: Any) -> Any:
        given = [kwargs.pop(name) for name in _TLS_NAMES]
        return function(tls=_tls(*given), **kwargs)

    for option in reversed(_TLS_OPTIONS):
        command = option(command)
    return cast(_F, command)


# The store a fleet shares (worker, batch --temporal): tasks, repositories and runs by digest.
STORE = click.option(
    "--store",
    metavar="URL",
    help="The artifact store the fleet shares: file:///DIR (a mount every host has) or "
    "s3://BUCKET[/PREFIX] (S3-compatible; endpoint and credentials from the AWS environment, "
    "e.g. AWS_ENDPOINT_URL). Task files, repositories and runs travel through it by digest.",
)


@cli.command("worker")
@click.option(
    "--temporal",
    "address",
    required=True,
    metavar="HOST:PORT",
    help="The Temporal frontend to poll (e.g. 127.0.0.1:7233).",
)
@temporal_queue
@click.option(
    "--jobs",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Verifications at once on this host's engine.",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="This worker's job store and archives (default: <cache>/worker). The store is per "
    "host: a request id is answered once per worker, a reused report only from this host's.",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(1, 3600),
    default=30.0,
    show_default=True,
    help="Seconds SIGTERM waits for running verifications before they are interrupted and "
    "handed back to Temporal.",
)
@click.option(
    "--metrics",
    "metrics_listen",
    metavar="HOST:PORT",
    help="Serve the Prometheus metrics (the same as serve's) at http://HOST:PORT/metrics.",
)
@temporal_tls
@STORE
@ALLOW_REPO_ROOT
@ALLOW_REPO_URL
@SERVICE_CACHE_BUDGET
@click.option(
    "--keep-runs",
    is_flag=True,
    help="With --store: keep each run's archive in --state-dir after it is published (default: "
    "removed once the store holds it; logs, debug, export and grade read it from the store).",
)
@click.option(
    "--store-cache-budget",
    type=ByteSize(),
    default="20GiB",
    help="With --store: keep the blobs fetched from the store (task files, repository bundles) "
    "under this size, the least recently used removed first; a running verification's stay. "
    "[default: 20GiB]",
)
@click.option(
    "--max-infrastructure-attempts",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Infrastructure failures in a row (on any worker) after which a verification is not "
    "retried, whatever the caller's retry policy: its activity fails for good with the last "
    "reason and build log. An attempt lost with its worker does not count.",
)
@CHILD_VERIFY_OPTIONS
@click.option("-v", "--verbose", is_flag=True, help="Log each activity's stages.")
def worker_command(
    address: str,
    namespace: str,
    task_queue: str,
    jobs: int,
    state_dir: Path | None,
    grace_period: float,
    metrics_listen: str | None,
    tls: Any,
    store: str | None,
    repo_roots: tuple[Path, ...],
    repo_urls: tuple[str, ...],
    cache_budget: int | None,
    keep_runs: bool,
    store_cache_budget: int,
    max_infrastructure_attempts: int,
    child: SharedSettings,
    verbose: bool,
) -> int:
    """Poll a Temporal task queue: each `selfbench.verify` activity (the sidecar's request
    document in, its response document out) runs on this host's engine (DOCKER_HOST), and
    `selfbench.batch` workflows fan them out. With --store, tasks by reference too: the
    `selfbench.pool` and `selfbench.task` workflows, their task files, repositories and runs
    in the shared artifact store. Rejected and invalid are results; an infrastructure failure
    is a retryable error, final at the third in a row (--max-infrastructure-attempts).

    \b
    Example:
      selfbench-runner worker --temporal temporal.internal:7233 --task-queue selfbench --jobs 2 \\
        --store s3://selfbench-artifacts/fleet --cache-budget 50GB
    """
    require_extra("fleet", "worker")
    if store is not None:
        from runner.artifacts.address import parse_store

        parse_store(store)
    elif keep_runs:
        raise UsageError(
            "--keep-runs goes with --store (without it every run stays)", field="--keep-runs"
        )
    _listen_address(address)  # HOST:PORT, said in the same words as serve's --http
    metrics_address = _listen_address(metrics_listen) if metrics_listen else None
    _check_repository_policy(repo_roots, repo_urls)
    forwarded, digest_settings = _forwarded(child)
    from runner.worker.run import WorkerOptions, run_worker

    options = WorkerOptions(
        address=address,
        namespace=namespace,
        task_queue=task_queue,
        jobs=jobs,
        state_dir=state_dir or cache_root() / "worker",
        grace_seconds=grace_period,
        verify_settings=forwarded,
        tls=tls,
        metrics_address=metrics_address,
        allow_repo_roots=tuple(r.resolve() for r in repo_roots),
        allow_repo_urls=repo_urls,
        digest_settings=digest_settings,
        base_image=child.base_image,
        store=store,
        cache_budget=cache_budget,
        keep_runs=keep_runs,
        store_cache_budget=store_cache_budget,
        max_infrastructure_attempts=max_infrastructure_attempts,
    )
    _stderr_logging(verbose)
    if not verbose:
        # One line per activity (runner.worker) on stderr; the SDK's own traceback of an
        # activity that ends in an expected error (an invalid request, a retried failure) is
        # the same line again.
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("worker: %(message)s"))
        worker_log = logging.getLogger("runner.worker")
        worker_log.setLevel(logging.INFO)
        worker_log.addHandler(handler)
        worker_log.propagate = False
        logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    return run_worker(options, announce=lambda line: click.echo(f"worker: {line}", err=True))
