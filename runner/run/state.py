"""What every stage of a run shares: the plan, the engine, the run directory, the stage results,
the events that order the stages, and how a stage runs (its errors mapped to a status)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel

from runner.base.errors import (
    InvalidTaskError,
    RunnerError,
    TaskFailedError,
)
from runner.base.logs import Truncation
from runner.model.census import (
    Census,
)
from runner.model.report import (
    GateData,
    KeptContainer,
    Status,
)
from runner.model.reward import (
    Reward,
    VerifierDetails,
)
from runner.model.stages import DOCKER_STAGES
from runner.plan.runtime import (
    Container,
    Engine,
    ExecOutcome,
)
from runner.plan.types import (
    LABEL_RUN,
    VerifyPlan,
)
from runner.run.context import ExecutionEnv, Progress

log = logging.getLogger(__name__)


PREDICTED_DIR = "predicted"  # a gate's verifier run on its predicted patch, until confirmed


@dataclass(frozen=True, kw_only=True)
class StageEvent:
    """A stage changed state: `running` when it starts, its status when it ends."""

    stage: str
    status: str
    detail: str = ""
    seconds: float | None = None


StageListener = Callable[[StageEvent], None]


GATES = DOCKER_STAGES


class Skip(StrEnum):
    """Why a stage did not run (its detail says it in these words): what the verdict and the
    report decide from, never the detail's text."""

    NOT_RUN = "not run"
    INTERRUPTED = "skipped: interrupted"
    BUILD_RED = "skipped: build did not pass"
    SMOKE_RED = "skipped: smoke did not pass"
    ORACLE_RED = "skipped: oracle did not pass"
    BUNDLE = "skipped: compiled bundle (no definition.json to audit)"
    # A hack stage skipped for one of these does not keep a task from being accepted.
    HACK_DISABLED = "skipped: --no-hack-gate"
    HACK_NONE = "skipped: no canned exploit applies to this task"
    # Another stage's own words (e.g. why the census is missing): `skipped: <why>`.
    OTHER = "skipped"

    @property
    def optional(self) -> bool:
        return self in (Skip.HACK_DISABLED, Skip.HACK_NONE)


@dataclass(kw_only=True)
class StageResult:
    status: Status = Status.SKIPPED
    detail: str = "not run"
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)
    truncated: list[Truncation] = field(default_factory=list)
    data: BaseModel | None = None
    skip: Skip | None = Skip.NOT_RUN  # None once the stage ran

    def set(self, status: Status, detail: str) -> None:
        self.status, self.detail, self.skip = status, detail, None

    def skipped(self, reason: Skip, why: str | None = None) -> None:
        """Not run, for `reason` (Skip.OTHER: in the words `why`)."""
        self.status, self.skip = Status.SKIPPED, reason
        self.detail = f"skipped: {why}" if reason is Skip.OTHER and why else reason.value


@dataclass(kw_only=True)
class ExploitSide:
    """An exploit's agent side: its script, and the patch collected after it (None: not
    collected)."""

    script: ExecOutcome
    said: str  # the script's last line (a not-applicable script says why)
    collect_failed: bool = False
    patch: bytes | None = None

    @property
    def patch_bytes(self) -> int | None:
        return None if self.patch is None else len(self.patch)


class SkippedError(Exception):
    """A stage that cannot run because another did not pass; the reason says which."""

    def __init__(self, reason: Skip, why: str | None = None) -> None:
        super().__init__(reason.value if why is None else f"skipped: {why}")
        self.reason = reason
        self.why = why


@dataclass(kw_only=True)
class TrialRun:
    agent_log: Path
    collect_log: Path
    verifier_log: Path
    solve: ExecOutcome | None = None
    collect: ExecOutcome | None = None
    test: ExecOutcome | None = None
    patch: bytes | None = None  # None until collected
    reward: Reward | None = None
    details: VerifierDetails | None = None
    reward_problem: str | None = None


