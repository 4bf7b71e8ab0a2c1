"""The only module that talks to Docker: builds (streamed, limited, cancellable), containers
(limited, labelled, timed), file copies, cleanup by label.

Everything the runner creates carries LABEL_RUNNER and, per run, LABEL_RUN.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import re
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar, cast

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from runner.errors import InfrastructureError
from runner.toolchains import Arch

log = logging.getLogger(__name__)

LABEL_RUNNER = "org.selfbench.runner"
LABEL_RUN = "org.selfbench.run"
LABEL_TASK = "org.selfbench.task"
LABEL_KIND = "org.selfbench.kind"
LABEL_INPUTS = "org.selfbench.inputs"

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_SUCCESS = re.compile(r"^Successfully built ([0-9a-f]{12,64})\s*$")
_NONZERO = re.compile(r"returned a non-zero code: (\d+)")
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")
_RUNNING = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})\s*$")

TRANSIENT = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)


F = TypeVar("F", bound=Callable[..., Any])


def _transient_retry() -> Callable[[F], F]:
    """Retry only what the engine connection drops, never what a command did."""
    decorator = retry(
        retry=retry_if_exception_type(TRANSIENT),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=1, max=10),
        reraise=True,
    )
    return cast(Callable[[F], F], decorator)


@dataclass(frozen=True, kw_only=True)
class Limits:
    cpus: float
    memory_mb: int
    storage_mb: int
    pids: int = 4096


@dataclass(kw_only=True)
class BuildResult:
    ok: bool
    image_id: str | None = None
    seconds: float = 0.0
    failed_step: str | None = None
    exit_code: int | None = None
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    timed_out: bool = False
    # The task's own command failed (red) rather than the engine or a download (infrastructure).
    task_at_fault: bool = False
    cached_steps: int = 0
    total_steps: int = 0
    # The image id of the last step that completed: a shell there is where to debug.
    last_layer: str | None = None


@dataclass(kw_only=True)
class RunResult:
    exit_code: int | None
    seconds: float
    timed_out: bool = False
    oom_killed: bool = False


class Engine:
    """A connected Docker engine, with the labels of one run."""

    def __init__(self, run_id: str, *, timeout: int = 120) -> None:
        self.run_id = run_id
        try:
            self.client = docker.from_env(timeout=timeout)
            self._ping()
        except (DockerException, *TRANSIENT) as exc:
            raise InfrastructureError(
                f"no Docker engine answers ({exc}); start one (scripts/start-docker.sh does on "
                "Debian) or set DOCKER_HOST"
            ) from None
        self.api = self.client.api
        info = self.client.info()
        self.ncpu = int(info.get("NCPU") or 1)
        self.arch: Arch = "arm64" if info.get("Architecture") in ("aarch64", "arm64") else "amd64"
        self.storage_driver = str(info.get("Driver", ""))
        self._storage_supported: bool | None = None

    @_transient_retry()
    def _ping(self) -> None:
        self.client.ping()

    def container_name(self, task_id: str, hint: str) -> str:
        """`selfbench-<task>-<hint>-<run>`: findable in `docker ps`, unique per run."""
        safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"{task_id}-{hint}")
        return f"selfbench-{safe}-{self.run_id.rsplit('-', 1)[-1]}"

    def labels(self, kind: str, task_id: str | None = None, **extra: str) -> dict[str, str]:
        labels = {LABEL_RUNNER: "1", LABEL_RUN: self.run_id, LABEL_KIND: kind}
        if task_id:
            labels[LABEL_TASK] = task_id
        labels.update(extra)
        return labels

    # ---- images -------------------------------------------------------------------------

    def image_id(self, ref: str) -> str | None:
        try:
            image = self.client.images.get(ref)
        except ImageNotFound:
            return None
        except APIError as exc:
            raise InfrastructureError(f"cannot inspect image {ref}: {exc.explanation}") from None
        return str(image.id)

    def ensure_base_image(self, ref: str, *, hint: str) -> str:
        found = self.image_id(ref)
        if found:
            return found
        try:
            self._pull(ref)
        except (APIError, *TRANSIENT) as exc:
            detail = getattr(exc, "explanation", None) or str(exc)
            raise InfrastructureError(
                f"base image {ref} is not present and cannot be pulled ({detail}); {hint}"
            ) from None
        found = self.image_id(ref)
        if not found:
            raise InfrastructureError(f"base image {ref} was pulled but cannot be found; {hint}")
        return found

    @_transient_retry()
    def _pull(self, ref: str) -> None:
        repository, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
        self.client.images.pull(repository, tag=tag or "latest")

    def build(
        self,
        *,
        context: Path,
        tag: str,
        buildargs: Mapping[str, str],
        labels: Mapping[str, str],
        limits: Limits,
        timeout: float,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        task_steps: Sequence[str] = (),
        network_mode: str | None = None,
    ) -> BuildResult:
        """Build `context/Dockerfile` streaming its output to `log_path`.

        A chunk with `error`, or a stream that ends without an image id, is a failed build.
        On timeout the connection is closed, which cancels the build on the engine.
        `task_steps` are substrings of the instructions whose failure is the task's fault.
        """
        result = BuildResult(ok=False)
        started = time.monotonic()
        cpus = max(1, min(self.ncpu, math.ceil(limits.cpus)))
        container_limits = {
            "memory": limits.memory_mb * 1024 * 1024,
            "memswap": limits.memory_mb * 1024 * 1024,  # no extra swap
            "cpusetcpus": f"0-{cpus - 1}" if cpus > 1 else "0",
        }
        # A client of its own: closing it is how a timed-out build is cancelled.
        api = docker.from_env(timeout=int(timeout) + 60).api
        lines: list[str] = []
        running: list[str] = []  # the classic builder's step containers, newest last
        step: str | None = None
        done = threading.Event()
        failure: list[BaseException] = []

        def consume() -> None:
            nonlocal step
            try:
                stream = api.build(
                    path=str(context),
                    tag=tag,
                    buildargs=dict(buildargs),
                    labels=dict(labels),
                    rm=True,
                    forcerm=True,
                    decode=True,
                    container_limits=cast(Any, container_limits),
                    timeout=int(timeout) + 60,
                    use_config_proxy=False,
                    network_mode=network_mode,
                )
                with log_path.open("a", encoding="utf-8", errors="replace") as out:
                    for chunk in stream:
                        if "stream" in chunk:
                            for line in str(chunk["stream"]).splitlines():
                                out.write(line + "\n")
                                lines.append(line)
                                del lines[:-200]
                                if on_line:
                                    on_line(line)
                                if match := _STEP.match(line):
                                    step = match.group(3)
                                    result.total_steps = int(match.group(2))
                                elif match := _RUNNING.match(line):
                                    running.append(match.group(1))
                                elif match := _LAYER.match(line):
                                    result.last_layer = match.group(1)
                                elif line.strip() == "---> Using cache":
                                    result.cached_steps += 1
                                elif match := _SUCCESS.match(line):
                                    result.image_id = match.group(1)
                        if "aux" in chunk and isinstance(chunk["aux"], dict):
                            result.image_id = str(chunk["aux"].get("ID") or result.image_id)
                        if "error" in chunk or "errorDetail" in chunk:
                            detail = chunk.get("errorDetail") or {}
                            message = str(chunk.get("error") or detail.get("message"))
                            out.write(f"ERROR: {message}\n")
                            result.error = message
                            code = detail.get("code") if isinstance(detail, dict) else None
                            if match := _NONZERO.search(message):
                                code = int(match.group(1))
                            result.exit_code = int(code) if code is not None else None
                        out.flush()
            except BaseException as exc:  # re-raised in the caller's thread
                failure.append(exc)
            finally:
                done.set()

        log_path.parent.mkdir(parents=True, exist_ok=True)
        worker = threading.Thread(target=consume, name=f"build-{tag}", daemon=True)
        worker.start()
        try:
            finished = done.wait(timeout)
        finally:
            if not done.is_set():
                # Closing our client alone lets the engine notice only when its read times
                # out; killing the step's container ends the build now, then we hang up.
                self._kill_build_step(running)
                done.wait(30)
                api.close()
        if not finished:
            worker.join(5)
            result.timed_out = True
            result.failed_step = step
            result.error = f"build timed out after {int(timeout)}s"
            result.tail = lines[-20:]
            # A slow setup is the task's fault; a slow download or engine is not.
            result.task_at_fault = bool(step and any(s in step for s in task_steps))
            result.seconds = time.monotonic() - started
            return result
        worker.join()
        api.close()
        result.seconds = time.monotonic() - started
        result.failed_step = step
        result.tail = lines[-20:]
        if failure:
            exc = failure[0]
            if isinstance(exc, APIError):
                result.error = f"engine refused the build: {exc.explanation}"
                return result
            if isinstance(exc, (*TRANSIENT, DockerException)):
                raise InfrastructureError(f"Docker engine failed during build: {exc}") from exc
            raise exc
        if result.error is None and result.image_id:
            # Classic builder prints a short id; resolve it to the full one via the tag.
            result.image_id = self.image_id(tag) or result.image_id
            result.ok = True
            return result
        if result.error is None:
            result.error = "build stream ended without an image id"
        result.task_at_fault = bool(
            step and result.exit_code is not None and any(s in step for s in task_steps)
        )
        return result

    def _kill_build_step(self, running: Sequence[str]) -> None:
        if not running:
            return
        with contextlib.suppress(NotFound, APIError, *TRANSIENT):
            self.client.containers.get(running[-1]).kill()

    def remove_image(self, ref: str) -> None:
        with contextlib.suppress(NotFound, ImageNotFound):
            self.client.images.remove(ref, force=True, noprune=False)

    # ---- containers ---------------------------------------------------------------------

    def storage_enforced(self) -> bool:
        return bool(self._storage_supported)

    def storage_probed(self) -> bool:
        """Whether a container was created, so storage_enforced() is known."""
        return self._storage_supported is not None

    def _host_config_limits(self, limits: Limits) -> dict[str, Any]:
        cpus = min(float(self.ncpu), limits.cpus)
        return {
            "nano_cpus": int(cpus * 1e9),
            "mem_limit": limits.memory_mb * 1024 * 1024,
            "memswap_limit": limits.memory_mb * 1024 * 1024,
            "pids_limit": limits.pids,
        }

    def create(
        self,
        image: str,
        command: Sequence[str],
        *,
        name_hint: str,
        limits: Limits,
        labels: Mapping[str, str],
        user: str | None = None,
        environment: Mapping[str, str] | None = None,
        working_dir: str | None = None,
    ) -> Container:
        kwargs: dict[str, Any] = {
            "name": self.container_name(labels.get(LABEL_TASK, "task"), name_hint),
            "command": list(command),
            "labels": dict(labels),
            "user": user,
            "environment": dict(environment or {}),
            "working_dir": working_dir,
            "detach": True,
            "stdin_open": False,
            "tty": False,
            **self._host_config_limits(limits),
        }
        if self._storage_supported is not False:
            try:
                container = self._create(
                    image, storage_opt={"size": f"{limits.storage_mb}M"}, **kwargs
                )
                self._storage_supported = True
                return container
            except APIError as exc:
                if (
                    "storage-opt" not in str(exc.explanation)
                    and "storage opt" not in str(exc.explanation).lower()
                ):
                    raise InfrastructureError(
                        f"cannot create container from {image}: {exc.explanation}"
                    ) from None
                log.info("storage limit not supported by this engine: %s", exc.explanation)
                self._storage_supported = False
        try:
            container = self._create(image, **kwargs)
        except APIError as exc:
            raise InfrastructureError(
                f"cannot create container from {image}: {exc.explanation}"
            ) from None
        return container

    @_transient_retry()
    def _create(self, image: str, **kwargs: Any) -> Container:
        return self.client.containers.create(image, **kwargs)

    def run_to_end(self, container: Container, *, timeout: float, log_path: Path) -> RunResult:
        """Start, wait up to `timeout` (a deadline: kill on expiry), save the logs."""
        started = time.monotonic()
        container.start()
        timed_out = False
        exit_code: int | None
        try:
            status = container.wait(timeout=timeout)
            exit_code = int(status.get("StatusCode", -1))
        except TRANSIENT:
            # `wait(timeout=)` is a read timeout, not a deadline: kill, then wait again.
            timed_out = True
            with contextlib.suppress(APIError, NotFound):
                container.kill()
            status = container.wait(timeout=60)
            exit_code = int(status.get("StatusCode", -1))
        seconds = time.monotonic() - started
        self.save_logs(container, log_path)
        container.reload()
        oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        return RunResult(exit_code=exit_code, seconds=seconds, timed_out=timed_out, oom_killed=oom)

    def save_logs(self, container: Container, log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as out:
            for chunk in container.logs(stream=True, follow=False, stdout=True, stderr=True):
                out.write(chunk)

    def exec(
        self,
        container: Container,
        command: Sequence[str],
        *,
        user: str,
        log_path: Path,
        timeout: float,
        environment: Mapping[str, str] | None = None,
        workdir: str | None = None,
    ) -> RunResult:
        """Run a command in a running container under coreutils `timeout` (exit 124)."""
        started = time.monotonic()
        wrapped = ["timeout", "--kill-after=10", f"{max(1, int(timeout))}s", *command]
        # A silent command must not trip the client's read timeout: give this call its own.
        api = docker.from_env(timeout=int(timeout) + 60).api
        try:
            code = self._exec(
                api,
                container,
                wrapped,
                user=user,
                log_path=log_path,
                environment=environment,
                workdir=workdir,
            )
        finally:
            api.close()
        container.reload()
        oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        return RunResult(
            exit_code=code,
            seconds=time.monotonic() - started,
            timed_out=code == 124,
            oom_killed=oom or code == 137,
        )

    def _exec(
        self,
        api: docker.APIClient,
        container: Container,
        wrapped: Sequence[str],
        *,
        user: str,
        log_path: Path,
        environment: Mapping[str, str] | None,
        workdir: str | None,
    ) -> int | None:
        exec_id = api.exec_create(
            container.id,
            list(wrapped),
            user=user,
            environment=dict(environment or {}),
            workdir=workdir,
            stdout=True,
            stderr=True,
        )["Id"]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as out:
            for chunk in api.exec_start(exec_id, stream=True):
                out.write(chunk)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return None if code is None else int(code)

    def put_file(
        self, container: Container, directory: str, name: str, data: bytes, *, mode: int = 0o644
    ) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(data))
        if not container.put_archive(directory, buffer.getvalue()):
            raise InfrastructureError(f"cannot copy {name} into {directory} of {container.id}")

    def put_directory(self, container: Container, source: Path, destination: str) -> None:
        with tempfile.TemporaryFile() as handle:
            with tarfile.open(fileobj=handle, mode="w") as archive:
                archive.add(source, arcname=PurePosixPath(destination).name)
            handle.seek(0)
            parent = str(PurePosixPath(destination).parent)
            if not container.put_archive(parent, handle):
                raise InfrastructureError(f"cannot copy {source} into {destination}")

    def get_path(self, container: Container, path: str, destination: Path) -> bool:
        """Copy `path` out of the container into `destination` (a directory). False if absent."""
        try:
            stream, _ = container.get_archive(path)
        except NotFound:
            return False
        destination.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as handle:
            for chunk in stream:
                handle.write(chunk)
            handle.seek(0)
            with tarfile.open(fileobj=handle, mode="r") as archive:
                archive.extractall(destination, filter="data")
        return True

    def remove_container(self, container: Container) -> None:
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True, v=True)

    # ---- cleanup ------------------------------------------------------------------------

    def cleanup_run(self) -> int:
        """Remove every container, network and volume of this run."""
        return cleanup(self.client, {LABEL_RUN: self.run_id})


def cleanup(client: docker.DockerClient, labels: Mapping[str, str], *, images: bool = False) -> int:
    filters: dict[str, str | list[str] | bool] = {
        "label": [f"{key}={value}" for key, value in labels.items()]
    }
    removed = 0
    for container in client.containers.list(all=True, filters=filters):
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True, v=True)
            removed += 1
    for network in client.networks.list(filters=filters):
        with contextlib.suppress(NotFound, APIError):
            network.remove()
            removed += 1
    for volume in client.volumes.list(filters=filters):
        with contextlib.suppress(NotFound, APIError):
            volume.remove(force=True)
            removed += 1
    if images:
        for image in client.images.list(filters=filters):
            with contextlib.suppress(NotFound, APIError):
                client.images.remove(str(image.id), force=True)
                removed += 1
    return removed


def connect_for_cleanup() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except (DockerException, *TRANSIENT) as exc:
        raise InfrastructureError(f"no Docker engine answers ({exc})") from None
    return client
