"""The only module that talks to Docker.

`Engine` and `Container` are the interface the executor receives (tests pass a fake);
`DockerEngine` implements it with docker-py's low-level client. Every docker.errors.* and
connection error is wrapped into EngineError. Deadlines are the runner's own: when one passes,
the runner kills the container and says so (an exit code 137 alone proves nothing). Everything
created carries the run's labels; `with engine.container(plan) as c:` removes its container on
every path (unless kept on purpose).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar, cast

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from runner.base.errors import EngineError, InfrastructureError, TaskFailedError
from runner.base.logs import CappedLog, Truncation, extract_capped
from runner.engine.buildlog import BuildStream
from runner.engine.hosts import Endpoint, SshTunnel
from runner.engine.hosts import resolve as resolve_endpoint
from runner.model.settings import (
    BUILD_GRACE_SECONDS,
    STORAGE_SAMPLE_SECONDS,
    StorageLimit,
    docker_environment,
)
from runner.model.toolchains import Arch
from runner.plan.runtime import (
    BuildOutcome,
    BuildRequest,
    ExecOutcome,
    FileToPut,
    ImageInfo,
    LimitStats,
)
from runner.plan.types import (
    LABEL_FROM_ID,
    LABEL_KIND,
    LABEL_OWNER,
    LABEL_RUNNER,
    ContainerPlan,
    EngineFacts,
    ExecStep,
    ServicePlan,
)

log = logging.getLogger(__name__)

TRANSIENT = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)
PROBE_IMAGE = "selfbench/probe:empty"
F = TypeVar("F", bound=Callable[..., Any])


def _transient_retry() -> Callable[[F], F]:
    """Retry only what the engine connection drops, never what a command did."""
    decorator = retry(
        retry=retry_if_exception_type(TRANSIENT),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.5, max=5),
        reraise=True,
    )
    return cast(Callable[[F], F], decorator)


def _explain(exc: BaseException) -> str:
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
    except (DockerException, *TRANSIENT, requests.exceptions.RequestException, OSError) as exc:
        raise EngineError(f"{action}: {_explain(exc)}") from exc


# ---- Docker ----------------------------------------------------------------------------------


def owner_id() -> str:
    """host:pid:start of this process: the stale-run reaper's key (pids are reused)."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as handle:
            start = handle.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        start = "0"
    return f"{socket.gethostname()}:{os.getpid()}:{start}"


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # another machine's run: not ours to judge
    try:
        with open(f"/proc/{pid_text}/stat", encoding="ascii") as handle:
            current = handle.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return False
    return current == start


def _connection(endpoint: Endpoint, env: Mapping[str, str]) -> dict[str, Any]:
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


