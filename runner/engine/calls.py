"""How the engine package calls Docker: which failures are the connection's (retried, and
wrapped into EngineError with what was being done), and fresh clients for long calls."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

import docker
import requests
from docker.errors import APIError, DockerException
from tenacity import (
    retry,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from runner.base.errors import EngineError
from runner.engine.hosts import Endpoint

TRANSIENT = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)
# Everything a call to the engine may raise that is not the runner's own doing. OSError: a
# transport that breaks under a stream (a pipe, a reset socket).
ENGINE_FAILURES = (DockerException, *TRANSIENT, requests.exceptions.RequestException, OSError)
F = TypeVar("F", bound=Callable[..., Any])


def _retrying(condition: Any, *, attempts: int, longest: float) -> Callable[[F], F]:
    decorator = retry(
        retry=condition,
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.5, max=longest),
        reraise=True,
    )
    return cast(Callable[[F], F], decorator)


def transient_retry() -> Callable[[F], F]:
    """Retry only what the engine connection drops, never what a command did."""
    return _retrying(retry_if_exception_type(TRANSIENT), attempts=3, longest=5)


def _qgroup_refused(exc: BaseException) -> bool:
    return isinstance(exc, APIError) and "Failed to limit qgroup" in explain(exc)


def qgroup_retry() -> Callable[[F], F]:
    """Retry a call that mounts a container's root filesystem when the btrfs driver fails to
    set its quota again: moby's btrfs Get re-applies the container's qgroup limit on every
    mount (daemon/graphdriver/btrfs/btrfs.go, subvolLimitQgroup), `docker cp` included, and the
    ioctl was refused once in CI right after a task had filled its quota (1 run of about ten of
    test_storage_quota_on_a_btrfs_engine, under load); the copy a moment later is served."""
    return _retrying(retry_if_exception(_qgroup_refused), attempts=4, longest=4)


def explain(exc: BaseException) -> str:
    if isinstance(exc, APIError):
        return str(exc.explanation or exc)
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """docker-py's and requests' errors, as EngineError naming what was being done."""
    try:
        yield
    except EngineError:
        raise
    except ENGINE_FAILURES as exc:
        raise EngineError(f"{action}: {explain(exc)}") from exc


def client_arguments(endpoint: Endpoint, env: Mapping[str, str]) -> dict[str, Any]:
    """docker-py's client arguments for one endpoint."""
    if endpoint.from_host_variable:
        from docker.utils import kwargs_from_env

        # DOCKER_HOST with DOCKER_TLS_VERIFY / DOCKER_CERT_PATH, as docker.from_env() reads them.
        return dict(kwargs_from_env(environment=dict(env)))
    params: dict[str, Any] = {"base_url": endpoint.url}
    if endpoint.tls_dir is not None:
        from docker.tls import TLSConfig

        cert, key, ca = (endpoint.tls_dir / n for n in ("cert.pem", "key.pem", "ca.pem"))
        params["tls"] = TLSConfig(
            client_cert=(str(cert), str(key)) if cert.is_file() else None,
            ca_cert=str(ca) if ca.is_file() else None,
            verify=endpoint.tls_verify,
        )
    return params


class Connection:
    """docker-py's client arguments for one engine, and the API version negotiated once."""

    def __init__(self, arguments: dict[str, Any], version: str) -> None:
        self.arguments = arguments
        self.version = version

    def new_api(self, timeout: float) -> docker.APIClient:
        """A client of its own for a long call: its read timeout outlasts the call, and closing
        it cancels the call on the engine. It reuses the negotiated API version (no /version
        round trip on every exec)."""
        return docker.APIClient(**self.arguments, version=self.version, timeout=int(timeout))

    def answers(self) -> bool:
        """Does the engine answer a ping within 5 s (on a client of its own)?"""
        try:
            api = self.new_api(5)
        except DockerException:
            return False
        try:
            api.ping()
            return True
        except ENGINE_FAILURES:
            return False
        finally:
            api.close()
