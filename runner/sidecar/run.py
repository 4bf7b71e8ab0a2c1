"""`serve`, wired: the store, the service, the mailbox and the HTTP server in one process,
until SIGTERM or SIGINT (then a graceful stop within the grace period)."""

from __future__ import annotations

import contextlib
import logging
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runner.base.errors import UsageError
from runner.base.safeio import private_dir, write_atomic
from runner.model.settings import SharedSettings
from runner.sidecar.mailbox import Mailbox
from runner.sidecar.metrics import Metrics
from runner.sidecar.service import Service, ServiceConfig
from runner.sidecar.store import Store

log = logging.getLogger(__name__)
STORE_FILE = "jobs.sqlite3"
TOKEN_FILE = "token"  # the sidecar's own, when it was given none


@dataclass(frozen=True, kw_only=True)
class SidecarOptions:
    mailbox: Path | None
    address: tuple[str, int] | None
    state_dir: Path
    jobs: int
    token: str | None
    allow_repo_roots: tuple[Path, ...]
    allow_repo_urls: tuple[str, ...]
    max_body: int
    header_timeout: float
    max_connections: int
    grace_seconds: float
    poll_seconds: float
    verify_settings: SharedSettings
    digest_settings: dict[str, Any] = field(default_factory=dict)
    base_image: str | None = None
    cache_budget: int | None = None


class ServiceSettings(Protocol):
    """What a process serving requests (`serve`, `worker`) sets its service up from."""

    @property
    def state_dir(self) -> Path: ...
    @property
    def jobs(self) -> int: ...
    @property
    def verify_settings(self) -> SharedSettings: ...
    @property
    def digest_settings(self) -> dict[str, Any]: ...
    @property
    def base_image(self) -> str | None: ...
    @property
    def allow_repo_roots(self) -> tuple[Path, ...]: ...
    @property
    def allow_repo_urls(self) -> tuple[str, ...]: ...
    @property
    def grace_seconds(self) -> float: ...
    @property
    def cache_budget(self) -> int | None: ...


@contextlib.contextmanager
def state_errors(what: str, path: Path) -> Iterator[None]:
    """An OSError on the state directory as the user's error, naming --state-dir."""
    try:
        yield
    except OSError as exc:
        raise UsageError(
            f"{what}: {exc.strerror or exc}", path=str(path), field="--state-dir"
        ) from None


def own_token_file(state: Path) -> Path:
    """The state directory's own token file, made once (0600, kept across restarts so a local
    orchestrator reads it again)."""
    path = state / TOKEN_FILE
    with state_errors("cannot keep the sidecar's token", path):
        private_dir(state)
        if not path.exists():
            write_atomic(path, secrets.token_urlsafe(32) + "\n", mode=0o600)
    return path


def open_service(options: ServiceSettings) -> tuple[Store, Service, Metrics]:
    """The job store in the state directory (a clear error naming --state-dir when it cannot
    be used), the service on it and its metrics."""
    state = options.state_dir
    with state_errors("cannot use the state directory", state):
        private_dir(state)
        store = Store(state / STORE_FILE)
    service = Service(
        ServiceConfig(
            state_dir=state.resolve(),
            jobs=options.jobs,
            verify_settings=options.verify_settings,
            digest_settings=options.digest_settings,
            base_image=options.base_image,
            allow_repo_roots=options.allow_repo_roots,
            allow_repo_urls=options.allow_repo_urls,
            grace_seconds=options.grace_seconds,
            cache_budget=options.cache_budget,
        ),
        store,
    )
    metrics = Metrics(service.depth)
    service.metrics = metrics
    return store, service, metrics


def run_sidecar(
    options: SidecarOptions, sock: socket.socket | None, *, announce: Callable[[str], None]
) -> int:
    state = options.state_dir
    store, service, metrics = open_service(options)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        del frame
        if not received:
            received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    server: Any = None
    server_thread: threading.Thread | None = None
    mailbox: Mailbox | None = None
    try:
        requeued = service.recover()
        if requeued:
            announce(f"requeued {requeued} verification(s) interrupted by the last stop")
        if options.mailbox is not None:
            mailbox = Mailbox(options.mailbox.resolve(), service, poll_seconds=options.poll_seconds)
        service.start()
        if mailbox is not None:
            mailbox.start()
            announce(f"mailbox: {options.mailbox}")
        if sock is not None:
            server, server_thread = _start_http(options, service, metrics, sock)
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            announce(f"http: listening on http://{shown}:{port}")
        announce(f"state: {state}; {options.jobs} job(s) at once")
        while not stop.wait(0.5):
            if server_thread is not None and not server_thread.is_alive():
                log.error("the HTTP server stopped on its own")
                break
    finally:
        announce(
            f"stopping ({received[0] if received else 'exit'}): up to "
            f"{options.grace_seconds:g} s for running verifications"
        )
        if mailbox is not None:
            mailbox.stop()
        service.stop()
        if server is not None:
            server.should_exit = True
        if server_thread is not None:
            server_thread.join(10)
        store.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    announce("stopped")
    return 0


def _start_http(
    options: SidecarOptions, service: Service, metrics: Metrics, sock: socket.socket
) -> tuple[Any, threading.Thread]:
    import uvicorn

    from runner.sidecar.http import create_app
    from runner.sidecar.transport import BoundedH11Protocol

    app = create_app(
        service,
        metrics,
        token=options.token,
        max_body=options.max_body,
        body_idle_seconds=3 * options.header_timeout,
        max_streams=options.max_connections // 2,
    )
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=5,
        server_header=False,
        http=BoundedH11Protocol.bounded(
            header_timeout=options.header_timeout, max_connections=options.max_connections
        ),
        # The protocol bounds connections itself (evicting the slowest); uvicorn's bound counts
        # an evicted connection until it is gone and would answer the new one 503.
        limit_concurrency=2 * options.max_connections,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="http")
    thread.daemon = True
    thread.start()
    return server, thread
