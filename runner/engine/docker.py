"""The engine package's centre: a connected Docker engine.

`Engine` and `Container` (runner.plan.runtime) are the interface the executor receives (tests
pass a fake); `DockerEngine` implements it with docker-py's low-level client, with its builds
in runner.engine.build and its containers in runner.engine.containers. Every docker.errors.* and
connection error is wrapped into EngineError. Deadlines are the runner's own: when one passes,
the runner kills the container and says so (an exit code 137 alone proves nothing). Everything
created carries the run's labels; `with engine.container(plan) as c:` removes its container on
every path (unless kept on purpose).
"""

from __future__ import annotations

import contextlib
import io
import logging
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound, NotFound

from runner.base.errors import EngineError, InfrastructureError, StorageRefusedError
from runner.engine.build import ImageBuild
from runner.engine.calls import (
    ENGINE_FAILURES,
    Connection,
    client_arguments,
    engine_errors,
    explain,
    transient_retry,
)
from runner.engine.containers import DockerContainer
from runner.engine.hosts import Endpoint, SshTunnel
from runner.engine.hosts import resolve as resolve_endpoint
from runner.engine.images import TaskImage, remove_task_image, task_images
from runner.engine.services import (
    DockerService,
    gate_network,
    reap_stale,
    remove_labelled,
    service_container,
)
from runner.engine.steps import SteppedBuild
from runner.model.settings import StorageLimit, docker_environment
from runner.model.toolchains import Arch
from runner.plan.dockerfile import DockerfileError, split
from runner.plan.images import resolve_storage
from runner.plan.labels import runner_labels
from runner.plan.runtime import ArchiveToPut, BuildOutcome, BuildRequest, ImageInfo, ToPut
from runner.plan.types import ContainerPlan, EngineFacts, ServicePlan

log = logging.getLogger(__name__)

