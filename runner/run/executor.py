"""Carry out a VerifyPlan on an engine the caller provides; return the stages' results.

Order: build -> smoke -> nop -> oracle -> determinism. A stage that does not pass skips what
depends on it (build and smoke gate everything after them; the oracle gates determinism; nop
and oracle run independently so an author sees both). A RunnerError becomes the stage's status
(`error` for infrastructure), any other exception `error` with its traceback in the run log, and
Ctrl-C/SIGTERM marks the running stage interrupted. The run's containers are removed on every
path unless the plan keeps them.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pydantic import BaseModel

from runner import judge
from runner.base.errors import (
    InfrastructureError,
    Interrupted,
    InvalidTaskError,
    RunnerError,
    TaskFailedError,
)
from runner.base.logs import Truncation
from runner.compile.exploits import NOT_APPLICABLE
from runner.compile.render import UNSEALED_CENSUS
from runner.engine.buildlog import is_task_step
from runner.model.census import (
    Census,
    CensusError,
    build_census,
    first_problem,
    ids_changed,
    read_policy,
    read_run,
    summarize,
)
from runner.model.predictions import prediction_key, tree_digest
from runner.model.report import (
    BuildData,
    DeterminismData,
    ExploitResult,
    GateData,
    HackData,
    ImageData,
    KeptContainer,
    ProbeResult,
    SelectorRate,
    SmokeData,
    Status,
)
from runner.model.reward import (
    DETAILS_FILE,
    PASS_TO_PASS_SELECTORS_FILE,
    REWARD_FILE,
    Reward,
    RewardError,
    VerifierDetails,
    parse_details,
    parse_reward,
)
from runner.model.settings import (
    MAX_AGENT_PATCH_BYTES,
)
from runner.plan.runtime import (
    BuildRequest,
    Container,
    Engine,
    ExecOutcome,
    FileToPut,
    Service,
)
from runner.plan.types import (
    LABEL_FROM_ID,
    LABEL_RUN,
    ContainerPlan,
    GateServices,
    ImageBuild,
    ProbePlan,
    ProbeRun,
    ServicePlan,
    TrialPlan,
    VerifyPlan,
)
from runner.run import collect as left
from runner.run.context import ExecutionEnv, Progress
from runner.run.images import build_derived_base, ensure_image

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


GATES = ("build", "smoke", "nop", "oracle", "determinism", "hack")


# A hack stage skipped for one of these reasons does not keep a task from being accepted.
HACK_DISABLED = "skipped: --no-hack-gate"


HACK_NONE = "skipped: no canned exploit applies to this task"


HACK_OPTIONAL = (HACK_DISABLED, HACK_NONE)


@dataclass(kw_only=True)
class StageResult:
    status: Status = Status.SKIPPED
    detail: str = "not run"
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)
    truncated: list[Truncation] = field(default_factory=list)
    data: BaseModel | None = None

    def set(self, status: Status, detail: str) -> None:
        self.status, self.detail = status, detail


@dataclass(kw_only=True)
class _ExploitSide:
    """An exploit's agent side: its script, and the patch collected after it (None: not
    collected)."""

    script: ExecOutcome
    said: str  # the script's last line (a not-applicable script says why)
    collect_failed: bool = False
    patch: bytes | None = None

    @property
    def patch_bytes(self) -> int | None:
        return None if self.patch is None else len(self.patch)


class _SkippedError(Exception):
    """A stage that cannot run because another did not pass; the message says which."""


@dataclass(kw_only=True)
class _TrialRun:
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
class _Prediction:
    """The oracle's verifier run on the patch its agent side is predicted to collect, beside
    that agent side. Its results are kept apart (under `<gate>/predicted/`) until the collected
    patch is known."""

    key: str
    patch: bytes | None  # None: nothing to predict (the agent side runs first, as without)
    future: Future[tuple[_TrialRun, StageResult, GateData]] | None = None


@dataclass(kw_only=True)
class Execution:
    stages: dict[str, StageResult]
    kept: list[KeptContainer] = field(default_factory=list)
    interrupted: str | None = None  # the signal's name
    storage_mechanism: str | None = None
    # The tests nop and oracle saw, once both passed (sealed into the bundle afterwards).
    census: Census | None = None


class Executor:
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
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._interrupted = threading.Event()
        self._smoke_done = threading.Event()
        self._nop_done = threading.Event()
        self._smoke_passed = False
        self._census: Census | None = None
        self._census_ready = threading.Event()
        self._census_missing = "nop did not pass (a reward 0 would prove nothing)"
        self._opener = ThreadPoolExecutor(max_workers=2, thread_name_prefix="open")
        self._verifier_slots = threading.Semaphore(2 if plan.parallel_verifiers else 1)

    # ---- the run ---------------------------------------------------------------------------

    def run(self) -> Execution:
        """build, then smoke, both agent sides and the hack gate's at once (the verifier
        containers start meanwhile), then the two verifiers once smoke passed; determinism once
        the oracle passed, the hack gate's verifiers once nop did."""
        interrupted: str | None = None
        pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gate")
        try:
            self._stage("build", self._build)
            if self.stages["build"].status is Status.PASSED:
                # The oracle's agent side is the longest path: it starts first.
                futures = [pool.submit(self._oracle_and_determinism), pool.submit(self._nop)]
                if self.plan.hack is not None:
                    futures.append(pool.submit(self._stage, "hack", self._hack))
                else:
                    self.stages["hack"].detail = HACK_NONE if self.plan.hack_gate else HACK_DISABLED
                if self.plan.smoke.container is not None:
                    futures.append(pool.submit(self._run_smoke))
                for future in futures:
                    future.result()
            else:
                for name in ("smoke", "nop", "oracle", "hack"):
                    self.stages[name].detail = "skipped: build did not pass"
                self.stages["determinism"].detail = "skipped: oracle did not pass"
        except (KeyboardInterrupt, Interrupted) as exc:
            interrupted = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
            self._interrupted.set()
        finally:
            self._smoke_done.set()
            self._nop_done.set()
            self._census_ready.set()
            self._cleanup()
            pool.shutdown(wait=interrupted is None, cancel_futures=True)
            self._opener.shutdown(wait=interrupted is None, cancel_futures=True)
        if interrupted is not None:
            with self._lock:
                running = set(self._running)
            for name, stage in self.stages.items():
                if name in running:
                    stage.set(
                        Status.ERROR,
                        f"interrupted ({interrupted}); the run's containers were removed",
                    )
                elif stage.detail == "not run":
                    stage.detail = "skipped: interrupted"
        return Execution(
            stages=self.stages,
            kept=self.kept,
            interrupted=interrupted,
            storage_mechanism=self.storage_mechanism,
            census=self._census,
        )

    def _stage(self, name: str, body: Callable[[StageResult], None]) -> None:
        stage = self.stages[name]
        started = time.monotonic()
        with self._lock:
            self._running.add(name)
        if self.on_stage is not None:
            self.on_stage(StageEvent(stage=name, status="running"))
        try:
            body(stage)
        except _SkippedError as skip:
            stage.detail = str(skip)
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
        with self._lock:
            self._running.discard(name)
        if not self._interrupted.is_set():
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

    def _cleanup(self) -> None:
        if self.plan.keep:
            return
        try:
            self.engine.cleanup({LABEL_RUN: self.plan.run_id})
            if self.plan.remove_images:
                for build in self.plan.builds:
                    self.engine.remove_image(build.tag)
        except Exception as exc:  # cleanup must not hide the verdict
            log.warning("cleanup failed: %s", exc)

    def _path(self, *parts: str) -> Path:
        path = self.run_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _keep(self, label: str, container: Container) -> None:
        if self.plan.keep:
            kept = KeptContainer(label=label, name=container.name, enter=container.enter_hint())
            with self._lock:
                self.kept.append(kept)

    # ---- build -----------------------------------------------------------------------------

    def _build(self, stage: StageResult) -> None:
        plan = self.plan
        data = BuildData(base_image=plan.base.image, from_image=plan.base.from_image)
        stage.data = data
        self.progress("build", f"base image {plan.base.image}")
        base = ensure_image(self.engine, plan.base.image)
        data.base_image_id = base.id
        data.base_image_digests = list(base.repo_digests)
        from_id = base.id
        if plan.base.derived is not None:
            log_path = self._path("build", "base.log")
            from_id = build_derived_base(
                self.engine,
                plan.base,
                base.id,
                env=self.env,
                facts=self.plan.facts,
                network=plan.builds[0].network,
                log_path=log_path,
                max_log_bytes=plan.max_log_bytes,
                progress=self.progress,
            )
        for build in plan.builds:
            if not self._image(build, from_id, stage, data):
                return
        cached = all(image.cached for image in data.images.values())
        stage.set(
            Status.PASSED, "agent and verifier images ready" + (" (cached)" if cached else "")
        )

    def _build_line(self, line: str) -> None:
        if line.startswith("Step "):
            self.progress("build", line)
        else:
            log.debug("%s", line)

    def _image(self, build: ImageBuild, from_id: str, stage: StageResult, data: BuildData) -> bool:
        existing = self.engine.image(build.tag)
        if existing is not None and existing.labels.get(LABEL_FROM_ID) == from_id:
            data.images[build.kind] = ImageData(tag=build.tag, id=existing.id, cached=True)
            self.progress("build", f"{build.kind} image cached ({build.tag})")
            return True
        log_path = self._path("build", f"{build.kind}.log")
        log_path.unlink(missing_ok=True)
        stage.logs.append(str(log_path))
        self.progress("build", f"building {build.kind} image {build.tag}")
        proxies = {k: v for k, v in self.env.proxies.items() if k in build.proxy_build_args}
        outcome = self.engine.build(
            BuildRequest(
                context=Path(build.context),
                tag=build.tag,
                buildargs={**build.build_args, **proxies},
                labels={**build.labels, LABEL_FROM_ID: from_id},
                memory_mb=build.limits.memory_mb,
                cpuset=build.limits.cpuset,
                timeout_seconds=build.timeout_seconds,
                network=build.network,
            ),
            log_path,
            limit=self.plan.max_log_bytes,
            on_line=self._build_line,
        )
        if outcome.truncation:
            stage.truncated.append(outcome.truncation)
        data.images[build.kind] = ImageData(
            tag=build.tag,
            id=outcome.image_id,
            cached=False,
            seconds=round(outcome.seconds, 3),
            cached_steps=outcome.cached_steps,
            total_steps=outcome.total_steps,
        )
        if outcome.ok:
            return True
        data.failed_image = build.kind
        data.failed_step = outcome.failed_step
        data.step_number = outcome.step_number or None
        data.exit_code = outcome.exit_code
        data.timed_out = outcome.timed_out
        data.tail = outcome.tail
        if outcome.last_layer:
            data.last_good_layer = outcome.last_layer
            data.debug_command = f"docker run -it --rm {outcome.last_layer} bash"
        judgement = judge.judge_build(
            build.kind,
            outcome,
            task_fault=is_task_step(outcome.failed_step, build.task_steps),
            memory_mb=build.limits.memory_mb,
            log_path=str(log_path),
        )
        stage.set(judgement.status, judgement.detail)
        return False

    # ---- smoke -----------------------------------------------------------------------------

    def _run_smoke(self) -> None:
        """Smoke in a container of its own (a contract's smoke command, which may write)."""
        try:
            self._stage("smoke", self._smoke)
        finally:
            self._smoke_finished()

    def _smoke_finished(self) -> None:
        self._smoke_passed = self.stages["smoke"].status is Status.PASSED
        self._smoke_done.set()

    def _smoke(self, stage: StageResult) -> None:
        smoke = self.plan.smoke
        assert smoke.container is not None
        with (
            self._services(smoke.services, "smoke", stage) as network,
            self.engine.container(smoke.container, env=self.env.proxies, keep=self.plan.keep) as c,
        ):
            if network is not None and smoke.container.network != network:
                c.connect(network)
            self._smoke_in(c, smoke.container, stage)
            self._keep("smoke", c)

    def _smoke_in(self, container: Container, plan: ContainerPlan, stage: StageResult) -> None:
        """Run the smoke check in `container` (its own, or the nop verifier's: the default
        check only reads) and judge it."""
        log_path = self._path("smoke", "smoke.log")
        stage.logs.append(str(log_path))
        outcome = container.exec(self.plan.smoke.run, log_path, limit=self.plan.max_log_bytes)
        self.storage_mechanism = container.storage_mechanism
        if outcome.truncation:
            stage.truncated.append(outcome.truncation)
        lines = left.tail_lines(log_path)
        limits = judge.limits_data(outcome, None, self.storage_mechanism)
        stage.data = SmokeData(
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            answers=[ln for ln in lines if ln.strip() and not ln.startswith("+ ")][:40],
            output=lines[-20:],
            limits=limits,
        )
        judgement = judge.judge_smoke(
            outcome,
            lines,
            limits,
            storage_mb=plan.limits.storage_mb,
            memory_mb=plan.limits.memory_mb,
            pids=plan.limits.pids,
            log_path=str(log_path),
        )
        stage.set(judgement.status, judgement.detail)

    def _after_smoke(self) -> None:
        """Verifiers run only once smoke passed (the seed: smoke before the nop split)."""
        self._smoke_done.wait()
        if self._interrupted.is_set():
            raise _SkippedError("skipped: interrupted")
        if not self._smoke_passed:
            raise _SkippedError("skipped: smoke did not pass")

    # ---- nop and oracle --------------------------------------------------------------------

    def _oracle_and_determinism(self) -> None:
        """Determinism (the flakiness probe) starts as soon as the oracle passed, beside the
        hack gate."""
        self._stage("oracle", partial(self._trial, self.plan.trial("oracle")))
        self._seal()
        if self._interrupted.is_set():
            return
        if self.stages["oracle"].status is Status.PASSED:
            self._stage("determinism", self._determinism)
        else:
            self.stages["determinism"].detail = (
                "skipped: oracle did not pass"
                if self.stages["oracle"].detail != "skipped: smoke did not pass"
                else "skipped: smoke did not pass"
            )

    def _seal(self) -> None:
        """The census of the tests nop and the oracle saw, once both passed: every later
        verifier (the probe's, the hack gate's, `grade`'s) grades by it."""
        try:
            self._nop_done.wait()
            if self._interrupted.is_set():
                return
            if self.stages["nop"].status is not Status.PASSED:
                return
            if self.stages["oracle"].status is not Status.PASSED:
                self._census_missing = (
                    "oracle did not pass (there is no census of its tests to grade by)"
                )
                return
            oracle = self.run_dir / "oracle" / "logs" / "verifier"
            fail_to_pass = read_run(oracle, "fail_to_pass")
            self._census_missing = ""
            if fail_to_pass is None:
                # A verifier that records no evidence (a bundle compiled before it did): later
                # verifiers judge as nop and the oracle did.
                log.warning("the oracle's verifier left no evidence of its tests: no census")
                return
            try:
                self._census = build_census(
                    nop_fail_to_pass=read_run(
                        self.run_dir / "nop" / "logs" / "verifier", "fail_to_pass"
                    ),
                    oracle_fail_to_pass=fail_to_pass,
                    oracle_pass_to_pass=read_run(oracle, "pass_to_pass"),
                    run_id=self.plan.run_id,
                    runner_version=self.plan.runner_version,
                )
            except CensusError as exc:
                self._census_missing = str(exc)
        finally:
            self._census_ready.set()

    def _census_file(self, trial: TrialPlan) -> FileToPut:
        """The census a verifier grades by: none yet for nop and the oracle (they record), the
        sealed one for every other (put in before the start, whatever the image holds)."""
        census = self._census if trial.census == "sealed" else None
        data = census.to_json().encode() if census is not None else UNSEALED_CENSUS
        return FileToPut(directory="/tests", name="expected-tests.json", data=data, mode=0o600)

    def _nop(self) -> None:
        try:
            self._stage("nop", partial(self._trial, self.plan.trial("nop")))
        finally:
            self._nop_done.set()

    def _trial(self, trial: TrialPlan, stage: StageResult) -> None:
        gate = trial.gate
        data = GateData()
        stage.data = data
        evidence = _TrialRun(
            agent_log=self._path(gate, "agent.log"),
            collect_log=self._path(gate, "collect.log"),
            verifier_log=self._path(gate, "verifier.log"),
        )
        with contextlib.ExitStack() as stack:
            if trial.agent is None:
                self._trial_without_agent(trial, stage, data, evidence, stack)
            else:
                opening: list[Future[Container]] = []
                prediction = self._predict(trial)

                def agent_started() -> None:
                    # The verifier container (and its services) start once the agent's has,
                    # while the agent works: the agent side is the longest path, and the engine
                    # starts one container faster than several at once (measured on 20.10:
                    # 0.23 s alone, 0.44 s for three together). With a prediction, the
                    # predicted run's verifier is already starting.
                    if prediction is None or prediction.future is None:
                        opening.append(
                            self._opener.submit(self._open_verifier, trial, stage, stack)
                        )

                try:
                    self._agent_side(trial, trial.agent, stage, data, evidence, agent_started)
                    self._after_smoke()
                    if evidence.patch is not None and not self._predicted_run_counts(
                        trial, stage, data, evidence, prediction
                    ):
                        verifier = (
                            opening[0].result()
                            if opening
                            else self._open_verifier(trial, stage, stack)
                        )
                        self._verifier_side(trial, stage, data, evidence, verifier)
                finally:
                    # Whatever happened, the container must be in the stack before it unwinds
                    # (and the predicted run's container removed before the stage ends).
                    for future in opening:
                        with contextlib.suppress(Exception):
                            future.result()
                    if prediction is not None and prediction.future is not None:
                        with contextlib.suppress(Exception):
                            prediction.future.result()
        self._judge_trial(trial, stage, data, evidence)
        if (
            stage.status is Status.FAILED
            and trial.online_verifier is not None
            and evidence.patch is not None
            and evidence.reward is not None
            and judge.tests_failed(trial.gate, evidence.reward)
        ):
            self._online(trial, stage, data, evidence.patch)

    def _prediction_key(self, trial: TrialPlan) -> str | None:
        """What makes the agent side's patch: the agent image (its tag, a digest of its build
        inputs, so a prediction outlives a rebuild of the same inputs), the solution's files and
        the solve and collect steps. None: not predictable (no solution)."""
        if trial.agent is None or not trial.solution_dir or trial.solve is None:
            return None
        assert trial.collect is not None
        try:
            solution = tree_digest(Path(trial.solution_dir))
        except OSError:
            return None
        return prediction_key(
            {
                "task": self.plan.task_id,
                "image": trial.agent.image,
                "solution": solution,
                "workdir": trial.agent.workdir,
                "env": trial.agent.env,
                "solve": trial.solve.model_dump(exclude={"timeout_seconds"}),
                "collect": trial.collect.model_dump(exclude={"timeout_seconds"}),
                "patch": trial.agent_patch,
            }
        )

    def _predict(self, trial: TrialPlan) -> _Prediction | None:
        """Start the verifier on the predicted patch, if there is one (runner.model.predictions);
        the agent side runs meanwhile."""
        store = self.env.predictions
        key = self._prediction_key(trial) if store is not None else None
        if store is None or key is None:
            return None
        prediction = _Prediction(key=key, patch=store.predict(key))
        if prediction.patch is not None:
            log.debug(
                "%s: verifying the predicted patch (%d bytes) beside the agent side",
                trial.gate,
                len(prediction.patch),
            )
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="predicted")
            prediction.future = pool.submit(self._predicted_run, trial, prediction.patch)
            pool.shutdown(wait=False)
        return prediction

    def _predicted_run(
        self, trial: TrialPlan, patch: bytes
    ) -> tuple[_TrialRun, StageResult, GateData]:
        scratch, data = StageResult(), GateData()
        # Not gated on smoke, unlike the others: its result counts only after the caller has
        # waited for smoke to pass (a red smoke skips the gate, whatever ran here).
        run = self._verify_patch(
            _predicted_trial(trial), patch, scratch, data, before_tests=self._unless_interrupted
        )
        return run, scratch, data

    def _unless_interrupted(self) -> None:
        if self._interrupted.is_set():
            raise _SkippedError("skipped: interrupted")

    def _predicted_run_counts(
        self,
        trial: TrialPlan,
        stage: StageResult,
        data: GateData,
        evidence: _TrialRun,
        prediction: _Prediction | None,
    ) -> bool:
        """Record the collected patch for the next run; when it is byte-for-byte the predicted
        one, the predicted run is this gate's verifier run: its logs move into place. Otherwise
        (no prediction, another patch, or the predicted run did not finish) the caller verifies
        the collected patch in a fresh verifier."""
        if prediction is None or evidence.patch is None or self.env.predictions is None:
            return False
        self.env.predictions.record(prediction.key, evidence.patch, predicted=prediction.patch)
        if prediction.future is None or prediction.patch is None:
            return False
        if evidence.patch != prediction.patch:
            data.predicted_patch = "mismatched"
            log.info(
                "%s: the collected patch (%d bytes) is not the predicted one (%d bytes): it is "
                "verified in a fresh verifier; the predicted run is set aside in %s",
                trial.gate,
                len(evidence.patch),
                len(prediction.patch),
                self.run_dir / trial.gate / PREDICTED_DIR,
            )
            return False
        try:
            run, scratch, predicted_data = prediction.future.result()
        except _SkippedError:
            raise
        except Exception as exc:
            log.warning(
                "%s: the predicted run did not finish (%s); verifying again", trial.gate, exc
            )
            return False
        gate_dir = self.run_dir / trial.gate
        moved = gate_dir / PREDICTED_DIR
        for name in ("verifier.log", "logs", "services"):
            if (moved / name).exists():
                (moved / name).rename(gate_dir / name)
        shutil.rmtree(moved, ignore_errors=True)
        old, new = str(moved), str(gate_dir)
        stage.logs.extend(path.replace(old, new, 1) for path in scratch.logs)
        stage.truncated.extend(
            Truncation(
                path=t.path.replace(old, new, 1),
                original_bytes=t.original_bytes,
                kept_bytes=t.kept_bytes,
            )
            for t in scratch.truncated
        )
        evidence.test = run.test
        evidence.reward, evidence.details = run.reward, run.details
        evidence.reward_problem = run.reward_problem
        data.verifier_exit_code = predicted_data.verifier_exit_code
        data.timed_out = predicted_data.timed_out
        data.predicted_patch = "confirmed"
        prefix = f"{trial.gate}/{PREDICTED_DIR} "
        with self._lock:  # a kept container of the run that counts is the gate's own
            self.kept = [
                k.model_copy(update={"label": f"{trial.gate} {k.label[len(prefix) :]}"})
                if k.label.startswith(prefix)
                else k
                for k in self.kept
            ]
        log.debug(
            "%s: the collected patch is the predicted one: its verifier run counts", trial.gate
        )
        return True

    def _online(self, trial: TrialPlan, stage: StageResult, data: GateData, patch: bytes) -> None:
        """The red gate's run again with the internet on: a test that fails only because the
        network is off is said to be one (the task must then declare testsNetwork: public)."""
        assert trial.online_verifier is not None
        online = trial.model_copy(
            update={
                "gate": f"{trial.gate}/online",
                "verifier": trial.online_verifier,
                "services": trial.online_services,
                "online_verifier": None,
                "online_services": None,
            }
        )
        run = self._verify_patch(online, patch)
        stage.logs.append(str(run.verifier_log))
        passed = run.reward is not None and judge.evaluate_gate(trial.gate, run.reward)[0]
        data.passes_online = passed
        if passed:
            stage.detail = (
                f"{stage.detail}; the tests ran with the network off, and pass with it on: they "
                'need the network (declare environment.testsNetwork: "public"); see '
                f"{self.run_dir / trial.gate / 'online'}"
            )

    def _trial_without_agent(
        self,
        trial: TrialPlan,
        stage: StageResult,
        data: GateData,
        run: _TrialRun,
        stack: contextlib.ExitStack,
    ) -> None:
        """nop: an agent that does nothing leaves the committed post-setup tree as it is, so
        its patch is empty without a container. When the plan shares it, the smoke check runs
        first in this verifier's container, and its result gates this verifier and the other."""
        run.patch = b""
        self._save_patch(trial, stage, data, run)
        if self.plan.smoke.container is None:
            opened: list[Container] = []

            def smoke(smoke_stage: StageResult) -> None:
                opened.append(self._open_verifier(trial, stage, stack, run.patch))
                self._smoke_in(opened[0], trial.verifier, smoke_stage)

            try:
                self._stage("smoke", smoke)
            finally:
                self._smoke_finished()
            self._after_smoke()
            verifier = opened[0]
        else:
            verifier = self._open_verifier(trial, stage, stack, run.patch)
            self._after_smoke()
        self._verifier_side(trial, stage, data, run, verifier, patched=True)

    def _open_verifier(
        self,
        trial: TrialPlan,
        stage: StageResult,
        stack: contextlib.ExitStack,
        patch: bytes | None = None,
    ) -> Container:
        """The trial's verifier container, started (with its services). A patch known already
        goes in before the start (then `_verifier_side(..., patched=True)`)."""
        network = stack.enter_context(self._services(trial.services, trial.gate, stage))
        census = self._census_file(trial)
        files = (census,) if patch is None else (census, _patch_file(patch))
        verifier = stack.enter_context(
            self.engine.container(
                trial.verifier, env=self.env.proxies, keep=self.plan.keep, files=files
            )
        )
        if network is not None and trial.verifier.network != network:
            verifier.connect(network)  # a public verifier also joins its services' network
        log.debug("%s: verifier container started", trial.gate)
        return verifier

    @contextlib.contextmanager
    def _services(
        self, services: GateServices | None, gate: str, stage: StageResult
    ) -> Iterator[str | None]:
        """Yields the network's name (what containers are created on or connected to)."""
        """The gate's services on their own network, healthy, logs saved afterwards. The
        agent container never joins it: only the verifier (and smoke) do."""
        if services is None:
            yield None
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(
                self.engine.network(
                    services.network, labels=services.network_labels, keep=self.plan.keep
                )
            )
            network = services.network
            running: list[tuple[ServicePlan, Service]] = []
            try:
                for plan in services.services:
                    ensure_image(self.engine, plan.image, what=f"service {plan.name}'s image")
                    running.append(
                        (
                            plan,
                            stack.enter_context(
                                self.engine.service(plan, network=network, keep=self.plan.keep)
                            ),
                        )
                    )
                if self.plan.keep:
                    with self._lock:
                        self.kept.extend(
                            KeptContainer(
                                label=f"{gate} service {plan.name}",
                                name=plan.container,
                                enter=f"docker exec -it {plan.container} sh",
                            )
                            for plan, _ in running
                        )
                self.progress(gate, f"waiting for {', '.join(p.name for p, _ in running)}")
                self._wait_healthy(running, services.ready_timeout_seconds, gate)
                yield network
            finally:
                for plan, service in running:
                    path = self._path(gate, "services", f"{plan.name}.log")
                    service.save_logs(path, limit=self.plan.max_log_bytes)
                    stage.logs.append(str(path))

    def _wait_healthy(
        self, running: list[tuple[ServicePlan, Service]], timeout: float, gate: str
    ) -> None:
        deadline = time.monotonic() + timeout
        pending = list(running)
        while pending:
            for plan, service in list(pending):
                state = service.health()
                if state == "healthy":
                    pending.remove((plan, service))
                elif state in ("unhealthy", "exited"):
                    raise TaskFailedError(self._service_reason(plan, service, gate, f"is {state}"))
            if not pending:
                return
            if time.monotonic() > deadline:
                plan, service = pending[0]
                raise TaskFailedError(
                    self._service_reason(
                        plan, service, gate, f"did not become healthy within {int(timeout)}s"
                    )
                )
            time.sleep(0.2)

    def _service_reason(self, plan: ServicePlan, service: Service, gate: str, what: str) -> str:
        path = self._path(gate, "services", f"{plan.name}.log")
        lines = service.save_logs(path, limit=self.plan.max_log_bytes)
        tail = " / ".join(line.strip() for line in lines[-3:] if line.strip())
        return (
            f"service {plan.name} {what}"
            + (f"; its last lines: {tail}" if tail else "")
            + (f"; see {path}")
        )

    def _agent_side(
        self,
        trial: TrialPlan,
        plan: ContainerPlan,
        stage: StageResult,
        data: GateData,
        run: _TrialRun,
        started: Callable[[], None],
    ) -> None:
        assert trial.collect is not None
        limit = self.plan.max_log_bytes
        with self.engine.container(plan, env=self.env.proxies, keep=self.plan.keep) as agent:
            log.debug("%s: agent container started", trial.gate)
            started()
            self.storage_mechanism = agent.storage_mechanism
            if trial.solution_dir and trial.solve:
                agent.put_directory(Path(trial.solution_dir), "/solution")
                stage.logs.append(str(run.agent_log))
                run.solve = agent.exec(trial.solve, run.agent_log, limit=limit)
                data.solve_exit_code = run.solve.exit_code
                if run.solve.timed_out:
                    data.timed_out = "solve"
                if run.solve.truncation:
                    stage.truncated.append(run.solve.truncation)
            if run.solve is None or (run.solve.exit_code == 0 and not run.solve.timed_out):
                stage.logs.append(str(run.collect_log))
                run.collect = agent.exec(trial.collect, run.collect_log, limit=limit)
                data.collect_exit_code = run.collect.exit_code
                if run.collect.timed_out:
                    data.timed_out = "collect"
                if run.collect.exit_code == 0 and not run.collect.timed_out:
                    found = agent.get_file(trial.agent_patch, limit=MAX_AGENT_PATCH_BYTES)
                    run.patch = found or b""
            self._keep(f"{trial.gate} agent", agent)
        log.debug("%s: agent side done", trial.gate)
        self._save_patch(trial, stage, data, run)

    def _save_patch(
        self, trial: TrialPlan, stage: StageResult, data: GateData, run: _TrialRun
    ) -> None:
        if run.patch is not None:
            patch_path = self._path(trial.gate, "agent.patch")
            patch_path.write_bytes(run.patch)
            stage.logs.append(str(patch_path))
            data.agent_patch_bytes = len(run.patch)

    def _verifier_side(
        self,
        trial: TrialPlan,
        stage: StageResult,
        data: GateData,
        run: _TrialRun,
        verifier: Container,
        *,
        patched: bool = False,
    ) -> None:
        """test.sh on `run.patch` (copied in now, unless `patched`: it went in before the
        start), then the verifier's logs out."""
        assert run.patch is not None
        limit = trial.log_bytes or self.plan.max_log_bytes
        log.debug("%s: verifier side starts (agent patch %d bytes)", trial.gate, len(run.patch))
        if not patched:
            file = _patch_file(run.patch)
            verifier.put_file(file.directory, file.name, file.data)
        stage.logs.append(str(run.verifier_log))
        with self._verifier_slots:
            log.debug("%s: test.sh starts", trial.gate)
            run.test = verifier.exec(trial.test, run.verifier_log, limit=limit)
            log.debug("%s: test.sh ended (exit %s)", trial.gate, run.test.exit_code)
        data.verifier_exit_code = run.test.exit_code
        if run.test.timed_out:
            data.timed_out = "verifier"
        if run.test.truncation:
            stage.truncated.append(run.test.truncation)
        truncated = verifier.copy_out(
            trial.verifier_logs, self._path(trial.gate, "logs"), limit=limit
        )
        stage.truncated.extend(truncated or [])
        self._keep(f"{trial.gate} verifier", verifier)
        run.reward, run.details, run.reward_problem = self._read_reward(trial.gate, stage)
        log.debug("%s: verifier side done", trial.gate)

    def _judge_trial(
        self, trial: TrialPlan, stage: StageResult, data: GateData, run: _TrialRun
    ) -> None:
        data.reward, data.details = run.reward, run.details
        last = run.test or run.collect or run.solve
        data.limits = judge.limits_data(last, run.details, self.storage_mechanism)
        limits = trial.verifier.limits
        judgement = judge.judge_trial(
            judge.TrialEvidence(
                gate=trial.gate,
                solve=run.solve,
                collect=run.collect,
                test=run.test,
                reward=run.reward,
                details=run.details,
                reward_problem=run.reward_problem,
                limits=data.limits,
                agent_timeout=trial.solve.timeout_seconds if trial.solve else 0.0,
                verifier_timeout=trial.test.timeout_seconds,
                storage_mb=limits.storage_mb,
                memory_mb=limits.memory_mb,
                pids=limits.pids,
                agent_log=str(run.agent_log),
                collect_log=str(run.collect_log),
                verifier_log=str(run.verifier_log),
                last_lines={
                    name: left.last_line(
                        self.run_dir / trial.gate / "logs" / "verifier" / f"{name}.log"
                    )
                    for name in ("fail_to_pass", "pass_to_pass")
                },
                problems={
                    name: problem
                    for name in ("fail_to_pass", "fail_to_pass_repeat", "pass_to_pass")
                    if (problem := first_problem(self._verifier_dir(trial), name))
                },
            )
        )
        directory = self._verifier_dir(trial)
        data.evidence = summarize(directory)
        data.undone = [c for c in read_policy(directory) if c.verdict != "keep"]
        data.discarded = left.discarded(directory)
        data.selectors = left.selectors(directory)
        data.pass_to_pass_selectors = left.selectors(directory, name=PASS_TO_PASS_SELECTORS_FILE)
        verdict = judge.judge_selectors(
            judgement,
            gate=trial.gate,
            passing_alone=[s.selector for s in data.selectors if s.exit_code == 0],
            breaking_alone=[s.selector for s in data.pass_to_pass_selectors if s.exit_code != 0],
            undone=judge.undone_words(data.undone, data.discarded) if data.discarded else "",
        )
        stage.set(verdict.status, verdict.detail)

    def _verifier_dir(self, trial: TrialPlan) -> Path:
        return self.run_dir / trial.gate / "logs" / "verifier"

    def _read_reward(
        self, gate: str, stage: StageResult
    ) -> tuple[Reward | None, VerifierDetails | None, str | None]:
        directory = self.run_dir / gate / "logs" / "verifier"
        reward_path = directory / REWARD_FILE
        details_path = directory / DETAILS_FILE
        if not reward_path.is_file():
            return None, None, None
        stage.logs.append(str(reward_path))
        try:
            reward = parse_reward(reward_path.read_bytes())
        except RewardError as exc:
            return None, None, str(exc)
        details = None
        if details_path.is_file():
            stage.logs.append(str(details_path))
            try:
                details = parse_details(details_path.read_bytes())
            except RewardError as exc:
                log.warning("%s: %s", details_path, exc)
        return reward, details, None

    # ---- hack ------------------------------------------------------------------------------

    def _hack(self, stage: StageResult) -> None:
        """Each canned exploit runs as the agent in one agent container (reset to the post-setup
        tree between them); each collected patch then goes to a fresh verifier, once nop has
        shown that the tests fail on the base (else a reward 0 would prove nothing)."""
        plan = self.plan.hack
        assert plan is not None
        data = HackData()
        stage.data = data
        limit = self.plan.max_log_bytes
        sides: dict[str, _ExploitSide] = {}
        verifying: dict[str, Future[_TrialRun]] = {}
        # Each collected patch goes to its verifier at once (once nop passed), while the next
        # exploit runs in the agent container.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="hack") as pool:
            with self.engine.container(
                plan.agent, env=self.env.proxies, keep=self.plan.keep
            ) as agent:
                for exploit in plan.exploits:
                    directory = self._path("hack", exploit.name, "exploit.log").parent
                    script_log = directory / "exploit.log"
                    stage.logs.append(str(script_log))
                    ran = agent.exec(exploit.run, script_log, limit=limit)
                    side = sides[exploit.name] = _ExploitSide(
                        script=ran, said=left.last_meaningful(script_log)
                    )
                    if ran.exit_code == 0 and not ran.timed_out:
                        collect = agent.exec(plan.collect, directory / "collect.log", limit=limit)
                        if collect.exit_code != 0 or collect.timed_out:
                            side.collect_failed = True
                        else:
                            side.patch = (
                                agent.get_file(
                                    exploit.trial.agent_patch, limit=MAX_AGENT_PATCH_BYTES
                                )
                                or b""
                            )
                            (directory / "agent.patch").write_bytes(side.patch)
                            if side.patch:
                                verifying[exploit.name] = pool.submit(
                                    self._verify_exploit, exploit.trial, side.patch
                                )
                    reset = agent.exec(plan.reset, directory / "reset.log", limit=limit)
                    if reset.exit_code != 0 or reset.timed_out:
                        raise InfrastructureError(
                            f"resetting the hack gate's agent container after {exploit.name} "
                            f"failed; see {directory / 'reset.log'}"
                        )
                self._keep("hack agent", agent)
            self._after_census()
            runs = {name: future.result() for name, future in verifying.items()}
        results = []
        for exploit in plan.exploits:
            side = sides[exploit.name]
            run = runs.get(exploit.name)
            verifier_dir = self.run_dir / "hack" / exploit.name / "logs" / "verifier"
            policy = read_policy(verifier_dir)
            undone = [c for c in policy if c.verdict != "keep"]
            problem = next(
                (
                    p
                    for name in ("fail_to_pass", "pass_to_pass")
                    if (p := first_problem(verifier_dir, name))
                ),
                None,
            )
            outcome, detail = judge.judge_exploit(
                judge.ExploitEvidence(
                    name=exploit.name,
                    summary=exploit.summary,
                    script_exit=side.script.exit_code,
                    script_timed_out=side.script.timed_out,
                    script_said=side.said,
                    collect_failed=side.collect_failed,
                    patch_bytes=side.patch_bytes,
                    test=run.test if run else None,
                    reward=run.reward if run else None,
                    reward_problem=run.reward_problem if run else None,
                    undone=judge.undone_words(undone, [c.path for c in undone]) if undone else "",
                    kept_changes=any(c.verdict == "keep" for c in policy) or not policy,
                    problem=problem,
                ),
                not_applicable=NOT_APPLICABLE,
            )
            patch_path = self.run_dir / "hack" / exploit.name / "agent.patch"
            patch = str(patch_path) if patch_path.is_file() else None
            data.exploits.append(
                ExploitResult(
                    name=exploit.name,
                    family=exploit.family,
                    summary=exploit.summary,
                    outcome=outcome,
                    detail=detail,
                    reward=run.reward if run else None,
                    discarded=left.discarded(verifier_dir),
                    undone=undone,
                    evidence=summarize(verifier_dir) if run else None,
                    patch=patch,
                    patch_bytes=side.patch_bytes,
                )
            )
            if outcome == "earned-reward":
                stage.logs.append(str(patch_path))
            results.append(
                (
                    exploit.name,
                    exploit.summary,
                    outcome,
                    patch,
                    left.last_line(verifier_dir / "fail_to_pass.log"),
                )
            )
        judgement = judge.judge_hack(results)
        stage.set(judgement.status, judgement.detail)

    def _after_census(self) -> None:
        """An exploit's reward 0 proves something only once nop has shown the tests fail on
        the base, and the oracle has shown which tests a fix makes pass (the census every later
        verifier grades by)."""
        self._census_ready.wait()
        if self._interrupted.is_set():
            raise _SkippedError("skipped: interrupted")
        if self._census is None and self._census_missing:
            raise _SkippedError(f"skipped: {self._census_missing}")

    def _verify_exploit(self, trial: TrialPlan, patch: bytes) -> _TrialRun:
        self._after_census()
        return self._verify_patch(trial, patch)

    def _verify_patch(
        self,
        trial: TrialPlan,
        patch: bytes,
        scratch: StageResult | None = None,
        data: GateData | None = None,
        *,
        before_tests: Callable[[], None] | None = None,
    ) -> _TrialRun:
        """A patch through a fresh verifier of the plan's trial (the hack gate, the probe, a
        predicted run), its logs and data in `scratch` and `data` when the caller keeps them."""
        run = _TrialRun(
            agent_log=self._path(trial.gate, "agent.log"),
            collect_log=self._path(trial.gate, "collect.log"),
            verifier_log=self._path(trial.gate, "verifier.log"),
            patch=patch,
        )
        scratch = StageResult() if scratch is None else scratch
        data = GateData() if data is None else data
        with contextlib.ExitStack() as stack:
            verifier = self._open_verifier(trial, scratch, stack, patch)
            if before_tests is not None:
                before_tests()
            self._verifier_side(trial, scratch, data, run, verifier, patched=True)
        return run

    # ---- grade -----------------------------------------------------------------------------

    def grade(self, patch: bytes, census: Census | None) -> tuple[StageResult, StageResult]:
        """`grade`: the bundle's images (built, or found in the cache), then `patch` through a
        fresh verifier graded by `census` (recorded afresh when the bundle has none): the path
        every exploit of the hack gate takes. Returns (build, grade) results."""
        grade = StageResult()
        self._census = census
        self._census_ready.set()
        try:
            self._stage("build", self._build)
            if self.stages["build"].status is Status.PASSED:
                assert self.plan.grade is not None
                trial = self.plan.grade
                if census is None:
                    trial = trial.model_copy(update={"census": "unsealed"})
                data = GateData()
                grade.data = data
                started = time.monotonic()
                run = self._verify_patch(trial, patch, grade, data)
                grade.seconds = round(time.monotonic() - started, 3)
                self._save_patch(trial, grade, data, run)
                self._judge_grade(trial, grade, data, run)
            else:
                grade.detail = "skipped: build did not pass"
        except (KeyboardInterrupt, Interrupted):
            self._interrupted.set()
            raise
        finally:
            self._cleanup()
        return self.stages["build"], grade

    def _judge_grade(
        self, trial: TrialPlan, stage: StageResult, data: GateData, run: _TrialRun
    ) -> None:
        directory = self._verifier_dir(trial)
        data.reward, data.details = run.reward, run.details
        data.limits = judge.limits_data(run.test, run.details, self.storage_mechanism)
        data.evidence = summarize(directory)
        data.undone = [c for c in read_policy(directory) if c.verdict != "keep"]
        data.discarded = left.discarded(directory)
        verdict = judge.judge_grade(
            run.reward,
            timed_out=run.test is not None and run.test.timed_out,
            timeout_seconds=trial.test.timeout_seconds,
            no_reward=f"the verifier wrote no reward.json ({run.reward_problem or 'no file'}); "
            f"see {run.verifier_log}",
            problems={
                name: problem
                for name in ("fail_to_pass", "fail_to_pass_repeat", "pass_to_pass")
                if (problem := first_problem(directory, name))
            },
            undone=judge.undone_words(data.undone, data.discarded) if data.discarded else "",
        )
        stage.set(verdict.status, verdict.detail)

    # ---- determinism -----------------------------------------------------------------------

    def _determinism(self, stage: StageResult) -> None:
        oracle = self.stages["oracle"].data
        assert isinstance(oracle, GateData) and oracle.reward is not None
        details = oracle.details
        data = DeterminismData(
            deterministic=oracle.reward.deterministic,
            repeat_exit_code=details.fail_to_pass_repeat_exit_code if details else None,
        )
        stage.data = data
        judgement = judge.judge_determinism(
            oracle.reward, details, ids_changed(self.run_dir / "oracle" / "logs" / "verifier")
        )
        if judgement.passed and self.plan.probe is not None:
            judgement = self._probe(self.plan.probe, data, stage)
        stage.set(judgement.status, judgement.detail)

    def _probe(
        self, probe: ProbePlan, data: DeterminismData, stage: StageResult
    ) -> judge.Judgement:
        """The oracle's patch verified again under each perturbation; a run that fails is
        retried with each of its dimensions alone, to name the ones that change the outcome."""
        patch = (self.run_dir / "oracle" / "agent.patch").read_bytes()

        def run_all(runs: list[ProbeRun]) -> list[ProbeResult]:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="probe") as pool:
                futures = [pool.submit(self._verify_patch, r.trial, patch) for r in runs]
                done = [f.result() for f in futures]
            results = []
            for plan, run in zip(runs, done, strict=True):
                directory = self.run_dir / plan.trial.gate / "logs" / "verifier"
                alone = [(s.selector, s.exit_code) for s in left.selectors(directory)]
                passed, what, failing = judge.probe_outcome(
                    run.reward, run.test, alone, probe.fail_to_pass
                )
                stage.logs.append(str(run.verifier_log))
                results.append(
                    ProbeResult(
                        name=plan.name,
                        perturbation=plan.perturbation.words(),
                        dimension=plan.dimension,
                        passed=passed,
                        what_failed=what,
                        failing_selectors=failing,
                        reward=run.reward,
                        logs=str(self.run_dir / plan.trial.gate),
                    )
                )
            return results

        main = run_all(probe.runs)
        retries = [
            r for result in main if not result.passed for r in probe.attribution[result.name]
        ]
        alone = run_all(retries) if retries else []
        data.probe = [*main, *alone]
        data.perturbations = list(
            dict.fromkeys(r.dimension for r in alone if not r.passed and r.dimension)
        )
        data.selectors = [
            SelectorRate(selector=selector, passed=passed, runs=runs)
            for selector, passed, runs in judge.selector_rates(
                [(r.passed, r.what_failed, r.failing_selectors) for r in main],
                probe.fail_to_pass,
            )
        ]
        return judge.judge_probe(
            [(r.name, r.passed, r.what_failed, r.failing_selectors) for r in main],
            data.perturbations,
            str(self.run_dir / "determinism"),
        )


def _predicted_trial(trial: TrialPlan) -> TrialPlan:
    """The trial's verifier side under names of its own (its container, its services' network
    and containers), so that a fresh verifier can run beside it when the prediction was wrong;
    it logs under `<gate>/predicted/`."""

    def renamed(name: str) -> str:
        return f"{name}-{PREDICTED_DIR}"

    services = trial.services
    verifier = trial.verifier.model_copy(update={"name": renamed(trial.verifier.name)})
    if services is not None:
        if verifier.network == services.network:
            verifier = verifier.model_copy(update={"network": renamed(services.network)})
        services = services.model_copy(
            update={
                "network": renamed(services.network),
                "services": [
                    s.model_copy(update={"container": renamed(s.container)})
                    for s in services.services
                ],
            }
        )
    return trial.model_copy(
        update={
            "gate": f"{trial.gate}/{PREDICTED_DIR}",
            "verifier": verifier,
            "services": services,
            "online_verifier": None,
            "online_services": None,
        }
    )


def _patch_file(patch: bytes) -> FileToPut:
    """Where test.sh reads the agent's patch."""
    return FileToPut(directory="/opt/selfbench", name="agent.patch", data=patch)
