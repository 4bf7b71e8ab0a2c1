"""`worker`: a Temporal worker running the `selfbench.verify` activity and the
`selfbench.batch` workflow on this host's Docker engine (runner.worker)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from runner.base.errors import InvalidTaskError, UsageError
from runner.base.safeio import read_regular
from runner.cli.common import _forwarded, _stderr_logging, cli
from runner.cli.options import CHILD_VERIFY_OPTIONS, ChildOptions
from runner.cli.serve import (
    ALLOW_REPO_ROOT,
    ALLOW_REPO_URL,
    _check_repository_policy,
    _listen_address,
)
from runner.model.settings import cache_root

MAX_PEM_BYTES = 1024 * 1024


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


def _tls(cert: Path | None, key: Path | None, ca: Path | None) -> Any:
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together", field="--tls-cert")
    if cert is None and ca is None:
        return None
    from temporalio.service import TLSConfig

    return TLSConfig(
        server_root_ca_cert=_pem(ca, "--tls-ca"),
        client_cert=_pem(cert, "--tls-cert"),
        client_private_key=_pem(key, "--tls-key"),
    )


@cli.command("worker")
@click.option(
    "--temporal",
    "address",
    required=True,
    metavar="HOST:PORT",
    help="The Temporal frontend to poll (e.g. 127.0.0.1:7233).",
)
@click.option("--namespace", default="default", show_default=True)
@click.option("--task-queue", default="selfbench", show_default=True)
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
@click.option("--tls-cert", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--tls-key", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--tls-ca", type=click.Path(path_type=Path, dir_okay=False))
@ALLOW_REPO_ROOT
@ALLOW_REPO_URL
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
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_ca: Path | None,
    repo_roots: tuple[Path, ...],
    repo_urls: tuple[str, ...],
    child: ChildOptions,
    verbose: bool,
) -> int:
    """Poll a Temporal task queue: each `selfbench.verify` activity (the sidecar's request
    document in, its response document out) runs on this host's engine (DOCKER_HOST), and
    `selfbench.batch` workflows fan them out. Rejected and invalid are results; an
    infrastructure failure is a retryable error."""
    _listen_address(address)  # HOST:PORT, said in the same words as serve's --http
    metrics_address = _listen_address(metrics_listen) if metrics_listen else None
    _check_repository_policy(repo_roots, repo_urls)
    tls = _tls(tls_cert, tls_key, tls_ca)
    forwarded, digest_settings = _forwarded(child)
    from runner.worker.run import WorkerOptions, run_worker

    options = WorkerOptions(
        address=address,
        namespace=namespace,
        task_queue=task_queue,
        jobs=jobs,
        state_dir=state_dir or cache_root() / "worker",
        grace_seconds=grace_period,
        verify_args=tuple(forwarded),
        tls=tls,
        metrics_address=metrics_address,
        allow_repo_roots=tuple(r.resolve() for r in repo_roots),
        allow_repo_urls=repo_urls,
        digest_settings=digest_settings,
        base_image=child.base_image,
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
