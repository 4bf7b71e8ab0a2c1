"""What every stage of a run shares: the plan, the engine, the run directory, the stage results,
the events that order the stages, and how a stage runs (its errors mapped to a status)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from runner.base.errors import (
    InvalidTaskError,
    RunnerError,
    TaskFailedError,
)
from runner.base.logs import Truncation
from runner.judge import Judgement, Mark
from runner.model.canaries import CanaryPlan
from runner.model.census import Census
from runner.model.evidence import PolicyCheck, VerifierEvidence
from runner.model.layout import RunLayout
from runner.model.report import (
    GateData,
    KeptContainer,
    Status,
)
from runner.model.reward import (
    Reward,
    VerifierDetails,
)
from runner.model.stages import DOCKER_STAGES, Skip, Stage
from runner.plan.labels import LABEL_RUN
from runner.plan.runtime import (
    Container,
    Engine,
    ExecOutcome,
)
from runner.plan.types import VerifyPlan
from runner.run.context import ExecutionEnv, Progress
from runner.run.skips import SkippedError
from runner.run.slots import VerifierSlots
from runner.run.stopping import StoppingEngine

log = logging.getLogger(__name__)


PREDICTED_DIR = "predicted"  # a gate's verifier run on its predicted patch, until confirmed
# A run before the census (an exploit's, the probe's), graded without it, until it counts.
EARLY_DIR = "early"


@dataclass(frozen=True, kw_only=True)
class StageEvent:
    """A stage changed state: `running` when it starts, its status when it ends; or, with the
    status PROGRESS, said what it does now (`detail`: a progress line, runner.run.watch)."""

    stage: str
    status: str
    detail: str = ""
    seconds: float | None = None


StageListener = Callable[[StageEvent], None]
PROGRESS = "progress"


GATES = DOCKER_STAGES


@dataclass(kw_only=True)
class StageResult:
    status: Status = Status.SKIPPED
    detail: str = "not run"
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)
    truncated: list[Truncation] = field(default_factory=list)
    data: BaseModel | None = None
    skip: Skip | None = Skip.NOT_RUN  # None once the stage ran
    # Seconds spent waiting on other stages (nop's result, the census): not this stage's own
    # work, so a stage skipped after waiting does not report them.
    waited: float = 0.0
    # Marked by an interrupt's handler (mark): a thread still ending its body afterwards (its
    # containers removed under it) does not overwrite that with what it never judged.
    marked: bool = False

    def set(self, status: Status, detail: str) -> None:
        if self.marked:
            return
        self.status, self.detail, self.skip = status, detail, None

    def skipped(self, reason: Skip, why: str | None = None) -> None:
        """Not run, for `reason` (Skip.OTHER: in the words `why`; Skip.SETTLED: `why` is the
        gate that settled the verdict)."""
        if self.marked:
            return
        self.status, self.skip = Status.SKIPPED, reason
        if reason is Skip.OTHER and why:
            self.detail = f"skipped: {why}"
        elif reason is Skip.SETTLED and why:
            self.detail = f"{reason.value} {why}"
        else:
            self.detail = reason.value

    def mark(self, mark: Mark) -> None:
        """Take an interrupt's mark (a judge's): its judgement, or the reason it did not run;
        final."""
        self.marked = False
        if isinstance(mark, Judgement):
            self.set(mark.status, mark.detail)
        else:
            self.skipped(mark)
        self.marked = True

    def wait(self, event: threading.Event) -> None:
        """Wait for another stage's `event`, the time counted as waited."""
        started = time.monotonic()
        event.wait()
        self.waited += time.monotonic() - started


@dataclass(kw_only=True)
class ExploitSide:
    """An exploit's agent side: its script, and the patch collected after it (None: not
    collected)."""

    script: ExecOutcome
    said: str  # the script's last line (a not-applicable script says why)
    collect_failed: bool = False
    patch: bytes | None = None
    # The patch policy's verdict without tests, when it decided the exploit (the patch does not
    # apply, or nothing of it is left): no verifier ran for it.
    decided_by_policy: PolicyCheck | None = None
    # Left in the tree by the policy on a task whose runners prove it (judge.runner_proof): no
    # verifier ran for it.
    proved_for: tuple[str, ...] = ()

    @property
    def patch_bytes(self) -> int | None:
        return None if self.patch is None else len(self.patch)