@dataclass(kw_only=True)
class Prediction:
    """The oracle's verifier run on the patch its agent side is predicted to collect, beside
    that agent side. Its results are kept apart (under `<gate>/predicted/`) until the collected
    patch is known."""

    key: str
    patch: bytes | None  # None: nothing to predict (the agent side runs first, as without)
    future: Future[tuple[TrialRun, StageResult, GateData]] | None = None


@dataclass(kw_only=True)
class Execution:
    stages: dict[str, StageResult]
    kept: list[KeptContainer] = field(default_factory=list)
    interrupted: str | None = None  # the signal's name
    storage_mechanism: str | None = None
    # The tests nop and oracle saw, once both passed (sealed into the bundle afterwards).
    census: Census | None = None


class RunState:
    def __init__(
        self,
        plan: VerifyPlan,
        engine: Engine,
        *,
        run_dir: Path,
        env: ExecutionEnv,
        progress: Progress,
        on_stage: StageListener | None = None,
    ) -> None:
        self.plan = plan
        self.on_stage = on_stage
        self.engine = engine
        self.run_dir = run_dir
        self.env = env
        self.progress = progress
        self.stages = {name: StageResult() for name in GATES}
        self.kept: list[KeptContainer] = []
        self.storage_mechanism: str | None = None
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.interrupted = threading.Event()
        self.smoke_done = threading.Event()
        self.nop_done = threading.Event()
        self.smoke_passed = False
        self.census: Census | None = None
        self.census_ready = threading.Event()
        self.census_missing = "nop did not pass (a reward 0 would prove nothing)"
        self.opener = ThreadPoolExecutor(max_workers=2, thread_name_prefix="open")
        self.verifier_slots = threading.Semaphore(2 if plan.parallel_verifiers else 1)

    def run_stage(self, name: str, body: Callable[[StageResult], None]) -> None:
        stage = self.stages[name]
        started = time.monotonic()
        with self.lock:
            self.running.add(name)
        if self.on_stage is not None:
            self.on_stage(StageEvent(stage=name, status="running"))
        try:
            body(stage)
        except SkippedError as skip:
            stage.skipped(skip.reason, skip.why)
        except (InvalidTaskError, TaskFailedError) as exc:
            stage.set(Status.FAILED, exc.one_line())
        except RunnerError as exc:
            stage.set(Status.ERROR, exc.one_line())
        except ConnectionError as exc:
            # The transport to the engine broke under a call (a pipe, a reset, an ssh
            # connection gone): an infrastructure failure, not a bug of the runner.
            log.warning("stage %s: the connection to the Docker engine broke: %r", name, exc)
            stage.set(
                Status.ERROR,
                f"the connection to the Docker engine broke: {type(exc).__name__}: {exc}",
            )
        except Exception as exc:
            log.exception("internal error in stage %s", name)
            stage.set(
                Status.ERROR,
                f"internal error: {type(exc).__name__}: {exc}; the traceback is in "
                f"{self.run_dir / 'runner.log'}",
            )
        finally:
            stage.seconds = round(time.monotonic() - started, 3)
        # Not reached on an interrupt: the stage stays `running` for the handler to mark.
        with self.lock:
            self.running.discard(name)
        if not self.interrupted.is_set():
            self.progress(name, f"{stage.status.value}: {stage.detail}")
            if self.on_stage is not None:
                self.on_stage(
                    StageEvent(
                        stage=name,
                        status=stage.status.value,
                        detail=stage.detail,
                        seconds=stage.seconds,
                    )
                )

    def cleanup(self) -> None:
        if self.plan.keep:
            return
        try:
            self.engine.cleanup({LABEL_RUN: self.plan.run_id})
            if self.plan.remove_images:
                for build in self.plan.builds:
                    self.engine.remove_image(build.tag)
        except Exception as exc:  # cleanup must not hide the verdict
            log.warning("cleanup failed: %s", exc)

    def path(self, *parts: str) -> Path:
        path = self.run_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def keep(self, label: str, container: Container) -> None:
        if self.plan.keep:
            kept = KeptContainer(label=label, name=container.name, enter=container.enter_hint())
            with self.lock:
                self.kept.append(kept)
