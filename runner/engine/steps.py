"""A task image built in pieces (runner.plan.dockerfile): the runner's own instructions by the
engine's builder, each step that runs the task's code in a container under every limit of the
task (pids, storage, memory, CPU, the build's deadline), committed as the next piece's base.

A committed step is cached as the builder caches a layer: an image labelled with the hash of
what it ran on (the parent image id, the command, its environment, user and directory) is reused.
The agent and verifier Dockerfiles share their text up to the setup step, so setup runs once per
task.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import docker
import docker.utils

from runner.base.errors import StorageRefusedError
from runner.base.logs import CappedLog
from runner.engine.build import DOCKERFILE_NAME, Context, ImageBuild, chunk_context
from runner.engine.calls import Connection, engine_errors
from runner.engine.containers import DockerContainer
from runner.engine.stepcache import (
    claim_scan,
    index_steps,
    made_since,
    remember_step,
    remembered_step,
    step_key,
)
from runner.model.settings import CONTAINER_MARGIN_SECONDS
from runner.plan.dockerfile import (
    PREDEFINED_ARGS,
    Chunk,
    LimitedRun,
    SteppedDockerfile,
)
from runner.plan.labels import LABEL_STEP
from runner.plan.runtime import BuildOutcome, BuildRequest, ExecOutcome, ImageInfo
from runner.plan.types import ContainerPlan, ExecStep, Role, StepLimits

TAIL_LINES = 200

OpenContainer = Callable[[ContainerPlan], AbstractContextManager[DockerContainer]]


class _Tail:
    """The log sink of a task step: into the build's capped log, its last lines kept for the
    failure's cause, each whole line shown as progress."""

    def __init__(self, out: CappedLog, on_line: Callable[[str], None]) -> None:
        self.out = out
        self.on_line = on_line
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self._partial = b""

    def write(self, data: bytes) -> None:
        self.out.write(data)
        text = self._partial + data
        *complete, self._partial = text.split(b"\n")
        if len(self._partial) > 64 * 1024:
            complete.append(self._partial)
            self._partial = b""
        for raw in complete:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            self.lines.append(line)
            self.on_line(line)

    def say(self, line: str) -> None:
        self.write(line.encode() + b"\n")