@dataclass(kw_only=True)
class TrialRun:
    agent_log: Path
    collect_log: Path
    verifier_log: Path
    solve: ExecOutcome | None = None
    collect: ExecOutcome | None = None
    test: ExecOutcome | None = None
    patch: bytes | None = None  # None until collected
    # What its verifier left, read once (runner.run.collect.read_verifier).
    evidence: VerifierEvidence = field(default_factory=VerifierEvidence)

    @property
    def reward(self) -> Reward | None:
        return self.evidence.reward

    @property
    def details(self) -> VerifierDetails | None:
        return self.evidence.details

    @property
    def reward_problem(self) -> str | None:
        return self.evidence.reward_problem


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
    canaries: CanaryPlan = field(default_factory=CanaryPlan)
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
        self.engine: Engine = StoppingEngine(engine, self.check_stopping)
        self.run_dir = run_dir
        self.layout = RunLayout(run_dir)
        self.env = env
        self.progress = progress
        self.stages = {name: StageResult() for name in GATES}
        self.kept: list[KeptContainer] = []
        self.storage_mechanism: str | None = None
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.interrupted = threading.Event()
        # The first red gate settles the verdict (unless the plan keeps going): the stages
        # still running then (`cut`) and those not started are skipped for it.
        self.settled = threading.Event()
        self.settled_by: str | None = None
        self.cut: set[str] = set()
        self.smoke_done = threading.Event()
        self.nop_done = threading.Event()
        self.smoke_passed = False
        self.census: Census | None = None
        # A gate that passed only once its verifier ran without the canaries: which tests the
        # canaries changed the outcome of, by gate (the census then keeps none).
        self.canaries_interfered: dict[str, str] = {}
        # What the verifier of each gate that counts left (nop's, the oracle's), read once.
        self.evidence: dict[str, VerifierEvidence] = {}
        # The build caches nop's verifier warmed (a tar), for the side trials' verifiers.
        self.handed_caches: bytes | None = None
        self.census_ready = threading.Event()
        self.census_missing = "nop did not pass (a reward 0 would prove nothing)"
        self.opener = ThreadPoolExecutor(max_workers=2, thread_name_prefix="open")
        self.verifier_slots = VerifierSlots(2 if plan.parallel_verifiers else 1)

    def check_stopping(self) -> None:
        """Raise SkippedError once the run is stopping (an interrupt, a settled verdict): what
        the engine checks before it opens anything, and a side run before its tests."""
        if self.interrupted.is_set():
            raise SkippedError(Skip.INTERRUPTED)
        if self.settled.is_set():
            raise SkippedError(Skip.SETTLED)

    def _settle(self, name: str) -> None:
        """`name` ended red: the verdict is rejected whatever the others give, so they stop
        (the executor removes the run's containers). Everything that waits is woken."""
        with self.lock:
            if self.settled_by is not None:
                return
            self.settled_by = name
            self.cut = set(self.running) - {name}
        log.info("%s is red: the verdict is settled; the stages still running stop", name)
        self.settled.set()
        for event in (self.smoke_done, self.nop_done, self.census_ready):
            event.set()

    def _skip_settled(self, stage: StageResult) -> None:
        # Every gate builds on smoke: a red smoke is the reason they give.
        if self.settled_by == Stage.SMOKE:
            stage.skipped(Skip.SMOKE_RED)
        else:
            stage.skipped(Skip.SETTLED, self.settled_by)

    def _raised(self, name: str, stage: StageResult, exc: Exception) -> None:
        """What a stage's body raised, judged: after its containers were removed under it (a
        settled verdict, an interrupt) it says nothing and goes to runner.log only (the board
        once printed a FileNotFoundError of the hack gate's agent side over a red verdict); a
        broken engine connection is infrastructure; anything else a bug of the runner."""
        with self.lock:
            stopped = name in self.cut or self.interrupted.is_set()
        if stopped:
            log.info("stage %s raised after the run stopped it", name, exc_info=exc)
            stage.set(Status.ERROR, f"stopped: {type(exc).__name__} once its containers were gone")
        elif isinstance(exc, ConnectionError):
            # The transport to the engine broke under a call (a pipe, a reset, an ssh
            # connection gone): an infrastructure failure, not a bug of the runner.
            log.warning("stage %s: the connection to the Docker engine broke: %r", name, exc)
            stage.set(
                Status.ERROR,
                f"the connection to the Docker engine broke: {type(exc).__name__}: {exc}",
            )
        else:
            log.error("internal error in stage %s", name, exc_info=exc)
            stage.set(
                Status.ERROR,
                f"internal error: {type(exc).__name__}: {exc}; the traceback is in "
                f"{self.layout.runner_log}",
            )

    def run_stage(
        self, name: Stage, body: Callable[[StageResult], None], *, resume: bool = False
    ) -> None:
        """Run `body` as stage `name`, its outcome judged and announced. `resume`: the stage
        ended once and is reopened (the hack stage's census did not confirm it); its seconds
        add up."""
        stage = self.stages[name]
        before = stage.seconds if resume else 0.0
        if self.settled.is_set():
            self._skip_settled(stage)
            self._announce(name, stage)
            return
        started = time.monotonic()
        with self.lock:
            self.running.add(name)
        if self.on_stage is not None:
            self.on_stage(StageEvent(stage=name, status="running"))
        try:
            body(stage)
        except SkippedError as skip:
            if skip.reason is Skip.SETTLED:
                self._skip_settled(stage)
            else:
                stage.skipped(skip.reason, skip.why)
        except (InvalidTaskError, TaskFailedError) as exc:
            stage.set(Status.FAILED, exc.one_line())
        except RunnerError as exc:
            stage.set(Status.ERROR, exc.one_line())
        except Exception as exc:
            self._raised(name, stage, exc)
        finally:
            elapsed = time.monotonic() - started
            # A skipped stage's seconds are its own work, not its waits on others.
            own = elapsed - stage.waited if stage.status is Status.SKIPPED else elapsed
            stage.seconds = round(before + max(own, 0.0), 3)
        # Not reached on an interrupt raised in this thread: the stage stays `running` for the
        # handler to mark. Nor is a stage whose body ended after an interrupt elsewhere (its
        # containers were removed under it: what it ended with was never judged) taken off.
        with self.lock:
            if not self.interrupted.is_set():
                self.running.discard(name)
            cut = name in self.cut
        if cut and not (stage.skip is not None and stage.skip.on_another):
            # What it ended with once its containers were removed under it says nothing.
            self._skip_settled(stage)
        elif (
            stage.status is Status.FAILED
            and not self.plan.keep_going
            and not self.interrupted.is_set()
        ):
            self._settle(name)
        if not self.interrupted.is_set():
            self._announce(name, stage)

    def _announce(self, name: str, stage: StageResult) -> None:
        # A skipped stage's detail says so itself ("skipped: verdict settled by nop").
        words = (
            stage.detail
            if stage.detail.startswith(f"{stage.status.value}")
            else (f"{stage.status.value}: {stage.detail}")
        )
        self.progress(name, words)
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

    def adopt_kept(self, gate: str, apart: str) -> None:
        """A run of `gate` made apart (under `<gate>/<apart>`, runner.run.sides.trial_apart)
        counts as the gate's own: so does its kept container."""
        prefix = f"{gate}/{apart} "
        with self.lock:
            self.kept = [
                k.model_copy(update={"label": f"{gate} {k.label[len(prefix) :]}"})
                if k.label.startswith(prefix)
                else k
                for k in self.kept
            ]
