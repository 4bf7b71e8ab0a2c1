"""The determinism stage: the oracle's patch again, and the flakiness probe's perturbed runs.

The probe's runs start early: once nop has passed, on the patch the oracle's agent side
collected, beside the oracle's verifier (nop's core is idle then), graded without the census,
which does not exist yet. Such a run counts when the oracle passed on that same patch and the
census would grade it alike (judge.graded_alike); any other is verified again, by the census."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

from runner import judge
from runner.model.canaries import DroppedCanary
from runner.model.evidence import VerifierEvidence
from runner.model.report import (
    DeterminismData,
    GateData,
    ProbeResult,
    SelectorRate,
    Status,
)
from runner.model.stages import Gate, Stage
from runner.plan.types import ProbePlan, ProbeRun
from runner.run.sides import Sides
from runner.run.skips import side_run_result
from runner.run.state import RunState, StageResult, TrialRun

log = logging.getLogger(__name__)


class ProbeRunner:
    def __init__(self, state: RunState, sides: Sides) -> None:
        self.state = state
        self.sides = sides
        self._early: dict[str, Future[TrialRun | None]] = {}
        self._early_patch: bytes | None = None

    def start_early(self, patch: bytes) -> None:
        """The probe's runs on `patch` (the oracle's collected one), each in a background
        verifier once nop has passed; they count later only if the census grades them alike."""
        probe = self.state.plan.probe
        if probe is None or not probe.runs or self._early:
            return
        self._early_patch = patch
        pool = ThreadPoolExecutor(
            max_workers=min(2, len(probe.runs)), thread_name_prefix="probe-early"
        )
        for run in probe.runs:
            self._early[run.name] = pool.submit(self._early_run, run, patch)
        pool.shutdown(wait=False)

    def _early_run(self, run: ProbeRun, patch: bytes) -> TrialRun | None:
        # After nop: its verifier has handed its build caches over, and its core is free.
        self.state.nop_done.wait()
        if self.state.stages[Stage.NOP].status is not Status.PASSED:
            return None
        return self.sides.verify_early(run.trial, patch)

    def _early_counts(self, run: ProbeRun, patch: bytes, probe: ProbePlan) -> TrialRun | None:
        """The early run as `run`'s, when it verified this patch and the census grades it alike
        (its logs then move to the run's directory); else None."""
        future = self._early.pop(run.name, None)
        if future is None or patch != self._early_patch:
            return None
        early = side_run_result(future, f"{run.name}: the early run")
        if early is None:
            return None
        # No census (a verifier that records no evidence): a run now would get none either.
        census = self.state.census
        names = ["fail_to_pass", "pass_to_pass"] if probe.pass_to_pass else ["fail_to_pass"]
        why = judge.graded_alike(census, early.evidence.runs, names) if census else ""
        if why:
            log.info("%s: verified again, by the census (the early run: %s)", run.name, why)
            return None
        log.debug("%s: the early run counts (the census grades it alike)", run.name)
        return self.sides.adopt_early(run.trial, early)

    def _verify(self, run: ProbeRun, patch: bytes, probe: ProbePlan) -> TrialRun:
        early = self._early_counts(run, patch, probe)
        return early if early is not None else self.sides.verify_patch(run.trial, patch)

    def determinism(self, stage: StageResult) -> None:
        oracle = self.state.stages[Stage.ORACLE].data
        assert isinstance(oracle, GateData) and oracle.reward is not None
        details = oracle.details
        data = DeterminismData(
            deterministic=oracle.reward.deterministic,
            repeat_exit_code=details.fail_to_pass_repeat_exit_code if details else None,
        )
        stage.data = data
        evidence = self.state.evidence.get(Gate.ORACLE, VerifierEvidence())
        repeat_problem = evidence.problem("fail_to_pass_repeat")
        judgement = judge.judge_determinism(
            oracle.reward,
            details,
            evidence.ids_changed,
            {"fail_to_pass_repeat": repeat_problem} if repeat_problem else None,
        )

        if judgement.passed and self.state.plan.probe is not None:
            judgement = self._probe(self.state.plan.probe, data, stage)
        stage.set(judgement.status, judgement.detail)

    def _drop_canaries(self, keys: list[str], where: str) -> None:
        """Canaries the census kept that passed in a probe run: flaky, so the census keeps them
        no more (every verifier after this grades without them)."""
        with self.state.lock:
            census = self.state.census
            if census is None:
                return
            canaries = census.canaries.model_copy(deep=True)
            for key in keys:
                if key in canaries.keys:
                    canaries.keys.remove(key)
                    canaries.ids.pop(key, None)
                    canaries.dropped.append(
                        DroppedCanary(key=key, why="flaky", detail=f"it passed in {where}")
                    )
                if key in canaries.exit_code:
                    canaries.exit_code.remove(key)
                    canaries.dropped.append(
                        DroppedCanary(key=key, why="flaky", detail=f"it passed in {where}")
                    )
            self.state.census = census.model_copy(update={"canaries": canaries})
        log.info("canaries %s passed in %s: dropped as flaky", ", ".join(keys), where)

    def _probe(
        self, probe: ProbePlan, data: DeterminismData, stage: StageResult
    ) -> judge.Judgement:
        """The oracle's patch verified again under each perturbation; a run that fails is
        retried with each of its dimensions alone, to name the ones that change the outcome."""
        patch = self.state.layout.agent_patch(Gate.ORACLE).read_bytes()

        def run_all(runs: list[ProbeRun]) -> list[ProbeResult]:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="probe") as pool:
                futures = [pool.submit(self._verify, r, patch, probe) for r in runs]
                done = [f.result() for f in futures]
            results = []
            for plan, run in zip(runs, done, strict=True):
                alone = [(s.selector, s.exit_code) for s in run.evidence.selectors]
                passed, what, failing = judge.probe_outcome(
                    run.reward,
                    run.test,
                    alone,
                    probe.fail_to_pass,
                    pass_to_pass=probe.pass_to_pass,
                )
                flaky = None if passed else judge.passing_canaries(run.evidence.runs)
                if flaky:
                    self._drop_canaries(flaky, plan.name)
                    passed, what, failing = True, "", []
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
                        logs=str(self.state.run_dir / plan.trial.gate),
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
            str(self.state.layout.stage(Stage.DETERMINISM)),
        )