class SteppedBuild:
    def __init__(
        self,
        connection: Connection,
        api: docker.APIClient,
        request: BuildRequest,
        dockerfile: SteppedDockerfile,
        *,
        image: Callable[[str], ImageInfo | None],
        open_container: OpenContainer,
    ) -> None:
        assert request.steps is not None
        self.connection = connection
        self.api = api
        self.request = request
        self.limits: StepLimits = request.steps
        self.dockerfile = dockerfile
        self.image = image
        self.open_container = open_container

    def run(self, log_path: Path, *, limit: int, on_line: Callable[[str], None]) -> BuildOutcome:
        started = time.monotonic()
        self.began = time.time()
        deadline = started + self.request.timeout_seconds
        out = CappedLog(log_path, limit, append=True)
        try:
            outcome = self._pieces(out, on_line, deadline)
        finally:
            truncation = out.close()
        outcome.truncation = truncation
        outcome.seconds = time.monotonic() - started
        outcome.total_steps = self.dockerfile.total_steps
        return outcome

    def _pieces(
        self, out: CappedLog, on_line: Callable[[str], None], deadline: float
    ) -> BuildOutcome:
        parent: str | None = None
        cached = 0
        pieces = self.dockerfile.pieces
        for index, piece in enumerate(pieces):
            final = index == len(pieces) - 1
            left = deadline - time.monotonic()
            if left <= 0:
                return self._timed_out(piece)
            if isinstance(piece, Chunk):
                outcome = self._chunk(piece, parent, out, on_line, left, final=final)
            else:
                assert parent is not None  # a task step never comes first (split checks)
                outcome = self._task_step(piece, parent, out, on_line, left, final=final)
            cached += outcome.cached_steps
            outcome.cached_steps = cached
            if not outcome.ok or outcome.image_id is None:
                outcome.ok = False
                outcome.last_layer = outcome.last_layer or parent
                return outcome
            parent = outcome.image_id
        assert parent is not None
        if self.request.tag:
            # Tagged once, here, whichever kind of piece came last.
            with engine_errors(f"tagging {self.request.tag}"):
                repository, _, tag = self.request.tag.rpartition(":")
                self.api.tag(parent, repository, tag, force=True)
        info = self.image(self.request.tag) if self.request.tag else None
        return BuildOutcome(
            ok=True, image_id=info.id if info else parent, cached_steps=cached, last_layer=parent
        )

    def _timeout_words(self) -> str:
        return f"build timed out after {int(self.request.timeout_seconds)}s"

    def _timed_out(self, piece: Chunk | LimitedRun) -> BuildOutcome:
        instruction = piece.instruction if isinstance(piece, LimitedRun) else piece.instructions[0]
        return BuildOutcome(
            ok=False,
            timed_out=True,
            error=self._timeout_words(),
            failed_step=instruction.text,
            step_number=instruction.step,
        )

    # ---- the runner's own instructions ---------------------------------------------------

    def _chunk(
        self,
        chunk: Chunk,
        parent: str | None,
        out: CappedLog,
        on_line: Callable[[str], None],
        timeout: float,
        *,
        final: bool,
    ) -> BuildOutcome:
        request = self.request
        total = self.dockerfile.total_steps

        hidden = False  # the lines of a FROM or ARG the runner put at the chunk's top

        def rename(line: str) -> str | None:
            nonlocal hidden
            if not line.startswith("Step "):
                return None if hidden else line
            number, _, rest = line[5:].partition(" : ")
            instruction = chunk.step_of(int(number.split("/")[0])) if number[:1].isdigit() else None
            hidden = instruction is None
            return None if instruction is None else f"Step {instruction.step}/{total} : {rest}"

        piece = BuildRequest(
            context=request.context,
            tag="",
            buildargs=request.buildargs,
            labels=request.labels if final else {},
            memory_mb=request.memory_mb,
            cpuset=request.cpuset,
            timeout_seconds=request.timeout_seconds,
            network=request.network,
        )
        with tempfile.TemporaryFile() as tar:
            chunk_context(request.context, chunk, chunk.dockerfile(parent), tar)
            tar.seek(0)
            build = ImageBuild(
                self.connection,
                self.api,
                piece,
                image=self.image,
                context=Context(tar=tar, dockerfile=DOCKERFILE_NAME),
                rename=rename,
            )
            outcome = build.run_to(out, on_line=on_line, timeout=timeout)
        if not outcome.ok and outcome.step_number:
            instruction = chunk.step_of(outcome.step_number)
            outcome.step_number = instruction.step if instruction else 0
        return outcome

    # ---- a step of the task's code -------------------------------------------------------

    def _task_step(
        self,
        step: LimitedRun,
        parent: str,
        out: CappedLog,
        on_line: Callable[[str], None],
        timeout: float,
        *,
        final: bool,
    ) -> BuildOutcome:
        sink = _Tail(out, on_line)
        instruction = step.instruction
        sink.say(f"Step {instruction.step}/{self.dockerfile.total_steps} : {instruction.text}")
        with engine_errors(f"reading image {parent[:19]}"):
            inspected: dict[str, Any] = self.api.inspect_image(parent)  # type: ignore[no-untyped-call]
        config: dict[str, Any] = inspected.get("Config") or {}
        image_env = {e.partition("=")[0] for e in config.get("Env") or []}
        env = self._step_env(step, image_env)
        user = str(config.get("User") or "root")
        workdir = str(config.get("WorkingDir") or "/")
        key = step_key(parent, step.argv, env, user, workdir)
        fresh = made_since(str(inspected.get("Created") or ""), self.began)
        cached = self._cached(key, parent, fresh=fresh)
        if cached is not None:
            sink.say(" ---> Using cache")
            sink.say(f" ---> {_short(cached)}")
            return BuildOutcome(ok=True, image_id=cached, cached_steps=1, last_layer=cached)
        plan = self._step_container(instruction.step, parent, config, workdir, timeout)
        exec_step = ExecStep(
            name=f"step-{instruction.step}",
            argv=list(step.argv),
            user=user,
            env=env,
            workdir=workdir,
            timeout_seconds=timeout,
        )
        with contextlib.ExitStack() as stack:
            try:
                container = stack.enter_context(self.open_container(plan))
            except StorageRefusedError as refused:
                # The image this step runs on already fills the task's storage_mb (the quota
                # refused its container): the step fails under that limit, as the watchdog's
                # first sample would stop it on another engine.
                sink.say(str(refused))
                refusal = ExecOutcome(
                    exit_code=None, seconds=0.0, storage_exceeded_mb=refused.image_mb
                )
                return self._failed_step(step, refusal, sink, "quota")
            sink.say(f" ---> Running in {container.id[:12]}")
            result = container.exec_to(exec_step, sink)
            failed = (
                result.timed_out or result.exit_code != 0 or result.storage_exceeded_mb is not None
            )
            if not failed:
                labels = {**self.request.labels, LABEL_STEP: key} if final else {LABEL_STEP: key}
                image_id = self._commit(container, config, labels)
                remember_step(key, image_id)
                sink.say(f" ---> {_short(image_id)}")
                return BuildOutcome(ok=True, image_id=image_id, last_layer=image_id)
        return self._failed_step(step, result, sink, container.storage_mechanism)

    def _step_container(
        self, number: int, parent: str, config: dict[str, Any], workdir: str, timeout: float
    ) -> ContainerPlan:
        """The container a task step runs in: the task's limits, the parent image as it is."""
        limits = self.limits
        return ContainerPlan(
            name=f"{limits.name}-{number}",
            image=parent,
            role=Role.BUILD,
            # The image's own command stays the container's, so the commit keeps it; what keeps
            # the container alive is the entrypoint, which dies on its own a margin after the
            # deadline even if the runner was killed.
            command=list(config.get("Cmd") or []),
            entrypoint=["/bin/sh", "-c", f"exec sleep {int(timeout + CONTAINER_MARGIN_SECONDS)}"],
            env={},
            proxy_env=[],
            workdir=workdir,
            network=self.request.network or "default",
            limits=limits.limits,
            labels=limits.labels,
            storage=limits.storage,
        )

    def _failed_step(
        self, step: LimitedRun, result: ExecOutcome, sink: _Tail, mechanism: str | None
    ) -> BuildOutcome:
        instruction = step.instruction
        outcome = BuildOutcome(
            ok=False,
            failed_step=instruction.text,
            step_number=instruction.step,
            exit_code=result.exit_code,
            tail=list(sink.lines)[-20:],
            timed_out=result.timed_out,
            limits=result.limits,
            oom_killed=result.oom_killed if result.exit_code == 137 else None,
            storage_exceeded_mb=result.storage_exceeded_mb,
            storage_mechanism=mechanism,
        )
        if result.timed_out:
            outcome.error = self._timeout_words()
        else:
            # The builder's own words, which the judgement reads the same way.
            outcome.error = (
                f"The command '{' '.join(step.argv)}' returned a non-zero code: {result.exit_code}"
            )
        return outcome

    def _step_env(self, step: LimitedRun, image_env: set[str]) -> dict[str, str]:
        """What the builder gives a RUN besides the image's environment: each ARG in scope (the
        build's value, else its default) and the predefined proxy arguments; an ENV of the same
        name wins, as in the builder."""
        given = self.request.buildargs
        env: dict[str, str] = {}
        for name, default in step.args:
            value = given.get(name, default)
            if value is not None and name not in image_env:
                env[name] = value
        for name, value in given.items():
            if name in PREDEFINED_ARGS and name not in image_env:
                env[name] = value
        return env

    def _cached(self, key: str, parent: str, *, fresh: bool) -> str | None:
        """The step's committed image (the key's, on `parent`) by the id the index remembers
        (one inspect). Not remembered: read the engine's step images into the index, when
        that is due (runner.engine.stepcache), and look again."""
        remembered = remembered_step(key)
        if remembered is not None and self._is_step(remembered, key, parent):
            return remembered
        if fresh:
            # The parent was made by this build: no step was committed on it anywhere.
            return None
        if not claim_scan(str(self.connection.arguments.get("base_url") or "")):
            return None
        with engine_errors("reading the engine's build steps"):
            index_steps(self.api.images(all=True, filters={"label": LABEL_STEP}))
        remembered = remembered_step(key)
        if remembered is not None and self._is_step(remembered, key, parent):
            return remembered
        return None

    def _is_step(self, image_id: str, key: str, parent: str) -> bool:
        """Whether `image_id` is on this engine (not removed since, nor remembered from another
        engine), committed for `key` on `parent`."""
        info = self.image(image_id)
        return info is not None and info.parent == parent and info.labels.get(LABEL_STEP) == key

    def _commit(
        self, container: DockerContainer, config: dict[str, Any], labels: dict[str, str]
    ) -> str:
        # The parent's configuration, with `labels` added: Cmd and Entrypoint as they were (an
        # empty Entrypoint must be given as one, or the engine takes the container's). The
        # engine adds the container's labels to the image's where the given ones lack the key
        # (seen: the task's images carried the building run's owner and `side: agent`), so each
        # of those is given: the parent's value, else empty.
        parent = config.get("Labels") or {}
        container_labels = {key: parent.get(key, "") for key in self.limits.labels}
        conf = {
            **config,
            "Entrypoint": config.get("Entrypoint") or [],
            "Labels": {**container_labels, **parent, **labels},
        }
        with engine_errors(f"committing {container.name}"):
            committed = self.api.commit(container.id, conf=conf)
        return str(committed["Id"])


def _short(image_id: str) -> str:
    return image_id.removeprefix("sha256:")[:12]
