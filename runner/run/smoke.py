"""The smoke stage: the contract's smoke command (or the toolchain checks) in a verifier image."""

from __future__ import annotations

from runner import judge
from runner.model.layout import SMOKE_LOG
from runner.model.report import (
    SmokeData,
    Status,
)
from runner.model.stages import Skip, Stage
from runner.plan.runtime import (
    Container,
)
from runner.plan.types import ContainerPlan
from runner.run import collect as left
from runner.run.sides import Sides
from runner.run.skips import SkippedError
from runner.run.state import RunState, StageResult


class SmokeRunner:
    def __init__(self, state: RunState, sides: Sides) -> None:
        self.state = state
        self.sides = sides

    def run_smoke(self) -> None:
        """Smoke in a container of its own (a contract's smoke command, which may write)."""
        try:
            self.state.run_stage(Stage.SMOKE, self._smoke)
        finally:
            self.smoke_finished()

    def smoke_finished(self) -> None:
        self.state.smoke_passed = self.state.stages[Stage.SMOKE].status is Status.PASSED
        self.state.smoke_done.set()

    def _smoke(self, stage: StageResult) -> None:
        smoke = self.state.plan.smoke
        assert smoke.container is not None
        with (
            self.sides.services(smoke.services, Stage.SMOKE, stage) as network,
            self.state.engine.container(
                smoke.container, env=self.state.env.proxies, keep=self.state.plan.keep
            ) as c,
        ):
            if network is not None and smoke.container.network != network:
                c.connect(network)
            self.smoke_in(c, smoke.container, stage)
            self.state.keep(Stage.SMOKE, c)

    def smoke_in(self, container: Container, plan: ContainerPlan, stage: StageResult) -> None:
        """Run the smoke check in `container` (its own, or the nop verifier's: the default
        check only reads) and judge it."""
        log_path = self.state.path(Stage.SMOKE, SMOKE_LOG)
        stage.logs.append(str(log_path))
        outcome = container.exec(
            self.state.plan.smoke.run, log_path, limit=self.state.plan.max_log_bytes
        )
        self.state.storage_mechanism = container.storage_mechanism
        if outcome.truncation:
            stage.truncated.append(outcome.truncation)
        lines = left.tail_lines(log_path)
        limits = judge.limits_data(outcome, None, self.state.storage_mechanism)
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

    def after_smoke(self) -> None:
        """Verifiers run only once smoke passed (the seed: smoke before the nop split)."""
        self.state.smoke_done.wait()
        if self.state.interrupted.is_set():
            raise SkippedError(Skip.INTERRUPTED)
        if not self.state.smoke_passed:
            smoke = self.state.stages[Stage.SMOKE]
            if smoke.status is not Status.FAILED and self.state.settled.is_set():
                # Woken by another gate's red verdict before smoke ended.
                raise SkippedError(Skip.SETTLED)
            raise SkippedError(Skip.SMOKE_RED)
