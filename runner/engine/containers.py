"""A running container and a service container of a gate: commands under deadlines, the
storage watchdog, the cgroup's limit counters, and files in and out."""

from __future__ import annotations

import contextlib
import io
import logging
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import docker
import requests
from docker.errors import APIError, DockerException, NotFound

from runner.base.errors import EngineError
from runner.base.logs import CappedLog, Truncation, extract_capped
from runner.engine.calls import TRANSIENT, Connection, engine_errors, explain, qgroup_retry
from runner.model.settings import BUILD_GRACE_SECONDS, STORAGE_SAMPLE_SECONDS, StorageLimit
from runner.plan.runtime import ExecOutcome, LimitStats
from runner.plan.types import ContainerPlan, ExecStep

log = logging.getLogger(__name__)


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...


class DockerContainer:
    def __init__(
        self,
        connection: Connection,
        api: docker.APIClient,
        container_id: str,
        plan: ContainerPlan,
        storage: StorageLimit,
    ) -> None:
        self.connection = connection
        self.api = api
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
        capped = CappedLog(log_path, limit, append=True)
        noticing = _QuotaNotice(capped) if self.storage is StorageLimit.QUOTA else None
        try:
            outcome = self.exec_to(step, noticing or capped)
        finally:
            truncation = capped.close()
        outcome.truncation = truncation
        if noticing is not None and noticing.seen and outcome.storage_exceeded_mb is None:
            # A write the quota refused, although what the step left is under the limit now (an
            # exit-code task's runs each start from the lockdown's /tmp: the fill was removed
            # before the step ended, and the usage read after it said nothing).
            used = self.storage_used_mb() or 0
            outcome.storage_exceeded_mb = max(used, self.plan.limits.storage_mb)
        return outcome

    def exec_to(self, step: ExecStep, out: Sink) -> ExecOutcome:
        """Run `step`, its output written to `out` as it comes, within its deadline."""
        started = time.monotonic()
        run = _Exec(self, step)
        api = self.connection.new_api(step.timeout_seconds + BUILD_GRACE_SECONDS)
        worker = threading.Thread(
            target=run.consume, args=(api, out), name=f"exec-{self.name}", daemon=True
        )
        worker.start()
        at_limit = False
        try:
            if not run.done.wait(step.timeout_seconds):
                self.timed_out = True
                at_limit = self.pids_at_limit()
                self.kill()
                run.done.wait(30)
        finally:
            if not run.done.is_set():
                self.kill()
            api.close()
            worker.join(5)
        # When the runner itself killed the container (a deadline, the storage watchdog), that
        # is what happened, whatever the exec call then reported.
        if not (self.timed_out or self.storage_exceeded_mb is not None):
            run.raise_engine_failure()
        outcome = ExecOutcome(
            exit_code=run.exit_code,
            seconds=time.monotonic() - started,
            timed_out=self.timed_out,
            storage_exceeded_mb=self.storage_exceeded_mb,
            limits=LimitStats(pids_at_limit=at_limit),
        )
        if not self.timed_out and self.storage_exceeded_mb is None:
            self._what_the_limits_did(outcome)
        return outcome

    def _what_the_limits_did(self, outcome: ExecOutcome) -> None:
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

    def pids_at_limit(self) -> bool:
        """Whether the container holds as many processes as its pids limit allows, from the
        engine's statistics."""
        if not self.plan.limits.pids:
            return False
        try:
            stats = self.api.stats(self.id, stream=False, one_shot=True)
        except (DockerException, *TRANSIENT):
            return False
        current = (stats.get("pids_stats") or {}).get("current")
        return isinstance(current, int) and current >= self.plan.limits.pids

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
        self.put_files([(directory, name, data, mode)])

    def put_files(self, files: Sequence[tuple[str, str, bytes, int]]) -> None:
        """(directory, name, data, mode) files, each into its existing directory, in one archive
        unpacked at / : the engine unpacks each archive in a process of its own (a re-exec of
        dockerd, about 50 ms of CPU measured under load) and mounts a created container's
        root for it, so a verifier's census and patch go in together."""
        if not files:
            return
        buffer = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for directory, name, data, mode in files:
                info = tarfile.TarInfo(str(PurePosixPath(directory, name)).lstrip("/"))
                info.size = len(data)
                info.mode = mode
                info.mtime = now
                archive.addfile(info, io.BytesIO(data))
        names = ", ".join(name for _, name, _, _ in files)
        where = files[0][0] if len(files) == 1 else "/"
        with engine_errors(f"copying {names} into {self.name}"):
            if not self.api.put_archive(self.id, "/", buffer.getvalue()):
                raise EngineError(f"cannot copy {names} into {where} of {self.name}")

    def put_directory(self, source: Path, destination: str) -> None:
        with tempfile.TemporaryFile() as handle:
            with tarfile.open(fileobj=handle, mode="w") as archive:
                archive.add(source, arcname=PurePosixPath(destination).name)
            handle.seek(0)
            parent = str(PurePosixPath(destination).parent)
            with engine_errors(f"copying {source} into {self.name}"):
                if not self.api.put_archive(self.id, parent, handle):
                    raise EngineError(f"cannot copy {source} into {destination}")

    def put_archive(self, directory: str, data: bytes) -> None:
        with engine_errors(f"unpacking an archive into {directory} of {self.name}"):
            if not self.api.put_archive(self.id, directory, data):
                raise EngineError(f"cannot unpack an archive into {directory} of {self.name}")

    @qgroup_retry()
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


class _QuotaNotice:
    """Passes a step's output on, and notices the quota's refusal of a write in it (EDQUOT's
    message, as every tool prints it)."""

    MARK = b"Disk quota exceeded"

    def __init__(self, out: Sink) -> None:
        self.out = out
        self.seen = False
        self._tail = b""

    def write(self, data: bytes) -> None:
        self.out.write(data)
        if not self.seen:
            window = self._tail + data
            self.seen = self.MARK in window
            self._tail = window[-len(self.MARK) :]


class _Exec:
    """One command's run on a worker thread: what it reports back to the waiting one."""

    def __init__(self, container: DockerContainer, step: ExecStep) -> None:
        self.container = container
        self.step = step
        self.exit_code: int | None = None
        self.never_started: str | None = None
        self.failure: BaseException | None = None
        self.done = threading.Event()

    def consume(self, api: docker.APIClient, capped: Sink) -> None:
        step = self.step
        try:
            exec_id = api.exec_create(
                self.container.id,
                list(step.argv),
                user=step.user,
                environment={**self.container.plan.env, **step.env},
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
            self.exit_code = None if code is None else int(code)
            if not state.get("Pid") and code in (126, 127):
                # The runtime could not start the command (no such user or file): the
                # engine's failure, never the command's exit status.
                self.never_started = (
                    first.decode(errors="replace").strip()
                    or f"exit {code}: the runtime could not start it (a missing user or "
                    "executable?)"
                )
        except BaseException as exc:  # handed to the waiting thread
            self.failure = exc
        finally:
            self.done.set()

    def raise_engine_failure(self) -> None:
        step, name = self.step, self.container.name
        if self.never_started is not None:
            raise EngineError(
                f"cannot start {step.name} ({step.argv[0]} as {step.user}) in {name}: "
                f"{self.never_started}"
            )
        if self.failure is not None:
            exc = self.failure
            if isinstance(exc, (DockerException, *TRANSIENT, requests.exceptions.RequestException)):
                raise EngineError(f"running {step.name} in {name}: {explain(exc)}")
            raise exc
