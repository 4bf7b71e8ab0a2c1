"""Carry out a VerifyPlan on an engine the caller provides; return the stages' results.

Order: build -> smoke -> nop -> oracle -> determinism. A stage that does not pass skips what
depends on it (build and smoke gate everything after them; the oracle gates determinism), and
a red one settles the verdict: the stages still running stop, with `skipped: verdict settled
by <gate>` (the plan's keep_going runs every gate to its end instead, so an author sees all).
A RunnerError becomes the stage's status (`error` for infrastructure), any other exception
`error` with its traceback in the run log, and Ctrl-C/SIGTERM marks the running stage
interrupted. The run's containers are removed on every
path unless the plan keeps them.

The executor only schedules. What the stages share is one RunState; each kind of stage is an
object of its own module, given the state and the stages it builds on: the build, the gate
sides (agent and verifier), smoke, the flakiness probe, the nop and oracle trials, the hack
gate (and grade).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from pathlib import Path

from runner.base.errors import Interrupted
from runner.judge import interrupt_marks
from runner.model.census import Census
from runner.model.report import Status
from runner.model.stages import Skip, Stage
from runner.plan.labels import LABEL_RUN
from runner.plan.runtime import Engine
from runner.plan.types import VerifyPlan
from runner.run.build import Builder
from runner.run.context import ExecutionEnv, Progress
from runner.run.hack import HackRunner
from runner.run.probe import ProbeRunner
from runner.run.sides import Sides
from runner.run.smoke import SmokeRunner
from runner.run.state import Execution, RunState, StageListener, StageResult
from runner.run.trials import TrialRunner
from runner.run.watch import ProgressWatcher

# How often the main thread wakes while the stages run: a signal the kernel delivered to another
# thread is only handled when the main thread runs again (CPython runs handlers there), and a
# future's plain result() would block it until the stage ends.
log = logging.getLogger(__name__)

SIGNAL_POLL_SECONDS = 0.25
# Once the verdict is settled and the run's containers are removed, the stages' threads end as
# their engine calls return (within a second, measured on 20.10); past this, the report does
# not wait for one stuck in a call.
SETTLED_DRAIN_SECONDS = 30.0


def _wait(future: Future[None], settled: threading.Event) -> None:
    """Until `future` is done, or a red gate settled the verdict."""
    while not settled.is_set():
        try:
            future.result(timeout=SIGNAL_POLL_SECONDS)
            return
        except TimeoutError:
            continue


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
        state = self.state = RunState(
            plan, engine, run_dir=run_dir, env=env, progress=progress, on_stage=on_stage
        )
        self.builder = Builder(state)
        sides = Sides(state)
        self.smoke = SmokeRunner(state, sides)
        self.trials = TrialRunner(state, sides, self.smoke, ProbeRunner(state, sides))
        self.hack = HackRunner(state, sides, self.builder)

    def run(self) -> Execution:
        """build, then smoke, both agent sides and the hack gate's at once (the verifier
        containers start meanwhile), then the two verifiers once smoke passed; determinism once
        the oracle passed, the hack gate's verifiers once nop did."""
        state, plan, stages = self.state, self.state.plan, self.state.stages
        interrupted: str | None = None
        pool = ThreadPoolExecutor(max_workers=5, thread_name_prefix="gate")
        watcher = ProgressWatcher(state)
        try:
            state.run_stage(Stage.BUILD, self.builder.build)
            if stages[Stage.BUILD].status is Status.PASSED:
                watcher.start()
                # The oracle's agent side is the longest path: it starts first.
                futures = [
                    pool.submit(self.trials.oracle_and_determinism),
                    pool.submit(self.trials.nop),
                ]
                if plan.hack is not None:
                    hack = pool.submit(state.run_stage, Stage.HACK, self.hack.hack)
                    futures += [hack, pool.submit(self._confirm_hack, hack)]
                else:
                    stages[Stage.HACK].skipped(
                        Skip.HACK_NONE if plan.hack_gate else Skip.HACK_DISABLED
                    )
                if plan.smoke.container is not None:
                    futures.append(pool.submit(self.smoke.run_smoke))
                for future in futures:
                    _wait(future, state.settled)
                if state.settled.is_set():
                    self._stop(futures)
            else:
                for name in (Stage.SMOKE, Stage.NOP, Stage.ORACLE, Stage.HACK):
                    stages[name].skipped(Skip.BUILD_RED)
                stages[Stage.DETERMINISM].skipped(Skip.ORACLE_RED)
        except (KeyboardInterrupt, Interrupted) as exc:
            interrupted = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
            state.interrupted.set()
        finally:
            watcher.stop()
            state.smoke_done.set()
            state.nop_done.set()
            state.census_ready.set()
            state.cleanup()
            pool.shutdown(wait=interrupted is None, cancel_futures=True)
            state.opener.shutdown(wait=interrupted is None, cancel_futures=True)
        if interrupted is not None:
            self._mark_interrupted(interrupted)
        return Execution(
            stages=stages,
            kept=state.kept,
            interrupted=interrupted,
            storage_mechanism=state.storage_mechanism,
            census=state.census,
            canaries=plan.canaries,
        )

    def _confirm_hack(self, hack: Future[None]) -> None:
        """Once the hack stage decided on the test command's runners and the census is sealed:
        the census confirms the decision, or the stage reopens and runs what it left (beside
        determinism). A settled or interrupted run leaves the stage as it ended."""
        hack.result()
        self.state.census_ready.wait()
        state = self.state
        if not self.hack.pending or state.settled.is_set() or state.interrupted.is_set():
            return
        if not self.hack.confirmed():
            log.info("the census does not confirm the hack stage's runners: it runs its exploits")
            state.run_stage(Stage.HACK, self.hack.confirm, resume=True)

    def _stop(self, futures: list[Future[None]]) -> None:
        """A red gate settled the verdict: the run's containers go now (their stages' engine
        calls return, and each stage still running is skipped for the settled verdict), then
        the stages' threads are waited for. With --keep the containers stay, and so the stages
        still running run to their end."""
        started = time.monotonic()
        if not self.state.plan.keep:
            try:
                self.state.engine.cleanup({LABEL_RUN: self.state.plan.run_id})
            except Exception as exc:  # the stages end on their own deadlines then
                log.warning("removing the run's containers after a settled verdict: %s", exc)
            wait_all(futures, timeout=SETTLED_DRAIN_SECONDS)
        else:
            wait_all(futures)
        log.debug(
            "verdict settled by %s; the run stopped in %.2f s",
            self.state.settled_by,
            time.monotonic() - started,
        )

    def _mark_interrupted(self, signal_name: str) -> None:
        with self.state.lock:
            running = set(self.state.running)
        stages = self.state.stages
        skips = {name: stage.skip for name, stage in stages.items()}
        for name, mark in interrupt_marks(skips, running=running, signal_name=signal_name).items():
            stages[name].mark(mark)

    def grade(self, patch: bytes, census: Census | None) -> tuple[StageResult, StageResult]:
        """Build, then one fresh verifier for `patch` (runner.run.hack)."""
        return self.hack.grade(patch, census)
