"""What the executor asks of a container engine and what it gets back: the interface
(`Engine`, `Container`) and its value types. No Docker here: runner/engine.py implements the
interface with docker-py, and the unit tests implement it with a fake.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.base.logs import Truncation
from runner.plan.types import ContainerPlan, EngineFacts, ExecStep, ServicePlan, StepLimits


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    id: str
    labels: Mapping[str, str]
    repo_digests: tuple[str, ...] = ()
    repo_tags: tuple[str, ...] = ()
    parent: str = ""  # the image it was committed on ("" for a built or pulled one)


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    context: Path
    tag: str
    buildargs: Mapping[str, str]
    labels: Mapping[str, str]
    memory_mb: int
    cpuset: str
    timeout_seconds: float
    network: str | None = None
    # The task's limits for the steps that run its code (runner.plan.dockerfile); None: the
    # whole Dockerfile is the runner's own (base and toolchain layers).
    steps: StepLimits | None = None


@dataclass(kw_only=True)
class BuildOutcome:
    ok: bool
    image_id: str | None = None
    seconds: float = 0.0
    failed_step: str | None = None
    step_number: int = 0
    exit_code: int | None = None
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    timed_out: bool = False
    cached_steps: int = 0
    total_steps: int = 0
    last_layer: str | None = None
    truncation: Truncation | None = None
    # For a step killed by a signal (137, 143): did the engine record an OOM kill of its
    # container (None: unknown), and did the engine stop answering (it was shutting down).
    oom_killed: bool | None = None
    engine_lost: bool = False
    # What the task's limits did in a task step that failed (None: not read there).
    limits: LimitStats | None = None
    storage_exceeded_mb: int | None = None
    storage_mechanism: str | None = None


@dataclass(frozen=True, kw_only=True)
class LimitStats:
    pids_limit_hits: int = -1
    oom_kills: int = -1
    # A command stopped at its deadline: every process slot was taken then (read by the engine
    # from outside: under a fork bomb no process can start in the container to read its cgroup).
    pids_at_limit: bool = False


@dataclass(frozen=True, kw_only=True)
class FileToPut:
    """A file copied into a container before it starts."""

    directory: str
    name: str
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True, kw_only=True)
class ArchiveToPut:
    """A tar unpacked under `directory` before the container starts, each member with the
    owner, mode and times the tar gives (the caches handed forward from a trusted run)."""

    directory: str
    data: bytes


# What goes into a container before it starts.
ToPut = FileToPut | ArchiveToPut


@dataclass(kw_only=True)
class ExecOutcome:
    exit_code: int | None
    seconds: float
    timed_out: bool = False  # the runner killed it at its deadline
    storage_exceeded_mb: int | None = None  # the runner killed it for its writable layer
    oom_killed: bool = False
    limits: LimitStats = field(default_factory=LimitStats)
    truncation: Truncation | None = None


class Service(Protocol):
    name: str

    def health(self) -> str: ...  # starting | healthy | unhealthy | exited
    def save_logs(self, path: Path, *, limit: int) -> list[str]: ...  # returns the last lines


class Container(Protocol):
    name: str
    storage_mechanism: str  # how storage_mb is held: quota, watchdog or off

    def connect(self, network: str) -> None: ...

    def exec(self, step: ExecStep, log_path: Path, *, limit: int) -> ExecOutcome: ...
    def put_file(self, directory: str, name: str, data: bytes, *, mode: int = 0o644) -> None: ...
    def put_files(self, files: Sequence[tuple[str, str, bytes, int]]) -> None: ...
    def put_directory(self, source: Path, destination: str) -> None: ...
    def put_archive(self, directory: str, data: bytes) -> None: ...
    def get_file(self, path: str, *, limit: int) -> bytes | None: ...
    def copy_out(self, path: str, destination: Path, *, limit: int) -> list[Truncation] | None: ...
    def storage_used_mb(self) -> int | None: ...
    def enter_hint(self) -> str: ...


class Engine(Protocol):
    def facts(self) -> EngineFacts: ...
    def image(self, ref: str) -> ImageInfo | None: ...
    def pull(self, ref: str) -> ImageInfo: ...
    def build(
        self, request: BuildRequest, log_path: Path, *, limit: int, on_line: Callable[[str], None]
    ) -> BuildOutcome: ...
    def container(
        self,
        plan: ContainerPlan,
        *,
        env: Mapping[str, str],
        keep: bool,
        files: Sequence[ToPut] = (),
    ) -> contextlib.AbstractContextManager[Container]:
        """Create, put `files` in, start; remove on exit unless `keep`."""
        ...

    def network(
        self, name: str, *, labels: Mapping[str, str], keep: bool
    ) -> contextlib.AbstractContextManager[str]: ...
    def service(
        self, plan: ServicePlan, *, network: str, keep: bool
    ) -> contextlib.AbstractContextManager[Service]: ...
    def remove_image(self, ref: str) -> None: ...
    def cleanup(self, labels: Mapping[str, str], *, images: bool = False) -> int: ...
    def close(self) -> None: ...