class DockerEngine:
    """A connected Docker engine."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        timeout: int = 120,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.timeout = timeout
        self._tunnel: SshTunnel | None = None
        env = dict(environment) if environment is not None else docker_environment()
        # Where the docker CLI would connect with this environment (DOCKER_HOST, DOCKER_CONTEXT,
        # the current context), resolved once: every client this engine makes reuses it. An
        # unknown context is a usage error here, never the default engine.
        self.endpoint = Endpoint(url=base_url, name=base_url) if base_url else resolve_endpoint(env)
        where = (
            self.endpoint.url
            if self.endpoint.name == self.endpoint.url
            else f"context {self.endpoint.name} ({self.endpoint.url})"
        )
        try:
            self._connection: dict[str, Any] = _connection(self.endpoint, env)
            url = str(self._connection.get("base_url", ""))
            if url.startswith("ssh://"):
                self._tunnel = SshTunnel(url)
                self._connection["base_url"] = self._tunnel.open()
            self.client = docker.DockerClient(**self._connection, timeout=timeout)
            self._ping()
            info = self.client.info()
        except (DockerException, *TRANSIENT, requests.exceptions.RequestException, OSError) as exc:
            self._close_tunnel()
            raise InfrastructureError(
                f"no Docker engine answers at {where} ({_explain(exc)}); start one "
                "(scripts/start-docker.sh does on Debian) or set DOCKER_HOST"
            ) from None
        except BaseException:
            self._close_tunnel()
            raise
        self.api = self.client.api
        self.ncpu = int(info.get("NCPU") or 1)
        self.arch: Arch = "arm64" if info.get("Architecture") in ("aarch64", "arm64") else "amd64"
        self.storage_driver = str(info.get("Driver", ""))
        self._quota: bool | None = None
        self._remover = ThreadPoolExecutor(max_workers=2, thread_name_prefix="remove")
        self._removals: list[Future[None]] = []

    def _close_tunnel(self) -> None:
        if self._tunnel is not None:
            self._tunnel.close()
            self._tunnel = None

    def _new_api(self, timeout: float) -> docker.APIClient:
        """A client of its own for a long call: its read timeout outlasts the call, and closing
        it cancels the call on the engine. It reuses the negotiated API version (no /version
        round trip on every exec)."""
        return docker.APIClient(
            **self._connection, version=self.api.api_version, timeout=int(timeout)
        )

    @_transient_retry()
    def _ping(self) -> None:
        self.client.ping()

    def _finish_removals(self) -> None:
        pending, self._removals = self._removals, []
        wait(pending, timeout=60)

    def close(self) -> None:
        self._finish_removals()
        self._remover.shutdown(wait=False)
        with contextlib.suppress(Exception):
            self.client.close()
        self._close_tunnel()

    # ---- facts ---------------------------------------------------------------------------

    def facts(self) -> EngineFacts:
        return EngineFacts(
            ncpu=self.ncpu, arch=self.arch, storage_quota=self.storage_quota(), source="engine"
        )

    def storage_quota(self) -> bool:
        """Whether `--storage-opt size` works here (the btrfs driver with quotas, or overlay2
        on XFS with pquota): probed once by creating, never starting, a container of an empty
        image."""
        if self._quota is not None:
            return self._quota
        with engine_errors("probing the storage quota"):
            if self.image(PROBE_IMAGE) is None:
                empty = io.BytesIO()
                with tarfile.open(fileobj=empty, mode="w"):
                    pass
                self.api.import_image_from_data(
                    empty.getvalue(), repository=PROBE_IMAGE.split(":", maxsplit=1)[0], tag="empty"
                )
            try:
                probe = self.api.create_container(
                    PROBE_IMAGE,
                    command=["true"],
                    labels={LABEL_RUNNER: "1", "org.selfbench.kind": "probe"},
                    host_config=self.api.create_host_config(storage_opt={"size": "64M"}),
                )
            except APIError as exc:
                log.info("storage quota unavailable: %s", exc.explanation)
                self._quota = False
            else:
                self._quota = True
                with contextlib.suppress(APIError, NotFound):
                    self.api.remove_container(probe["Id"], force=True)
        return bool(self._quota)

    # ---- images --------------------------------------------------------------------------

    def image(self, ref: str) -> ImageInfo | None:
        with engine_errors(f"inspecting image {ref}"):
            try:
                data = self.api.inspect_image(ref)  # type: ignore[no-untyped-call]
            except (ImageNotFound, NotFound):
                return None
        labels = (data.get("Config") or {}).get("Labels") or {}
        return ImageInfo(
            id=str(data["Id"]),
            labels=dict(labels),
            repo_digests=tuple(data.get("RepoDigests") or ()),
            repo_tags=tuple(data.get("RepoTags") or ()),
        )

    def pull(self, ref: str) -> ImageInfo:
        with engine_errors(f"pulling {ref}"):
            self._pull(ref)
        found = self.image(ref)
        if found is None:
            raise EngineError(f"{ref} was pulled but cannot be found")
        return found

    @_transient_retry()
    def _pull(self, ref: str) -> None:
        name = ref.rsplit("/", 1)[-1]
        repository, tag = ref.rsplit(":", 1) if ":" in name and "@" not in ref else (ref, None)
        self.client.images.pull(repository, tag=tag or ("latest" if "@" not in ref else None))

    def remove_image(self, ref: str) -> None:
        with contextlib.suppress(NotFound, ImageNotFound), engine_errors(f"removing {ref}"):
            self.api.remove_image(ref, force=True, noprune=False)

    def build(
        self, request: BuildRequest, log_path: Path, *, limit: int, on_line: Callable[[str], None]
    ) -> BuildOutcome:
        """Build `context/Dockerfile`, streaming its output to a capped log.

        The stream is consumed in a worker thread; this thread waits for the deadline. On
        expiry (or Ctrl-C) the running step's container is killed, which ends the build on the
        engine at once, and the client is closed."""
        started = time.monotonic()
        wall_started = time.time()
        api = self._new_api(request.timeout_seconds + BUILD_GRACE_SECONDS)
        stream_state = BuildStream()
        done = threading.Event()
        failure: list[BaseException] = []
        capped = CappedLog(log_path, limit, append=True)

        def consume() -> None:
            try:
                chunks = api.build(
                    path=str(request.context),
                    tag=request.tag,
                    buildargs=dict(request.buildargs),
                    labels=dict(request.labels),
                    rm=True,
                    forcerm=True,
                    decode=True,
                    container_limits=cast(
                        Any,
                        {
                            "memory": request.memory_mb * 1024 * 1024,
                            "memswap": request.memory_mb * 1024 * 1024,  # no extra swap
                            "cpusetcpus": request.cpuset,
                        },
                    ),
                    timeout=int(request.timeout_seconds) + BUILD_GRACE_SECONDS,
                    use_config_proxy=False,
                    network_mode=request.network,
                )
                for chunk in chunks:
                    for line in stream_state.feed(chunk):
                        capped.write(line.encode("utf-8", "replace") + b"\n")
                        on_line(line)
                for line in stream_state.finish():
                    capped.write(line.encode("utf-8", "replace") + b"\n")
            except BaseException as exc:  # handed to the waiting thread
                failure.append(exc)
            finally:
                done.set()

        worker = threading.Thread(target=consume, name=f"build-{request.tag}", daemon=True)
        worker.start()
        finished = False
        try:
            finished = done.wait(request.timeout_seconds)
        finally:
            if not done.is_set():
                # Closing the client alone lets the engine notice only when its read times
                # out; killing the step's container ends the build now.
                self._kill_build_step(stream_state.running)
                done.wait(30)
            api.close()
            worker.join(5)
            outcome_truncation = capped.close()
        outcome = BuildOutcome(
            ok=False,
            seconds=time.monotonic() - started,
            failed_step=stream_state.step,
            step_number=stream_state.step_number,
            tail=stream_state.tail[-20:],
            cached_steps=stream_state.cached_steps,
            total_steps=stream_state.total_steps,
            last_layer=stream_state.last_layer,
            exit_code=stream_state.exit_code,
            truncation=outcome_truncation,
        )
        if not finished:
            outcome.timed_out = True
            outcome.error = f"build timed out after {int(request.timeout_seconds)}s"
            return outcome
        if failure:
            exc = failure[0]
            if isinstance(exc, APIError):
                outcome.error = f"engine refused the build: {_explain(exc)}"
                return outcome
            if isinstance(
                exc, (DockerException, *TRANSIENT, requests.exceptions.RequestException, OSError)
            ):
                # OSError: a transport that breaks under the stream (a pipe, a reset socket).
                raise EngineError(f"Docker engine failed during the build: {_explain(exc)}")
            raise exc
        if stream_state.succeeded:
            info = self.image(request.tag)
            outcome.image_id = info.id if info else stream_state.image_id
            outcome.ok = True
            outcome.failed_step = None
            return outcome
        outcome.error = stream_state.failure()
        if stream_state.exit_code in (137, 143) and stream_state.running:
            # Killed by a signal: the memory limit, the task itself, or an engine going down.
            # The engine's own record and its answer tell them apart.
            outcome.engine_lost = not self._answers()
            if not outcome.engine_lost:
                outcome.oom_killed = self._oom_recorded(stream_state.running[-1], wall_started)
        return outcome

    def _answers(self) -> bool:
        try:
            api = docker.APIClient(**self._connection, version=self.api.api_version, timeout=5)
        except DockerException:
            return False
        try:
            api.ping()
            return True
        except (DockerException, *TRANSIENT, requests.exceptions.RequestException, OSError):
            return False
        finally:
            api.close()

    def _oom_recorded(self, container: str, since: float) -> bool | None:
        """Did the engine record an OOM kill of this (build step) container?"""
        try:
            events = self.api.events(
                since=int(since) - 1,
                until=int(time.time()) + 1,
                filters={"container": container, "event": "oom"},
                decode=True,
            )
            return any(True for _ in events)
        except (DockerException, *TRANSIENT, requests.exceptions.RequestException, OSError):
            return None

    def _kill_build_step(self, running: Sequence[str]) -> None:
        if not running:
            return
        with contextlib.suppress(DockerException, *TRANSIENT):
            self.api.kill(running[-1])

    # ---- containers ----------------------------------------------------------------------

    @contextlib.contextmanager
    def container(
        self,
        plan: ContainerPlan,
        *,
        env: Mapping[str, str],
        keep: bool,
        files: Sequence[FileToPut] = (),
    ) -> Iterator[DockerContainer]:
        container = self._create(plan, env)
        try:
            # Files known before the start go in before it: the engine copies into a created
            # container while it starts others, not on the critical path after the start.
            for file in files:
                container.put_file(file.directory, file.name, file.data, mode=file.mode)
            try:
                with engine_errors(f"starting container {plan.name}"):
                    self.api.start(container.id)
            except EngineError as exc:
                if container.storage is StorageLimit.QUOTA and "quota exceeded" in exc.message:
                    # The image alone is larger than the task's storage_mb: the task's fault.
                    raise TaskFailedError(
                        f"storage limit exceeded ({plan.limits.storage_mb} MB is less than the "
                        "image itself): the engine's quota refused the container"
                    ) from None
                raise
            container.start_watchdog()
            yield container
        finally:
            container.stop_watchdog()
            if not keep:
                # Removal goes on in the background; cleanup() and close() wait for it.
                self._removals.append(self._remover.submit(container.remove))

    def _create(self, plan: ContainerPlan, env: Mapping[str, str]) -> DockerContainer:
        limits = plan.limits
        host: dict[str, Any] = {
            "nano_cpus": int(limits.cpus * 1e9),
            "mem_limit": limits.memory_mb * 1024 * 1024,
            "memswap_limit": limits.memory_mb * 1024 * 1024,
            "pids_limit": limits.pids,
            "network_mode": plan.network,
        }
        if limits.cpuset:
            host["cpuset_cpus"] = limits.cpuset
        storage = plan.storage
        if storage is StorageLimit.AUTO:
            storage = StorageLimit.QUOTA if self.storage_quota() else StorageLimit.WATCHDOG
        if storage is StorageLimit.QUOTA:
            host["storage_opt"] = {"size": f"{limits.storage_mb}M"}
        with engine_errors(f"creating container {plan.name} from {plan.image}"):
            created = self.api.create_container(
                plan.image,
                command=list(plan.command),
                name=plan.name,
                labels=dict(plan.labels),
                environment={**plan.env, **env},
                working_dir=plan.workdir,
                detach=True,
                stdin_open=False,
                tty=False,
                host_config=self.api.create_host_config(**host),
            )
        return DockerContainer(self, str(created["Id"]), plan, storage)

    # ---- services --------------------------------------------------------------------------

    @contextlib.contextmanager
    def network(self, name: str, *, labels: Mapping[str, str], keep: bool) -> Iterator[str]:
        """A gate's own network. Internal: its services reach nothing beyond it."""
        with engine_errors(f"creating network {name}"):
            created = self.api.create_network(
                name, driver="bridge", internal=True, labels=dict(labels), check_duplicate=True
            )
        try:
            yield str(created["Id"])
        finally:
            if not keep:
                self._remove_network(str(created["Id"]))

    def _remove_network(self, network: str) -> None:
        with contextlib.suppress(DockerException, *TRANSIENT):
            for item in self.api.inspect_network(network).get("Containers") or {}:
                with contextlib.suppress(DockerException, *TRANSIENT):
                    self.api.disconnect_container_from_network(item, network, force=True)
            self.api.remove_network(network)

    @contextlib.contextmanager
    def service(self, plan: ServicePlan, *, network: str, keep: bool) -> Iterator[DockerService]:
        check = plan.healthcheck
        seconds = 1_000_000_000
        with engine_errors(f"starting service {plan.name} ({plan.image})"):
            created = self.api.create_container(
                plan.image,
                command=list(plan.command) if plan.command else None,
                name=plan.container,
                labels=dict(plan.labels),
                environment=dict(plan.env),
                detach=True,
                healthcheck={
                    "test": list(check.test),
                    "interval": int(check.interval_seconds * seconds),
                    "timeout": int(check.timeout_seconds * seconds),
                    "retries": check.retries,
                    "start_period": int(check.start_period_seconds * seconds),
                },
                host_config=self.api.create_host_config(
                    nano_cpus=int(plan.limits.cpus * 1e9),
                    mem_limit=plan.limits.memory_mb * 1024 * 1024,
                    pids_limit=plan.limits.pids,
                    network_mode=network,
                ),
                # docker-py takes {network: endpoint}; types-docker says otherwise.
                networking_config=self.api.create_networking_config(
                    {network: self.api.create_endpoint_config(aliases=[plan.name])}  # type: ignore[arg-type]
                ),
            )
        service = DockerService(self, str(created["Id"]), plan.name)
        try:
            with engine_errors(f"starting service {plan.name} ({plan.image})"):
                self.api.start(service.id)
            yield service
        finally:
            if not keep:
                with contextlib.suppress(DockerException, *TRANSIENT):
                    self.api.remove_container(service.id, force=True, v=True)

    def cleanup(self, labels: Mapping[str, str], *, images: bool = False) -> int:
        """Remove every container, network and volume (and image) carrying `labels`."""
        self._finish_removals()
        filters: dict[str, Any] = {"label": [f"{key}={value}" for key, value in labels.items()]}
        removed = 0
        with engine_errors("cleaning up"):
            for item in self.api.containers(all=True, filters=filters):
                with contextlib.suppress(NotFound, APIError):
                    self.api.remove_container(item["Id"], force=True, v=True)
                    removed += 1
            for network in self.api.networks(filters=filters):
                with contextlib.suppress(NotFound, APIError):
                    self.api.remove_network(network["Id"])
                    removed += 1
            for volume in (self.api.volumes(filters=filters) or {}).get("Volumes") or []:
                with contextlib.suppress(NotFound, APIError):
                    self.api.remove_volume(volume["Name"], force=True)
                    removed += 1
            if images:
                for image in self.api.images(filters=filters):
                    with contextlib.suppress(NotFound, APIError):
                        self.api.remove_image(image["Id"], force=True)
                        removed += 1
        return removed

    def task_images(self) -> list[TaskImage]:
        """The runner's task images (agent and verifier, by label), each with its own layers
        (those above the base it was built from) and whether a container uses it."""
        with engine_errors("listing the runner's images"):
            images = self.api.images(filters={"label": [f"{LABEL_RUNNER}=1"]})
            containers = self.api.containers(all=True)
        used = {str(c.get("ImageID") or "") for c in containers}
        found = []
        for item in images:
            labels = item.get("Labels") or {}
            if labels.get(LABEL_KIND) not in ("agent", "verifier"):
                continue
            image_id = str(item["Id"])
            base_id = labels.get(LABEL_FROM_ID)
            layers: list[tuple[str, int]] = []
            with engine_errors(f"reading the history of {image_id[:19]}"):
                history = self.api.history(image_id)  # type: ignore[no-untyped-call]
            for index, entry in enumerate(history):
                layer = str(entry.get("Id") or "")
                if base_id and layer == base_id:
                    break
                key = layer if layer and layer != "<missing>" else f"{image_id}#{index}"
                layers.append((key, max(0, int(entry.get("Size") or 0))))
            found.append(
                TaskImage(
                    id=image_id,
                    tags=tuple(item.get("RepoTags") or ()),
                    layers=tuple(layers),
                    created=float(item.get("Created") or 0),
                    in_use=image_id in used or int(item.get("Containers") or 0) > 0,
                )
            )
        return found

    def remove_task_image(self, image: TaskImage) -> bool:
        """Untag (and so delete) a task image; never forced, so an image a container started
        meanwhile stays."""
        try:
            for ref in image.tags or (image.id,):
                with contextlib.suppress(NotFound):
                    self.api.remove_image(ref, force=False)
            return True
        except APIError as exc:
            log.info("image %s not removed: %s", image.id[:19], _explain(exc))
            return False

    def reap_stale(self) -> int:
        """Remove containers left by runner processes of this host that no longer exist (a
        runner killed with SIGKILL cannot clean up after itself)."""
        removed = 0
        with engine_errors("looking for stale containers"):
            for item in self.api.containers(all=True, filters={"label": f"{LABEL_RUNNER}=1"}):
                owner = (item.get("Labels") or {}).get(LABEL_OWNER)
                if owner and not _owner_alive(owner):
                    with contextlib.suppress(NotFound, APIError):
                        self.api.remove_container(item["Id"], force=True, v=True)
                        removed += 1
        return removed


