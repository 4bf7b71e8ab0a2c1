"""`serve`: the sidecar's command line (its address, token and repository policy)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from runner.base.errors import (
    InvalidTaskError,
    UsageError,
)
from runner.base.safeio import read_regular
from runner.cli.common import _forwarded, _stderr_logging, cli, require_extra
from runner.cli.options import CHILD_VERIFY_OPTIONS, ByteSize, with_options
from runner.model.settings import (
    ENV_SIDECAR_STATE,
    ENV_SIDECAR_TOKEN,
    SharedSettings,
    cache_root,
    environment_value,
)

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


def _check_repository_policy(roots: tuple[Path, ...], urls: tuple[str, ...]) -> None:
    from runner.compile.repository import is_remote

    for root in roots:
        if not root.is_dir():
            raise UsageError("is not a directory", path=str(root), field="--allow-repo-root")
    for pattern in urls:
        if not is_remote(pattern) or any(ch in pattern for ch in "\n\r\0"):
            raise UsageError(
                f"{pattern!r} is not a git URL pattern (https://, ssh://, git:// or "
                "user@host:path)",
                field="--allow-repo-url",
            )


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


# The repository policy: `serve` and `worker` take the same options (the process fetches from
# its host, so an open list would let a request reach any address).
ALLOW_REPO_ROOT = click.option(
    "--allow-repo-root",
    "repo_roots",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="A directory local repositories may come from (repeatable). Without it only git URLs "
    "are taken.",
)
ALLOW_REPO_URL = click.option(
    "--allow-repo-url",
    "repo_urls",
    multiple=True,
    metavar="PATTERN",
    help="Git URLs requests may name, as a shell-style pattern matched against the whole URL "
    "(repeatable), e.g. 'https://git.example.org/team/*'. Without it every git URL is refused: "
    "the runner fetches from its host, so an open list would let a request reach any address.",
)

# `serve` and `worker` run for weeks and build every task they verify: their task images are a
# build cache that needs a bound (runner.engine.cachebudget).
SERVICE_CACHE_BUDGET = click.option(
    "--cache-budget",
    type=ByteSize(),
    default=None,
    help="After each verification, remove the runner's least recently used task images until "
    "they fit this size (e.g. 50GB). Images a running verification uses stay. Default: no bound "
    "(`gc --cache-budget` by hand).",
)


SERVE_OPTIONS = (
    click.option(
        "--mailbox",
        type=click.Path(path_type=Path, file_okay=False),
        help="Serve the mailbox protocol in DIR (requests/, responses/, runs/).",
    ),
    click.option(
        "--http",
        "listen",
        metavar="HOST:PORT",
        help="Serve the HTTP API (e.g. 127.0.0.1:8765; port 0 picks a free one).",
    ),
    click.option(
        "--state-dir",
        type=click.Path(path_type=Path, file_okay=False),
        envvar=ENV_SIDECAR_STATE,
        help=f"Job store and HTTP archives (default: <cache>/sidecar; env {ENV_SIDECAR_STATE}).",
    ),
    click.option(
        "--jobs",
        type=click.IntRange(1, 64),
        default=1,
        show_default=True,
        help="Verifications at once.",
    ),
    click.option(
        "--token-file",
        type=click.Path(path_type=Path, dir_okay=False),
        help=f"Bearer token every HTTP request must carry (or env {ENV_SIDECAR_TOKEN}); required "
        "for a non-loopback --http.",
    ),
    ALLOW_REPO_ROOT,
    ALLOW_REPO_URL,
    SERVICE_CACHE_BUDGET,
    click.option(
        "--max-body",
        type=ByteSize(),
        default=64 * 1024 * 1024,
        help="Largest request (HTTP body or mailbox file); larger is refused (413). "
        "[default: 64MiB]",
    ),
    click.option(
        "--header-timeout",
        type=click.FloatRange(0.5, 600),
        default=10.0,
        show_default=True,
        help="Seconds a client has to send a request's line and headers (then 408 and closed); a "
        "body's pieces get three times as long each.",
    ),
    click.option(
        "--max-connections",
        type=click.IntRange(1, 65536),
        default=128,
        show_default=True,
        help="HTTP connections at once; more are closed as they open, requests beyond answer 503.",
    ),
    click.option(
        "--grace-period",
        type=click.FloatRange(1, 3600),
        default=30.0,
        show_default=True,
        help="Seconds SIGTERM waits for running verifications before it interrupts and "
        "requeues them.",
    ),
    click.option(
        "--poll-interval",
        type=click.FloatRange(0.05, 60),
        default=0.2,
        show_default=True,
        help="Seconds between two looks at the mailbox.",
    ),
)


@cli.command("serve")
@with_options(*SERVE_OPTIONS)
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
    cache_budget: int | None,
    max_body: int,
    header_timeout: float,
    max_connections: int,
    grace_period: float,
    poll_interval: float,
    child: SharedSettings,
    verbose: bool,
) -> int:
    """Run as the orchestrator's sidecar: take verification requests from a mailbox
    directory and/or over HTTP, run them (at most --jobs at once), answer each exactly once,
    and answer an identical payload from its last accepted report.

    \b
    Examples:
      selfbench-runner serve --mailbox /srv/selfbench/mailbox --jobs 2
      selfbench-runner serve --http 127.0.0.1:8080 --token-file /run/secrets/selfbench-token
    """
    require_extra("sidecar", "serve")
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
    state = state_dir or cache_root() / "sidecar"
    generated: Path | None = None
    if address is not None and token is None:
        # A loopback port is open to every local user: without a token of the caller's, the
        # sidecar makes one, readable by its own user only.
        from runner.sidecar.run import own_token_file

        generated = own_token_file(state)
        token = _read_token(generated)
    _check_repository_policy(repo_roots, repo_urls)
    forwarded, digest_settings = _forwarded(child)
    from runner.sidecar.run import SidecarOptions, run_sidecar

    options = SidecarOptions(
        mailbox=mailbox,
        address=address,
        state_dir=state,
        jobs=jobs,
        token=token,
        allow_repo_roots=tuple(r.resolve() for r in repo_roots),
        allow_repo_urls=repo_urls,
        max_body=max_body,
        header_timeout=header_timeout,
        max_connections=max_connections,
        grace_seconds=grace_period,
        poll_seconds=poll_interval,
        verify_settings=forwarded,
        digest_settings=digest_settings,
        base_image=child.base_image,
        cache_budget=cache_budget,
    )
    # The service's own lines (a job queued, started, ended) and one per request.
    _stderr_logging(verbose, informative=("runner.sidecar",))
    sock = _bind(*address) if address is not None else None
    if generated is not None:
        click.echo(f"token: {generated} (send Authorization: Bearer <its content>)", err=True)
    return run_sidecar(options, sock, announce=lambda line: click.echo(line, err=True))
