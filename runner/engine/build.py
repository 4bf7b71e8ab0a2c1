"""One image build on the engine: streamed to a capped log, under the runner's own deadline.

The stream is consumed in a worker thread; the calling thread waits for the deadline. On
expiry (or Ctrl-C) the running step's container is killed, which ends the build on the engine
at once, and the client is closed.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import docker
import docker.utils
from docker.errors import APIError, DockerException

from runner.base.errors import EngineError
from runner.base.logs import CappedLog
from runner.engine.buildlog import BuildStream
from runner.engine.calls import ENGINE_FAILURES, TRANSIENT, Connection, explain
from runner.model.settings import BUILD_GRACE_SECONDS
from runner.plan.dockerfile import Chunk
from runner.plan.runtime import BuildOutcome, BuildRequest, ImageInfo


@dataclass(frozen=True, kw_only=True)
class Context:
    """A build context of the runner's making (a tar) and its Dockerfile's name inside it."""

    tar: IO[bytes]
    dockerfile: str


class ImageBuild:
    def __init__(
        self,
        connection: Connection,
        api: docker.APIClient,
        request: BuildRequest,
        *,
        image: Callable[[str], ImageInfo | None],
        context: Context | None = None,
        rename: Callable[[str], str | None] = lambda line: line,
    ) -> None:
        self.connection = connection
        self.api = api  # the engine's shared client: events, kills
        self.request = request
        self.image = image
        self.context = context
        # How each line reads in the log (None: left out): a piece of a stepped build numbers
        # its steps as the whole Dockerfile does.
        self.rename = rename
        self.stream = BuildStream()
        self.done = threading.Event()
        self.failure: list[BaseException] = []

    def run(self, log_path: Path, *, limit: int, on_line: Callable[[str], None]) -> BuildOutcome:
        capped = CappedLog(log_path, limit, append=True)
        try:
            outcome = self.run_to(capped, on_line=on_line, timeout=self.request.timeout_seconds)
        finally:
            truncation = capped.close()
        outcome.truncation = truncation
        return outcome

    def run_to(
        self, out: CappedLog, *, on_line: Callable[[str], None], timeout: float
    ) -> BuildOutcome:
        """The build, its log written to `out`, ended at `timeout` seconds."""
        started, wall_started = time.monotonic(), time.time()
        request = self.request
        api = self.connection.new_api(timeout + BUILD_GRACE_SECONDS)
        worker = threading.Thread(
            target=self._consume,
            args=(api, out, on_line, timeout),
            name=f"build-{request.tag}",
            daemon=True,
        )
        worker.start()
        finished = False
        try:
            finished = self.done.wait(timeout)
        finally:
            if not self.done.is_set():
                # Closing the client alone lets the engine notice only when its read times
                # out; killing the step's container ends the build now.
                self._kill_step(self.stream.running)
                self.done.wait(30)
            api.close()
            worker.join(5)
        outcome = self._outcome(time.monotonic() - started)
        if not finished:
            outcome.timed_out = True
            outcome.error = f"build timed out after {int(request.timeout_seconds)}s"
            return outcome
        if self.failure:
            return self._failed(outcome, self.failure[0])
        return self._ended(outcome, wall_started)

    def _consume(
        self,
        api: docker.APIClient,
        capped: CappedLog,
        on_line: Callable[[str], None],
        timeout: float,
    ) -> None:
        request = self.request
        where: dict[str, Any] = (
            {"path": str(request.context)}
            if self.context is None
            else {
                "fileobj": self.context.tar,
                "custom_context": True,
                "dockerfile": self.context.dockerfile,
            }
        )
        try:
            chunks = api.build(
                **where,
                tag=request.tag or None,
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
                timeout=int(timeout) + BUILD_GRACE_SECONDS,
                use_config_proxy=False,
                network_mode=request.network,
            )

            def show(line: str, *, progress: bool = True) -> None:
                shown = self.rename(line)
                if shown is not None:
                    capped.write(shown.encode("utf-8", "replace") + b"\n")
                    if progress:
                        on_line(shown)

            for chunk in chunks:
                for line in self.stream.feed(chunk):
                    show(line)
            for line in self.stream.finish():
                show(line, progress=False)
        except BaseException as exc:  # handed to the waiting thread
            self.failure.append(exc)
        finally:
            self.done.set()

    def _outcome(self, seconds: float) -> BuildOutcome:
        stream = self.stream
        return BuildOutcome(
            ok=False,
            seconds=seconds,
            failed_step=stream.step,
            step_number=stream.step_number,
            tail=stream.tail[-20:],
            cached_steps=stream.cached_steps,
            total_steps=stream.total_steps,
            last_layer=stream.last_layer,
            exit_code=stream.exit_code,
        )

    @staticmethod
    def _failed(outcome: BuildOutcome, exc: BaseException) -> BuildOutcome:
        if isinstance(exc, APIError):
            outcome.error = f"engine refused the build: {explain(exc)}"
            return outcome
        if isinstance(exc, ENGINE_FAILURES):
            raise EngineError(f"Docker engine failed during the build: {explain(exc)}")
        raise exc

    def _ended(self, outcome: BuildOutcome, wall_started: float) -> BuildOutcome:
        stream = self.stream
        if stream.succeeded:
            info = self.image(self.request.tag) if self.request.tag else None
            outcome.image_id = info.id if info else stream.image_id
            outcome.ok = True
            outcome.failed_step = None
            return outcome
        outcome.error = stream.failure()
        if stream.exit_code in (137, 143) and stream.running:
            # Killed by a signal: the memory limit, the task itself, or an engine going down.
            # The engine's own record and its answer tell them apart.
            outcome.engine_lost = not self.connection.answers()
            if not outcome.engine_lost:
                outcome.oom_killed = self._oom_recorded(stream.running[-1], wall_started)
        return outcome

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
        except ENGINE_FAILURES:
            return None

    def _kill_step(self, running: Sequence[str]) -> None:
        if not running:
            return
        with contextlib.suppress(DockerException, *TRANSIENT):
            self.api.kill(running[-1])


DOCKERFILE_NAME = ".selfbench.Dockerfile"  # a stepped build's chunk: its own Dockerfile


def chunk_context(context: Path, chunk: Chunk, dockerfile: str, out: Any) -> None:
    """The build context of one chunk: its Dockerfile and the files its COPY instructions read
    (every chunk of a task would otherwise send the whole context, the repository's archive
    included, again)."""
    sources = chunk.sources()
    if sources is None:
        # A pattern or a URL: the whole context, as `docker build` sends it.
        docker.utils.tar(context, dockerfile=(DOCKERFILE_NAME, dockerfile), fileobj=out)
        return
    root = context.resolve()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for source in sorted(set(sources)):
            relative = posixpath.normpath(source.lstrip("/"))
            full = (root / relative).resolve()
            if relative.startswith("..") or not full.is_relative_to(root) or not full.exists():
                continue  # the builder reports the missing source in its own words
            archive.add(str(root / relative), arcname=relative, filter=_plain)
        info = tarfile.TarInfo(DOCKERFILE_NAME)
        body = dockerfile.encode()
        info.size = len(body)
        info.mtime = 0
        archive.addfile(info, io.BytesIO(body))


def _plain(member: tarfile.TarInfo) -> tarfile.TarInfo:
    # As docker's own context archive: no owner names; the builder gives COPY's files to root.
    member.uname = member.gname = ""
    return member
