"""The determinism stage: the oracle's patch again, and the flakiness probe's perturbed runs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from runner import judge
from runner.model.evidence import VerifierEvidence
from runner.model.report import (
    DeterminismData,
    GateData,
    ProbeResult,
    SelectorRate,
)
from runner.model.stages import Gate, Stage
from runner.plan.types import ProbePlan, ProbeRun
from runner.run.sides import Sides
from runner.run.state import RunState, StageResult


class ProbeRunner:
    def __init__(self, state: RunState, sides: Sides) -> None:
        self.state = state
        self.sides = sides

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

    def _probe(
        self, probe: ProbePlan, data: DeterminismData, stage: StageResult
    ) -> judge.Judgement:
        """The oracle's patch verified again under each perturbation; a run that fails is
        retried with each of its dimensions alone, to name the ones that change the outcome."""
        patch = self.state.layout.agent_patch(Gate.ORACLE).read_bytes()

        def run_all(runs: list[ProbeRun]) -> list[ProbeResult]:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="probe") as pool:
                futures = [pool.submit(self.sides.verify_patch, r.trial, patch) for r in runs]
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
