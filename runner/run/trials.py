"""The nop and oracle stages: each agent side, then its verifier (a predicted patch's verifier
started early), judged; the census sealed from the oracle's evidence."""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

from runner import judge
from runner.base.logs import Truncation
from runner.model.census import (
    CensusError,
    build_census,
    canary_census,
)
from runner.model.predictions import prediction_key, tree_digest
from runner.model.report import (
    GateData,
    Status,
)
from runner.model.stages import Gate, Skip, Stage
from runner.plan.runtime import (
    Container,
)
from runner.plan.types import TrialPlan
from runner.run.collect import log_text
from runner.run.handoff import hand_off
from runner.run.probe import ProbeRunner
from runner.run.sides import Sides, adopt_apart, trial_apart
from runner.run.skips import SkippedError, side_run_result
from runner.run.smoke import SmokeRunner
from runner.run.state import PREDICTED_DIR, Prediction, RunState, StageResult, TrialRun

# A red nop's or oracle's verifier, once more without the canaries (runner.run.trials).
NO_CANARIES_DIR = "no-canaries"

log = logging.getLogger(__name__)


class TrialRunner:
    def __init__(
        self, state: RunState, sides: Sides, smoke: SmokeRunner, probe: ProbeRunner
    ) -> None:
        self.state = state
        self.sides = sides
        self.smoke = smoke
        self.probe = probe

    def oracle_and_determinism(self) -> None:
        """Determinism (the flakiness probe) starts as soon as the oracle passed, beside the
        hack gate."""
        self.state.run_stage(Stage.ORACLE, partial(self._trial, self.state.plan.trial(Gate.ORACLE)))
        self._seal()
        if self.state.interrupted.is_set():
            return
        if self.state.stages[Stage.ORACLE].status is Status.PASSED:
            self.state.run_stage(Stage.DETERMINISM, self.probe.determinism)
        else:
            oracle = self.state.stages[Stage.ORACLE]
            if oracle.skip is Skip.SETTLED:
                self.state.stages[Stage.DETERMINISM].skipped(Skip.SETTLED, self.state.settled_by)
            else:
                smoke_red = oracle.skip is Skip.SMOKE_RED
                self.state.stages[Stage.DETERMINISM].skipped(
                    Skip.SMOKE_RED if smoke_red else Skip.ORACLE_RED
                )

    def _seal(self) -> None:
        """The census of the tests nop and the oracle saw, once both passed: every later
        verifier (the probe's, the hack gate's, `grade`'s) grades by it."""
        try:
            self.state.nop_done.wait()
            if self.state.interrupted.is_set():
                return
            if self.state.stages[Stage.NOP].status is not Status.PASSED:
                return
            if self.state.stages[Stage.ORACLE].status is not Status.PASSED:
                self.state.census_missing = (
                    "oracle did not pass (there is no census of its tests to grade by)"
                )
                return
            oracle = self.state.evidence.get(Gate.ORACLE)
            nop = self.state.evidence.get(Gate.NOP)
            fail_to_pass = oracle.runs.get("fail_to_pass") if oracle is not None else None
            self.state.census_missing = ""
            if fail_to_pass is None:
                # A verifier that records no evidence (a bundle compiled before it did): later
                # verifiers judge as nop and the oracle did.
                log.warning("the oracle's verifier left no evidence of its tests: no census")
                return
            try:
                self.state.census = build_census(
                    nop_fail_to_pass=nop.runs.get("fail_to_pass") if nop is not None else None,
                    oracle_fail_to_pass=fail_to_pass,
                    oracle_pass_to_pass=oracle.runs.get("pass_to_pass") if oracle else None,
                    run_id=self.state.plan.run_id,
                    runner_version=self.state.plan.runner_version,
                    canaries=canary_census(
                        self.state.plan.canaries,
                        oracle.runs if oracle is not None else {},
                        interfered=next(iter(self.state.canaries_interfered.values()), None),
                    ),
                )
            except CensusError as exc:
                self.state.census_missing = str(exc)
        finally:
            self.state.census_ready.set()

    def nop(self) -> None:
        try:
            self.state.run_stage(Stage.NOP, partial(self._trial, self.state.plan.trial(Gate.NOP)))
        finally:
            self.state.nop_done.set()

    def _trial(self, trial: TrialPlan, stage: StageResult) -> None:
        gate = trial.gate
        data = GateData()
        stage.data = data
        evidence = TrialRun(
            agent_log=self.state.path(gate, "agent.log"),
            collect_log=self.state.path(gate, "collect.log"),
            verifier_log=self.state.path(gate, "verifier.log"),
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
                            self.state.opener.submit(self.sides.open_verifier, trial, stage, stack)
                        )

                try:
                    self.sides.agent_side(trial, trial.agent, stage, data, evidence, agent_started)
                    if trial.gate.kind is Gate.ORACLE and evidence.patch is not None:
                        # The probe's runs need the oracle's patch only: they start beside its
                        # verifier (runner.run.probe).
                        self.probe.start_early(evidence.patch)
                    self.smoke.after_smoke()
                    if evidence.patch is not None and not self._predicted_run_counts(
                        trial, stage, data, evidence, prediction
                    ):
                        verifier = (
                            opening[0].result()
                            if opening
                            else self.sides.open_verifier(trial, stage, stack)
                        )
                        self.sides.verifier_side(trial, stage, data, evidence, verifier)
                finally:
                    # Whatever happened, the container must be in the stack before it unwinds
                    # (and the predicted run's container removed before the stage ends).
                    for future in opening:
                        with contextlib.suppress(Exception):
                            future.result()
                    if prediction is not None and prediction.future is not None:
                        with contextlib.suppress(Exception):
                            prediction.future.result()
        self.sides.judge_trial(trial, stage, data, evidence)
        if stage.status is Status.FAILED and evidence.patch is not None:
            self._without_canaries(trial, stage, data, evidence)
        if (
            stage.status is Status.FAILED
            and trial.online_verifier is not None
            and evidence.patch is not None
            and evidence.reward is not None
            and judge.tests_failed(trial.gate.kind, evidence.reward)
        ):
            self._online(trial, stage, data, evidence)

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
                "task": self.state.plan.task_id,
                "image": trial.agent.image,
                "solution": solution,
                "workdir": trial.agent.workdir,
                "env": trial.agent.env,
                "solve": trial.solve.model_dump(exclude={"timeout_seconds"}),
                "collect": trial.collect.model_dump(exclude={"timeout_seconds"}),
                "patch": trial.agent_patch,
            }
        )

    def _predict(self, trial: TrialPlan) -> Prediction | None:
        """Start the verifier on the predicted patch, if there is one (runner.model.predictions);
        the agent side runs meanwhile."""
        store = self.state.env.predictions
        key = self._prediction_key(trial) if store is not None else None
        if store is None or key is None:
            return None
        prediction = Prediction(key=key, patch=store.predict(key))
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
    ) -> tuple[TrialRun, StageResult, GateData]:
        scratch, data = StageResult(), GateData()
        # Not gated on smoke, unlike the others: its result counts only after the caller has
        # waited for smoke to pass (a red smoke skips the gate, whatever ran here).
        run = self.sides.verify_patch(
            trial_apart(trial, PREDICTED_DIR),
            patch,
            scratch,
            data,
            before_tests=self._unless_interrupted,
        )
        return run, scratch, data

    def _unless_interrupted(self) -> None:
        if self.state.interrupted.is_set():
            raise SkippedError(Skip.INTERRUPTED)

    def _predicted_run_counts(
        self,
        trial: TrialPlan,
        stage: StageResult,
        data: GateData,
        evidence: TrialRun,
        prediction: Prediction | None,
    ) -> bool:
        """Record the collected patch for the next run; when it is byte-for-byte the predicted
        one, the predicted run is this gate's verifier run: its logs move into place. Otherwise
        (no prediction, another patch, or the predicted run did not finish) the caller verifies
        the collected patch in a fresh verifier."""
        if prediction is None or evidence.patch is None or self.state.env.predictions is None:
            return False
        self.state.env.predictions.record(
            prediction.key, evidence.patch, predicted=prediction.patch
        )
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
                self.state.run_dir / trial.gate / PREDICTED_DIR,
            )
            return False
        predicted = side_run_result(prediction.future, f"{trial.gate}: the predicted run")
        if predicted is None:
            return False
        run, scratch, predicted_data = predicted
        gate_dir = self.state.run_dir / trial.gate
        moved = gate_dir / PREDICTED_DIR
        adopt_apart(gate_dir, PREDICTED_DIR)
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
        evidence.evidence = run.evidence
        data.verifier_exit_code = predicted_data.verifier_exit_code
        data.timed_out = predicted_data.timed_out
        data.predicted_patch = "confirmed"
        self.state.adopt_kept(trial.gate, PREDICTED_DIR)
        log.debug(
            "%s: the collected patch is the predicted one: its verifier run counts", trial.gate
        )
        return True

    def _without_canaries(
        self, trial: TrialPlan, stage: StageResult, data: GateData, run: TrialRun
    ) -> None:
        """A red nop or oracle whose verifier wrote canaries runs once more without them: a
        canary that changes what another test does (a fixed file name, a port, shared state)
        must not fail a task. When the gate passes then, that run is the gate's, and the census
        keeps no canary (canary_census's `interfered`). Only a run in which canaries ran can
        they have changed, and at nop only a pass-to-pass run's failure makes the gate red."""
        touched = [
            r
            for name, r in run.evidence.runs.items()
            if not r.passed
            and any(c.outcome != "missing" for c in r.canaries)
            and (trial.gate.kind is not Gate.NOP or name.startswith("pass_to_pass"))
        ]
        if not touched or run.patch is None:
            return
        apart = trial_apart(trial, NO_CANARIES_DIR)
        apart = apart.model_copy(
            update={
                "verifier": apart.verifier.model_copy(
                    update={"env": {**apart.verifier.env, "SELFBENCH_CANARIES": "off"}}
                )
            }
        )
        self.state.progress(trial.gate.kind.value, "red with its canaries; running it without")
        plain = self.sides.verify_patch(apart, run.patch)
        stage.logs.append(str(plain.verifier_log))
        if plain.reward is None or not judge.evaluate_gate(trial.gate.kind, plain.reward)[0]:
            return
        red = stage.detail
        log.info("%s passes without its canaries (with them: %s)", trial.gate, red)
        self.state.canaries_interfered[trial.gate] = (
            f"{trial.gate} passed only without them (with them: {red})"
        )
        run.test, run.evidence = plain.test, plain.evidence
        self.sides.judge_trial(trial, stage, data, run)

    def _online(self, trial: TrialPlan, stage: StageResult, data: GateData, red: TrialRun) -> None:
        """The red gate's run again with the internet on when its log shows a process reaching
        for it: a test that fails only for that is said to (declare testsNetwork: public)."""
        assert trial.online_verifier is not None and red.patch is not None
        sign = judge.network_sign(log_text(red.verifier_log))
        if sign is None:
            log.info("%s is red with no sign of the network in its log: not run online", trial.gate)
            return
        words = f"red; running it again with the network on (its log says {sign!r})"
        self.state.progress(trial.gate.kind.value, words)
        online = trial.model_copy(
            update={
                "gate": f"{trial.gate}/online",
                "verifier": trial.online_verifier,
                "services": trial.online_services,
                "online_verifier": None,
                "online_services": None,
            }
        )
        run = self.sides.verify_patch(online, red.patch)
        stage.logs.append(str(run.verifier_log))
        passed = run.reward is not None and judge.evaluate_gate(trial.gate.kind, run.reward)[0]
        data.passes_online = passed
        if passed:
            stage.detail = (
                f"{stage.detail}; the tests ran with the network off, and pass with it on: they "
                'need the network (declare environment.testsNetwork: "public"); see '
                f"{self.state.run_dir / trial.gate / 'online'}"
            )

    def _trial_without_agent(
        self,
        trial: TrialPlan,
        stage: StageResult,
        data: GateData,
        run: TrialRun,
        stack: contextlib.ExitStack,
    ) -> None:
        """nop: an agent that does nothing leaves the committed post-setup tree as it is, so
        its patch is empty without a container. When the plan shares it, the smoke check runs
        first in this verifier's container, and its result gates this verifier and the other."""
        run.patch = b""
        self.sides.save_patch(trial, stage, data, run)
        if self.state.plan.smoke.container is None:
            opened: list[Container] = []

            def smoke(smoke_stage: StageResult) -> None:
                opened.append(self.sides.open_verifier(trial, stage, stack, run.patch))
                self.smoke.smoke_in(opened[0], trial.verifier, smoke_stage)

            try:
                self.state.run_stage(Stage.SMOKE, smoke)
            finally:
                self.smoke.smoke_finished()
            self.smoke.after_smoke()
            verifier = opened[0]
        else:
            verifier = self.sides.open_verifier(trial, stage, stack, run.patch)
            self.smoke.after_smoke()
        self.sides.verifier_side(trial, stage, data, run, verifier, patched=True)
        hand_off(self.state, trial, verifier, stage, data, run)