PROBE_IMAGE = "selfbench/probe:empty"
# A background container's CPU weight against the engine's default 1024: while a gate that
# decides the verdict competes for the CPU, a probe or exploit run gets a fifth of it.
BACKGROUND_CPU_SHARES = 256


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
            self._connection: dict[str, Any] = client_arguments(self.endpoint, env)
            url = str(self._connection.get("base_url", ""))
            if url.startswith("ssh://"):
                self._tunnel = SshTunnel(url)
                self._connection["base_url"] = self._tunnel.open()
            self.client = docker.DockerClient(**self._connection, timeout=timeout)
            self._ping()
            info = self.client.info()
        except ENGINE_FAILURES as exc:
            self._close_tunnel()
            raise InfrastructureError(
                f"no Docker engine answers at {where} ({explain(exc)}); start one "
                "(scripts/start-docker.sh does on Debian) or set DOCKER_HOST"
            ) from None
        except BaseException:
            self._close_tunnel()
            raise
        self.api = self.client.api
        self.connection = Connection(self._connection, self.api.api_version)
        self.ncpu = int(info.get("NCPU") or 1)
        self.memory_mb = int(info.get("MemTotal") or 0) // (1024 * 1024) or None
        self.arch: Arch = "arm64" if info.get("Architecture") in ("aarch64", "arm64") else "amd64"
        self.storage_driver = str(info.get("Driver", ""))
        self._quota: bool | None = None
        self._remover = ThreadPoolExecutor(max_workers=2, thread_name_prefix="remove")
        self._removals: list[Future[None]] = []

    def _close_tunnel(self) -> None:
        if self._tunnel is not None:
            self._tunnel.close()
            self._tunnel = None

    @transient_retry()
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
            ncpu=self.ncpu,
            arch=self.arch,
            storage_quota=self.storage_quota(),
            source="engine",
            memory_mb=self.memory_mb,
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
                    labels=runner_labels(kind="probe"),
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
            parent=str(data.get("Parent") or ""),
        )

    def pull(self, ref: str) -> ImageInfo:
        with engine_errors(f"pulling {ref}"):
            self._pull(ref)
        found = self.image(ref)
        if found is None:
            raise EngineError(f"{ref} was pulled but cannot be found")
        return found

    @transient_retry()
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
        """Build `context/Dockerfile`, streaming its output to a capped log, within the
        request's deadline (runner.engine.build)."""
        if request.steps is not None:
            try:
                stepped = split((request.context / "Dockerfile").read_text())
            except (OSError, DockerfileError) as exc:
                raise InfrastructureError(
                    f"cannot read {request.context}/Dockerfile: {exc}"
                ) from None
            if stepped.limited:
                return SteppedBuild(
                    self.connection,
                    self.api,
                    request,
                    stepped,
                    image=self.image,
                    open_container=self._step_container,
                ).run(log_path, limit=limit, on_line=on_line)
        build = ImageBuild(self.connection, self.api, request, image=self.image)
        return build.run(log_path, limit=limit, on_line=on_line)

    def _step_container(self, plan: ContainerPlan) -> AbstractContextManager[DockerContainer]:
        return self.container(plan, env={}, keep=False)

    # ---- containers ----------------------------------------------------------------------

    @contextlib.contextmanager
    def container(
        self,
        plan: ContainerPlan,
        *,
        env: Mapping[str, str],
        keep: bool,
        files: Sequence[ToPut] = (),
    ) -> Iterator[DockerContainer]:
        container = self._create(plan, env)
        try:
            # Files known before the start go in before it: the engine copies into a created
            # container while it starts others, not on the critical path after the start.
            for archive in (f for f in files if isinstance(f, ArchiveToPut)):
                container.put_archive(archive.directory, archive.data)
            container.put_files(
                [
                    (f.directory, f.name, f.data, f.mode)
                    for f in files
                    if not isinstance(f, ArchiveToPut)
                ]
            )
            try:
                with engine_errors(f"starting container {plan.name}"):
                    self.api.start(container.id)
            except EngineError as exc:
                if container.storage is StorageLimit.QUOTA:
                    self._refused_by_quota(plan, exc)
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
            # The engine's init (tini as docker-init) is PID 1 and reaps what a step orphans. The
            # plan's command (a sleep) reaps nothing: measured on 20.10, a step that left 28
            # background sleeps behind kept 28 zombies, each still counted by pids.current, so
            # the next exec could not start ("read init-p: connection reset by peer") and a
            # suite that orphans processes would run into the task's pids limit.
            "init": True,
        }
        if limits.cpuset:
            host["cpuset_cpus"] = limits.cpuset
        if plan.background:
            host["cpu_shares"] = BACKGROUND_CPU_SHARES
        storage = plan.storage
        if storage is StorageLimit.AUTO:
            # A plan made from this engine's facts is resolved already; one made without (a
            # test's) is resolved here by the same rule, probing the engine only then.
            storage = resolve_storage(storage, self.facts())
        if storage is StorageLimit.QUOTA:
            host["storage_opt"] = {"size": f"{limits.storage_mb}M"}
        try:
            created = self._create_container(plan, env, host)
        except EngineError as exc:
            if storage is StorageLimit.QUOTA:
                self._refused_by_quota(plan, exc)
            raise
        return DockerContainer(self.connection, self.api, str(created["Id"]), plan, storage)

    def _create_container(
        self, plan: ContainerPlan, env: Mapping[str, str], host: dict[str, Any]
    ) -> dict[str, Any]:
        with engine_errors(f"creating container {plan.name} from {plan.image}"):
            created: dict[str, Any] = self.api.create_container(
                plan.image,
                command=list(plan.command),
                entrypoint=plan.entrypoint,
                name=plan.name,
                labels=dict(plan.labels),
                environment={**plan.env, **env},
                working_dir=plan.workdir,
                detach=True,
                stdin_open=False,
                tty=False,
                host_config=self.api.create_host_config(**host),
            )
        return created

    def _refused_by_quota(self, plan: ContainerPlan, exc: EngineError) -> None:
        """Raise StorageRefusedError when the quota refused a container (EDQUOT, at its creation
        on btrfs, where moby sets the qgroup limit of its snapshot, or at its start) because
        its image alone holds the task's storage_mb: the task's fault, as the watchdog's first
        sample judges it on other engines. Anything else stays the engine's failure."""
        if "quota exceeded" not in exc.message:
            return
        with engine_errors(f"reading image {plan.image}"):
            size = int(self.api.inspect_image(plan.image).get("Size") or 0)  # type: ignore[no-untyped-call]
        image_mb = size // (1024 * 1024)
        # At the limit, as a quota's refusal is read after a command (containers.py).
        if image_mb >= plan.limits.storage_mb * 0.98:
            raise StorageRefusedError(image_mb, plan.limits.storage_mb) from None

    # ---- services --------------------------------------------------------------------------

    def network(
        self, name: str, *, labels: Mapping[str, str], keep: bool
    ) -> AbstractContextManager[str]:
        """A gate's own network. Internal: its services reach nothing beyond it."""
        return gate_network(self.api, name, labels=labels, keep=keep)

    def service(
        self, plan: ServicePlan, *, network: str, keep: bool
    ) -> AbstractContextManager[DockerService]:
        return service_container(self.api, plan, network=network, keep=keep)

    def cleanup(self, labels: Mapping[str, str], *, images: bool = False) -> int:
        """Remove every container, network and volume (and image) carrying `labels`."""
        self._finish_removals()
        return remove_labelled(self.api, labels, images=images)

    def task_images(self) -> list[TaskImage]:
        return task_images(self.api)

    def remove_task_image(self, image: TaskImage) -> bool:
        return remove_task_image(self.api, image)

    def reap_stale(self) -> int:
        """Remove containers left by runner processes of this host that no longer exist (a
        runner killed with SIGKILL cannot clean up after itself)."""
        return reap_stale(self.api)


def connect(*, environment: Mapping[str, str] | None = None, timeout: int = 120) -> DockerEngine:
    """The engine the environment names (DOCKER_HOST, DOCKER_CONTEXT, the current context), or
    the one `environment` names: the one way the layers above get an engine."""
    return DockerEngine(environment=environment, timeout=timeout)


@contextlib.contextmanager
def connected(
    *, environment: Mapping[str, str] | None = None, timeout: int = 120
) -> Iterator[DockerEngine]:
    engine = connect(environment=environment, timeout=timeout)
    try:
        yield engine
    finally:
        engine.close()