@dataclass(frozen=True, kw_only=True)
class TaskImage:
    id: str
    tags: tuple[str, ...]
    layers: tuple[tuple[str, int], ...]  # (layer id, bytes) above the image's base
    created: float
    in_use: bool


class DockerService:
    def __init__(self, engine: DockerEngine, container_id: str, name: str) -> None:
        self.engine = engine
        self.id = container_id
        self.name = name

    def health(self) -> str:
        try:
            state = self.engine.api.inspect_container(self.id)["State"]
        except (DockerException, *TRANSIENT):
            return "exited"
        if not state.get("Running"):
            return "exited"
        return str((state.get("Health") or {}).get("Status") or "starting")

    def save_logs(self, path: Path, *, limit: int) -> list[str]:
        capped = CappedLog(path, limit)
        try:
            for chunk in self.engine.api.logs(self.id, stream=True, follow=False, timestamps=False):
                capped.write(chunk)
        except (DockerException, *TRANSIENT):
            pass
        finally:
            capped.close()
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return lines[-10:]


class DockerContainer:
    def __init__(
        self, engine: DockerEngine, container_id: str, plan: ContainerPlan, storage: StorageLimit
    ) -> None:
        self.engine = engine
        self.api = engine.api
        self.id = container_id
        self.name = plan.name
        self.plan = plan
        self.storage = storage
        self.storage_mechanism = storage.value
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.storage_exceeded_mb: int | None = None
        self.timed_out = False

    def connect(self, network: str) -> None:
        with engine_errors(f"connecting {self.name} to its services' network"):
            self.api.connect_container_to_network(self.id, network)

    # ---- deadlines and the storage watchdog ----------------------------------------------

    def kill(self) -> None:
        with contextlib.suppress(DockerException, *TRANSIENT):
            self.api.kill(self.id)

    def start_watchdog(self) -> None:
        if self.storage is not StorageLimit.WATCHDOG:
            return
        self._watchdog = threading.Thread(
            target=self._watch, name=f"storage-{self.name}", daemon=True
        )
        self._watchdog.start()

    def stop_watchdog(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(10)

    def _watch(self) -> None:
        # The first sample is at once: an image larger than the limit is caught before any
        # command runs; exec() samples once more after each command, so a short gate cannot
        # slip between two samples.
        while True:
            if self._over_limit():
                self.kill()
                return
            if self._stop.wait(STORAGE_SAMPLE_SECONDS):
                return

    def _over_limit(self) -> bool:
        limit = self.plan.limits.storage_mb
        used = self.storage_used_mb()
        if used is not None and used > limit:
            self.storage_exceeded_mb = used
            log.info("%s: filesystem %d MB > %d MB", self.name, used, limit)
            return True
        return False

    def storage_used_mb(self) -> int | None:
        """The container's whole filesystem (image layers and writes), in MB: storage_mb
        bounds what a sandbox's disk would hold, and a btrfs quota counts the same way."""
        try:
            items = self.api.containers(all=True, size=True, filters={"id": self.id})
        except (DockerException, *TRANSIENT):
            return None
        if not items:
            return None
        return int(items[0].get("SizeRootFs") or 0) // (1024 * 1024)

    # ---- commands ------------------------------------------------------------------------

    def exec(self, step: ExecStep, log_path: Path, *, limit: int) -> ExecOutcome:
        """Run `step` in the running container, output to a capped log, within its deadline
        (the runner kills the container when it passes)."""
        started = time.monotonic()
        api = self.engine._new_api(step.timeout_seconds + BUILD_GRACE_SECONDS)
        capped = CappedLog(log_path, limit, append=True)
        exit_code: list[int | None] = []
        never_started: list[str] = []
        failure: list[BaseException] = []
        done = threading.Event()
        env = {**self.plan.env, **step.env}

        def consume() -> None:
            try:
                exec_id = api.exec_create(
                    self.id,
                    list(step.argv),
                    user=step.user,
                    environment=env,
                    workdir=step.workdir,
                    stdout=True,
                    stderr=True,
                )["Id"]
                first = b""
                for chunk in api.exec_start(exec_id, stream=True):
                    capped.write(chunk)
                    if len(first) < 1024:
                        first += chunk[: 1024 - len(first)]
                state = api.exec_inspect(exec_id)
                code = state.get("ExitCode")
                exit_code.append(None if code is None else int(code))
                if not state.get("Pid") and code in (126, 127):
                    # The runtime could not start the command (no such user or file): the
                    # engine's failure, never the command's exit status.
                    never_started.append(
                        first.decode(errors="replace").strip()
                        or f"exit {code}: the runtime could not start it (a missing user or "
                        "executable?)"
                    )
            except BaseException as exc:  # handed to the waiting thread
                failure.append(exc)
            finally:
                done.set()

        worker = threading.Thread(target=consume, name=f"exec-{self.name}", daemon=True)
        worker.start()
        try:
            if not done.wait(step.timeout_seconds):
                self.timed_out = True
                self.kill()
                done.wait(30)
        finally:
            if not done.is_set():
                self.kill()
            api.close()
            worker.join(5)
            truncation = capped.close()
        timed_out = self.timed_out
        # When the runner itself killed the container (a deadline, the storage watchdog), that
        # is what happened, whatever the exec call then reported.
        killed_by_runner = timed_out or self.storage_exceeded_mb is not None
        if never_started and not killed_by_runner:
            raise EngineError(
                f"cannot start {step.name} ({step.argv[0]} as {step.user}) in {self.name}: "
                f"{never_started[0]}"
            )
        if failure and not killed_by_runner:
            exc = failure[0]
            if isinstance(exc, (DockerException, *TRANSIENT, requests.exceptions.RequestException)):
                raise EngineError(f"running {step.name} in {self.name}: {_explain(exc)}")
            raise exc
        outcome = ExecOutcome(
            exit_code=exit_code[0] if exit_code else None,
            seconds=time.monotonic() - started,
            timed_out=timed_out,
            storage_exceeded_mb=self.storage_exceeded_mb,
            truncation=truncation,
        )
        if not timed_out and self.storage_exceeded_mb is None:
            if outcome.exit_code != 0:
                # What the limits did matters only when the command failed.
                outcome.limits = self.limit_stats()
                outcome.oom_killed = outcome.limits.oom_kills > 0
            if self.storage is StorageLimit.WATCHDOG and self._over_limit():
                outcome.storage_exceeded_mb = self.storage_exceeded_mb
            if self.storage is StorageLimit.QUOTA:
                used = self.storage_used_mb()
                # A quota refuses writes instead of killing: at the limit, say so.
                if used is not None and used >= self.plan.limits.storage_mb * 0.98:
                    outcome.storage_exceeded_mb = used
        return outcome

    def limit_stats(self) -> LimitStats:
        """How often the pids limit refused a fork and how many processes the OOM killer took,
        from the container's cgroup (v1 and v2 spellings)."""
        script = (
            "for f in /sys/fs/cgroup/pids.events /sys/fs/cgroup/pids/pids.events; do "
            '[ -r "$f" ] && { echo "pids $(sed -n "s/^max //p" "$f")"; break; }; done; '
            "for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do "
            '[ -r "$f" ] && { echo "oom $(sed -n "s/^oom_kill //p" "$f")"; break; }; done'
        )
        values: dict[str, int] = {}
        # The reading is a process in the container: right after a fork bomb the pids limit can
        # still refuse it while the bomb's children live on (seen: the reading failed under load
        # while 31 `sleep 5` held every pid), so it is tried again for a few seconds.
        for pause in (0.0, 0.2, 0.5, 1.0, 2.0, 3.0):
            time.sleep(pause)
            try:
                exec_id = self.api.exec_create(self.id, ["sh", "-c", script], user="root")["Id"]
                output = self.api.exec_start(exec_id).decode(errors="replace")
            except (DockerException, *TRANSIENT):
                output = ""
            values = dict(
                (parts[0], int(parts[1]))
                for parts in (line.split() for line in output.splitlines())
                if len(parts) == 2 and parts[1].isdigit()
            )
            if values or not self.running():
                break
        return LimitStats(pids_limit_hits=values.get("pids", -1), oom_kills=values.get("oom", -1))

    # ---- files ---------------------------------------------------------------------------

    def put_file(self, directory: str, name: str, data: bytes, *, mode: int = 0o644) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(data))
        with engine_errors(f"copying {name} into {self.name}"):
            if not self.api.put_archive(self.id, directory, buffer.getvalue()):
                raise EngineError(f"cannot copy {name} into {directory} of {self.name}")

    def put_directory(self, source: Path, destination: str) -> None:
        with tempfile.TemporaryFile() as handle:
            with tarfile.open(fileobj=handle, mode="w") as archive:
                archive.add(source, arcname=PurePosixPath(destination).name)
            handle.seek(0)
            parent = str(PurePosixPath(destination).parent)
            with engine_errors(f"copying {source} into {self.name}"):
                if not self.api.put_archive(self.id, parent, handle):
                    raise EngineError(f"cannot copy {source} into {destination}")

    def _archive(self, path: str) -> Any:
        try:
            stream, _ = self.api.get_archive(self.id, path)
        except NotFound:
            return None
        return stream

    def get_file(self, path: str, *, limit: int) -> bytes | None:
        """A regular file's bytes, or None when absent. More than `limit` bytes is an error."""
        with engine_errors(f"copying {path} out of {self.name}"), tempfile.TemporaryFile() as tmp:
            stream = self._archive(path)
            if stream is None:
                return None
            size = 0
            for chunk in stream:
                size += len(chunk)
                if size > limit + 1024 * 1024:
                    raise EngineError(f"{path} is larger than {limit} bytes")
                tmp.write(chunk)
            tmp.seek(0)
            with tarfile.open(fileobj=tmp, mode="r|") as tar:
                for member in tar:
                    if member.isfile() and member.size <= limit:
                        handle = tar.extractfile(member)
                        return handle.read() if handle else None
                    if member.isfile():
                        raise EngineError(f"{path} is larger than {limit} bytes")
        return None

    def copy_out(self, path: str, destination: Path, *, limit: int) -> list[Truncation] | None:
        """Copy a directory or file out into `destination`, each file capped at `limit` bytes.
        None when `path` is absent."""
        with engine_errors(f"copying {path} out of {self.name}"), tempfile.TemporaryFile() as tmp:
            stream = self._archive(path)
            if stream is None:
                return None
            for chunk in stream:
                tmp.write(chunk)
            tmp.seek(0)
            return extract_capped(tmp, destination, limit=limit)

    # ---- disposal ------------------------------------------------------------------------

    def remove(self) -> None:
        with contextlib.suppress(NotFound, APIError, *TRANSIENT):
            self.api.remove_container(self.id, force=True, v=True)

    def running(self) -> bool:
        try:
            return bool(self.api.inspect_container(self.id)["State"]["Running"])
        except (DockerException, *TRANSIENT):
            return False

    def enter_hint(self) -> str:
        """How a person gets a shell in this container's state."""
        if self.running():
            return f"docker exec -it {self.name} bash"
        # Starting an exited gate container would rerun its command: open its state instead.
        return f"docker run -it --rm --user root $(docker commit {self.name}) bash"
