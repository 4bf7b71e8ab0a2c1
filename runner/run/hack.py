"""The hack stage (each canned exploit's patch to a fresh verifier) and `grade` (one patch)."""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from runner import judge
from runner.base.errors import (
    Interrupted,
)
from runner.model.census import Census
from runner.model.report import (
    GateData,
    HackData,
    Status,
)
from runner.model.stages import Gate, Skip, Stage
from runner.plan.types import ExploitPlan, HackPlan, TrialPlan
from runner.run.build import Builder
from runner.run.hackagent import ExploitAgent
from runner.run.hackjudge import judge_exploit
from runner.run.hackmemory import HackMemory
from runner.run.hackpolicy import PolicyChecker
from runner.run.sides import Sides
from runner.run.skips import SkippedError, side_run_result
from runner.run.state import ExploitSide, RunState, StageResult, TrialRun

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class _Pending:
    """What the hack stage decided on the test command's runners, for the census to confirm."""

    left_over: list[tuple[ExploitPlan, bytes]]
    sides: dict[str, ExploitSide]
    predicted: tuple[str, ...]


class HackRunner:
    def __init__(self, state: RunState, sides: Sides, builder: Builder) -> None:
        self.state = state
        self.sides = sides
        self.builder = builder
        self.policy = PolicyChecker(state)
        self.exploit_agent = ExploitAgent(state)
        self._pending: _Pending | None = None
        self._memory: HackMemory | None = None
        # The plan with its images pinned to the ids the memory's keys name (HackMemory.pinned).
        self._pinned: HackPlan | None = None

    def hack(self, stage: StageResult) -> None:
        """Each canned exploit runs as the agent in one agent container (reset to the post-setup
        tree between them); every collected patch goes through the patch policy at once, and
        each one it leaves something of goes to a fresh verifier once nop has shown that the
        tests fail on the base (else a reward 0 would prove nothing), unless the task's runners
        prove it (judge.runner_proof; --hack-gate full runs it all the same). When the test
        command's own runners prove them, the stage decides at once and the census confirms it
        later (confirm)."""
        plan = self.state.plan.hack
        assert plan is not None
        stage.data = HackData()
        sides: dict[str, ExploitSide] = {}
        # Three workers: the policy check's container opens at once beside the agent side, and
        # a third exploit verifier is created while two run their tests (test.sh itself waits
        # for one of the run's verifier slots). The pool ends first, so a container still
        # opening is in the stack before the stack removes it.
        memory = self._memory = HackMemory.of(self.state, self.exploit_agent)
        if memory is not None:
            plan = self._pinned = memory.pinned()
        sides = memory.sides(stage) if memory is not None else {}
        known = memory.checks(sides) if memory is not None else {}
        missing = [e for e in plan.exploits if e.name not in sides]
        needs_check = bool(missing) or any(
            side.patch and name not in known for name, side in sides.items()
        )
        with (
            contextlib.ExitStack() as policy_stack,
            ThreadPoolExecutor(max_workers=3, thread_name_prefix=Stage.HACK) as pool,
        ):
            policy = (
                pool.submit(self.policy.open, policy_stack, plan.policy)
                if plan.policy and needs_check
                else None
            )
            if missing:
                with self.state.engine.container(
                    plan.agent, env=self.state.env.proxies, keep=self.state.plan.keep
                ) as agent:
                    ran = self.exploit_agent.run_all(agent, stage, missing)
                    self.state.keep("hack agent", agent)
                sides = {e.name: sides.get(e.name) or ran[e.name] for e in plan.exploits}
            # The policy first, for every patch at once and without tests (beside nop and the
            # oracle): only a patch that leaves something the policy keeps needs a verifier.
            checks = self.policy.check(sides, stage, policy, known)
            policy_stack.close()
            left_over: list[tuple[ExploitPlan, bytes]] = []
            for exploit in plan.exploits:
                side = sides[exploit.name]
                check = checks.get(exploit.name)
                if not side.patch:
                    continue
                if check is not None and (not check.applied or check.leaves_nop_tree):
                    side.decided_by_policy = check
                else:
                    left_over.append((exploit, side.patch))
            predicted = self._proof("per-test", plan.command_runners) if left_over else ()
            if predicted:
                # The test command starts only runners that prove these exploits: decided now,
                # on the plan; the census confirms it or reopens the stage (confirm).
                for exploit, _ in left_over:
                    sides[exploit.name].proved_for = predicted
                self._pending = _Pending(left_over=left_over, sides=sides, predicted=predicted)
                runs: dict[str, TrialRun] = {}
            else:
                runs = self._verify_left_over(left_over, sides, pool, stage, early=True)
        self._judge_all(sides, runs, stage)
        if memory is not None:
            # Only a verify whose every exploit earned nothing is remembered: what later
            # verifies replay is then what one whole fresh verify saw.
            passed = stage.status is Status.PASSED
            if passed:
                memory.remember(sides, checks)
            memory.keep_runs(passed)

    @property
    def _plan(self) -> HackPlan:
        """The stage's plan: pinned to image ids once the memory is read (HackMemory.pinned)."""
        plan = self._pinned or self.state.plan.hack
        assert plan is not None
        return plan

    @property
    def pending(self) -> bool:
        """Whether the stage decided on the test command's runners, which the census is still
        to confirm."""
        return self._pending is not None

    def confirmed(self) -> bool:
        """Whether the census bears out the runners the stage decided on: its fail-to-pass
        selection's evidence proves every exploit left in the tree (the proofs then name the
        census's runners). Call once the census is ready."""
        pending = self._pending
        census = self.state.census
        if pending is None:
            return True
        if census is None:
            return False
        proof = self._proof(census.fail_to_pass.mode, census.fail_to_pass.runners)
        if not proof:
            return False
        if proof != pending.predicted:
            stage = self.state.stages[Stage.HACK]
            for exploit, _ in pending.left_over:
                pending.sides[exploit.name].proved_for = proof
            self._judge_all(pending.sides, {}, stage)
        self._pending = None
        return True

    def confirm(self, stage: StageResult) -> None:
        """The hack stage reopened: the census did not bear out the runners it decided on (the
        oracle's tests ran under another runner, or without per-test evidence), so every
        exploit the policy left in the tree runs after all, graded by the census."""
        pending = self._pending
        assert pending is not None
        self._pending = None
        for exploit, _ in pending.left_over:
            pending.sides[exploit.name].proved_for = ()
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix=Stage.HACK) as pool:
            runs = self._verify_left_over(
                pending.left_over, pending.sides, pool, stage, early=False
            )
        self._judge_all(pending.sides, runs, stage)

    def _verify_left_over(
        self,
        left_over: list[tuple[ExploitPlan, bytes]],
        sides: dict[str, ExploitSide],
        pool: ThreadPoolExecutor,
        stage: StageResult,
        *,
        early: bool,
    ) -> dict[str, TrialRun]:
        """The exploits the policy left in the tree, once the census is ready: proved by its
        runners, or each run in a verifier (an early run stopped at a failed test counts)."""
        started = self._early_runs(left_over, pool, stage) if early else {}
        self._after_census(stage)
        runs: dict[str, TrialRun] = {}
        verifying: dict[str, Future[TrialRun]] = {}
        sealed = self.state.census.fail_to_pass if self.state.census else None
        proof = self._proof(sealed.mode, sealed.runners) if sealed else ()
        for exploit, patch in left_over:
            if proof:
                sides[exploit.name].proved_for = proof
            elif (run := self._early_counts(exploit, started.get(exploit.name))) is not None:
                runs[exploit.name] = run
            else:
                verifying[exploit.name] = pool.submit(self._verify_exploit, exploit.trial, patch)
        runs.update({name: future.result() for name, future in verifying.items()})
        return runs

    def _judge_all(
        self, sides: dict[str, ExploitSide], runs: dict[str, TrialRun], stage: StageResult
    ) -> None:
        plan = self._plan
        data = HackData()
        stage.data = data
        results = [
            judge_exploit(
                self.state, exploit, sides[exploit.name], runs.get(exploit.name), stage, data
            )
            for exploit in plan.exploits
        ]
        judgement = judge.judge_hack(results)
        stage.set(judgement.status, judgement.detail)

    def _early_runs(
        self,
        left_over: list[tuple[ExploitPlan, bytes]],
        pool: ThreadPoolExecutor,
        stage: StageResult,
    ) -> dict[str, Future[TrialRun]]:
        """Once nop has passed, each patch the policy left something of goes to a verifier
        before the census exists (ungraded by it), beside the oracle. With per-test evidence its
        fail-to-pass run stops at the first failed test, and a failed test of a runner the
        census counts makes the reward 0 whatever the census says; with exit-code evidence a
        reward 0 is the census's too (runner.run.hack _early_counts). Any other outcome is
        verified again, graded by the census."""
        if not left_over:
            return {}
        stage.wait(self.state.nop_done)
        if self.state.stages[Stage.NOP].status is not Status.PASSED:
            return {}
        evidence = self.state.evidence.get(Gate.NOP)
        nop = evidence.runs.get("fail_to_pass") if evidence is not None else None
        if nop is None or (nop.mode == "per-test" and not nop.runners) or nop.mode == "none":
            return {}
        if self._proof(nop.mode, nop.runners):
            return {}  # nop's runners prove them: the census most likely will too
        return {
            exploit.name: self._early_run(exploit.trial, patch, pool)
            for exploit, patch in left_over
        }

    def _early_run(
        self, trial: TrialPlan, patch: bytes, pool: ThreadPoolExecutor
    ) -> Future[TrialRun]:
        """One early run: as an earlier verify of the same verifier image saw it end with reward
        0 (runner.run.hackmemory), or in a fresh verifier (then remembered)."""
        memory = self._memory
        early = self.sides.early_trial(trial)
        recalled = memory.recall_run(early, patch) if memory is not None else None
        if recalled is not None:
            done: Future[TrialRun] = Future()
            done.set_result(recalled)
            return done

        def verify() -> TrialRun:
            scratch = StageResult()
            run = self.sides.verify_early(trial, patch, scratch)
            if memory is not None:
                memory.remember_run(early, patch, run, scratch)
            return run

        return pool.submit(verify)

    def _early_counts(
        self, exploit: ExploitPlan, future: Future[TrialRun] | None
    ) -> TrialRun | None:
        """The early run as the exploit's run, when it stopped at a failed test of a runner the
        census counts (its logs then move to the exploit's directory); else None."""
        census = self.state.census
        if future is None or census is None:
            return None
        run = side_run_result(future, f"{exploit.name}: the early run")
        if run is None:
            return None
        evidence = run.evidence.runs.get("fail_to_pass")
        if census.fail_to_pass.mode == "exit-code":
            # Judged by exit codes alike before the census and after it (but for the canary run,
            # which only a sealed census fails): an early reward 0 is the census's too.
            same_canaries = set(census.canaries.exit_code) == set(
                self.state.plan.canaries.exit_code
            )
            if (
                run.reward is None
                or run.reward.reward != 0
                or evidence is None
                or evidence.mode != "exit-code"
                or not same_canaries
            ):
                return None
            return self.sides.adopt_early(exploit.trial, run)
        if census.fail_to_pass.mode != "per-test":
            return None
        if (
            run.reward is None
            or run.reward.reward != 0
            or evidence is None
            or evidence.stopped is None
            or evidence.stopped.runner not in census.fail_to_pass.runners
        ):
            return None
        return self.sides.adopt_early(exploit.trial, run)

    def _proof(self, mode: str, runners: list[str]) -> tuple[str, ...]:
        """The runners that prove the exploits the policy left in the tree, from a fail-to-pass
        selection's evidence mode and runners (nop's, or the census's), or () when each must
        run."""
        plan = self._plan
        return judge.runner_proof(mode, runners, plan.command_runners, full=plan.full) or ()

    def _after_census(self, stage: StageResult | None = None) -> None:
        """An exploit's reward 0 proves something only once nop has shown the tests fail on
        the base, and the oracle has shown which tests a fix makes pass (the census every later
        verifier grades by)."""
        if stage is not None:
            stage.wait(self.state.census_ready)
        else:
            self.state.census_ready.wait()
        if self.state.interrupted.is_set():
            raise SkippedError(Skip.INTERRUPTED)
        if self.state.settled.is_set():
            raise SkippedError(Skip.SETTLED)
        if self.state.census is None and self.state.census_missing:
            raise SkippedError(Skip.OTHER, self.state.census_missing)

    def _verify_exploit(self, trial: TrialPlan, patch: bytes) -> TrialRun:
        self._after_census()
        return self.sides.verify_patch(trial, patch)

    def grade(self, patch: bytes, census: Census | None) -> tuple[StageResult, StageResult]:
        """`grade`: the bundle's images (built, or found in the cache), then `patch` through a
        fresh verifier graded by `census` (recorded afresh when the bundle has none): the path
        every exploit of the hack gate takes. Returns (build, grade) results."""
        grade = StageResult()
        self.state.census = census
        self.state.census_ready.set()
        try:
            self.state.run_stage(Stage.BUILD, self.builder.build)
            if self.state.stages[Stage.BUILD].status is Status.PASSED:
                assert self.state.plan.grade is not None
                trial = self.state.plan.grade
                if census is None:
                    trial = trial.model_copy(update={"census": "unsealed"})
                data = GateData()
                grade.data = data
                started = time.monotonic()
                run = self.sides.verify_patch(trial, patch, grade, data)
                grade.seconds = round(time.monotonic() - started, 3)
                self.sides.save_patch(trial, grade, data, run)
                self._judge_grade(trial, grade, data, run)
            else:
                grade.skipped(Skip.BUILD_RED)
        except (KeyboardInterrupt, Interrupted):
            self.state.interrupted.set()
            raise
        finally:
            self.state.cleanup()
        return self.state.stages[Stage.BUILD], grade

    def _judge_grade(
        self, trial: TrialPlan, stage: StageResult, data: GateData, run: TrialRun
    ) -> None:
        evidence = run.evidence
        data.reward, data.details = run.reward, run.details
        data.limits = judge.limits_data(run.test, run.details, self.state.storage_mechanism)
        data.evidence = evidence.summary
        data.undone = evidence.undone
        data.discarded = list(evidence.discarded)
        verdict = judge.judge_grade(
            run.reward,
            timed_out=run.test is not None and run.test.timed_out,
            timeout_seconds=trial.test.timeout_seconds,
            no_reward=f"the verifier wrote no reward.json ({run.reward_problem or 'no file'}); "
            f"see {run.verifier_log}",
            problems=evidence.problems,
            undone=judge.undone_words(data.undone, data.discarded) if data.discarded else "",
        )
        stage.set(verdict.status, verdict.detail)
