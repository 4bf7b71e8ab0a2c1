"""The hack gate's memory for one run: the exploit sides and policy checks earlier runs of
the same agent and verifier images saw (runner.run.remembered), read before the stage and
written after it."""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass, field

from runner import __version__
from runner.base.errors import RunnerError
from runner.model.evidence import PolicyCheck
from runner.plan.runtime import ExecOutcome
from runner.plan.types import ContainerPlan, ExploitPlan, HackPlan, TrialPlan
from runner.run.collect import read_verifier
from runner.run.hackagent import ExploitAgent
from runner.run.remembered import (
    MAX_RUN_BYTES,
    MAX_RUN_FILES,
    Remembered,
    RememberedRun,
    check_key,
    log_tail,
    patch_digest,
    run_key,
    side_key,
)
from runner.run.state import ExploitSide, RunState, StageResult, TrialRun

log = logging.getLogger(__name__)

_PLAN_ONLY = {"name", "labels", "image", "background"}  # not what a container does


@dataclass(frozen=True, kw_only=True)
class HackMemory:
    """The hack gate's remembered sides and checks for one run (runner.run.remembered): keyed
    by the image ids, the containers' plans (but their names and labels), the driver and policy
    steps, each exploit's script, and each patch's digest."""

    state: RunState
    store: Remembered
    plan: HackPlan
    agent_image: str
    verifier_image: str | None
    exploit_agent: ExploitAgent
    # The engine's facts (cores, architecture, quota, memory): part of every key.
    facts: dict[str, object]
    # Early runs to remember once the stage has passed (keep_runs), from the pool's threads.
    runs: list[tuple[str, RememberedRun]] = field(default_factory=list)
    image_ids: dict[str, str | None] = field(default_factory=dict)  # by tag (_image_id)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, state: RunState, exploit_agent: ExploitAgent) -> HackMemory | None:
        """What earlier runs of the same agent and verifier images saw (runner.run.remembered);
        None with --hack-gate full or --keep, or when an image's id is unknown."""
        plan = state.plan.hack
        store = state.env.remembered
        if plan is None or store is None or plan.full or state.plan.keep:
            return None
        try:
            facts = state.engine.facts().model_dump(mode="json")
            agent = state.engine.image(plan.agent.image)
            verifier = state.engine.image(plan.policy.image) if plan.policy else None
        except RunnerError as exc:
            log.debug("no remembered hack-gate sides: %s", exc)
            return None
        if agent is None:
            return None
        return cls(
            state=state,
            store=store,
            plan=plan,
            agent_image=agent.id,
            verifier_image=verifier.id if verifier is not None else None,
            exploit_agent=exploit_agent,
            facts=facts,
        )

    def pinned(self) -> HackPlan:
        """The stage's plan with its containers made from the image ids the keys name, not
        from tags: what the stage remembers is then what those images did, even when a tag is
        moved to another image while it runs (a rebuild by another runner on the same engine)."""
        plan = self.plan
        verifier_tag = plan.policy.image if plan.policy is not None else None

        def pin(container: ContainerPlan) -> ContainerPlan:
            if self.verifier_image is None or container.image != verifier_tag:
                return container
            return container.model_copy(update={"image": self.verifier_image})

        return plan.model_copy(
            update={
                "agent": plan.agent.model_copy(update={"image": self.agent_image}),
                "policy": pin(plan.policy) if plan.policy is not None else None,
                "exploits": [
                    e.model_copy(
                        update={
                            "trial": e.trial.model_copy(update={"verifier": pin(e.trial.verifier)})
                        }
                    )
                    for e in plan.exploits
                ],
            }
        )

    def _side_key(self, exploit: ExploitPlan) -> str:
        return side_key(
            {
                "version": __version__,
                "engine": self.facts,
                "image": self.agent_image,
                "container": self.plan.agent.model_dump(mode="json", exclude=_PLAN_ONLY),
                "driver": self.plan.driver.model_dump(mode="json"),
                "exploit": exploit.name,
                "run": exploit.run.model_dump(mode="json"),
            }
        )

    def _check_key(self, patch: bytes) -> str | None:
        if self.verifier_image is None or self.plan.policy is None or not self.plan.policy_check:
            return None
        return check_key(
            {
                "version": __version__,
                "engine": self.facts,
                "image": self.verifier_image,
                "container": self.plan.policy.model_dump(mode="json", exclude=_PLAN_ONLY),
                "step": self.plan.policy_check.model_dump(mode="json"),
                "patch": patch_digest(patch),
            }
        )

    def sides(self, stage: StageResult) -> dict[str, ExploitSide]:
        """The exploits an earlier run saw through, each in place as if it ran now."""
        found: dict[str, ExploitSide] = {}
        remembered = {e.name: self.store.side(self._side_key(e)) for e in self.plan.exploits}
        if not any(remembered.values()):
            return found
        with self.exploit_agent.agent_log(stage).open("a") as log_file:
            for exploit in self.plan.exploits:
                side = remembered[exploit.name]
                if side is None:
                    continue
                found[exploit.name] = self.exploit_agent.adopt(exploit, side, stage)
                log_file.write(
                    f"selfbench: {exploit.name}: as an earlier run of agent image "
                    f"{self.agent_image[:19]} saw it (exit {side.exit_code}, "
                    f"{len(side.patch) if side.patch is not None else 'no'} patch bytes)\n"
                )
        return found

    def checks(self, sides: dict[str, ExploitSide]) -> dict[str, PolicyCheck]:
        found: dict[str, PolicyCheck] = {}
        for name, side in sides.items():
            key = self._check_key(side.patch) if side.patch else None
            check = self.store.check(key) if key is not None else None
            if check is not None:
                found[name] = check
        return found

    def remember(self, sides: dict[str, ExploitSide], checks: dict[str, PolicyCheck]) -> None:
        for exploit in self.plan.exploits:
            side = sides.get(exploit.name)
            if side is None:
                continue
            seen = self.exploit_agent.remembers(exploit, side)
            if seen is not None:
                self.store.remember_side(self._side_key(exploit), seen)
            key = self._check_key(side.patch) if side.patch else None
            check = checks.get(exploit.name)
            if key is not None and check is not None:
                self.store.remember_check(key, check)
        self.store.prune()

    # ---- early verifier runs -----------------------------------------------------------------

    def _image_id(self, tag: str) -> str | None:
        """`tag`'s image id, looked up once a run: a run's recall and what it remembers use the
        same id (and the engine is asked once, not for each exploit)."""
        with self.lock:
            if tag not in self.image_ids:
                try:
                    info = self.state.engine.image(tag)
                except RunnerError:
                    info = None
                self.image_ids[tag] = info.id if info is not None else None
            return self.image_ids[tag]

    def _run_key(self, trial: TrialPlan, patch: bytes) -> str | None:
        """An early run's key (runner.run.sides.verify_early: graded without the census, so the
        census is not an input): the verifier image's id, its container's plan, test.sh's step,
        the plan's canaries and the patch. None for a verifier with a network or services,
        whose tests may see more than these inputs."""
        if trial.census != "unsealed" or trial.services is not None:
            return None
        if trial.verifier.network != "none":
            return None
        pinned = trial.verifier.image == self.verifier_image  # pinned(): the id itself
        image = self.verifier_image if pinned else self._image_id(trial.verifier.image)
        if image is None:
            return None
        return run_key(
            {
                "version": __version__,
                "engine": self.facts,
                "image": image,
                "container": trial.verifier.model_dump(mode="json", exclude=_PLAN_ONLY),
                "test": trial.test.model_dump(mode="json"),
                "logs": trial.verifier_logs,
                "canaries": self.state.plan.canaries.model_dump(mode="json"),
                "patch": patch_digest(patch),
            }
        )

    def recall_run(self, trial: TrialPlan, patch: bytes) -> TrialRun | None:
        """An early run of `patch` an earlier verify saw end with reward 0 (its hack stage
        passed), its files in place under the trial's gate as if its verifier had just left
        them; None when there is none, or it cannot be put back (nothing of it then stays: the
        fresh verifier logs there)."""
        try:
            return self._recall_run(trial, patch)
        except Exception as exc:  # what cannot be put back costs a fresh run, never the stage
            log.info("%s: a remembered early run is not used (%s)", trial.gate, exc)
            gate = self.state.layout.gate(trial.gate)
            shutil.rmtree(gate / "logs", ignore_errors=True)
            (gate / "verifier.log").unlink(missing_ok=True)
            return None

    def _recall_run(self, trial: TrialPlan, patch: bytes) -> TrialRun | None:
        key = self._run_key(trial, patch)
        seen = self.store.run(key) if key is not None else None
        if seen is None:
            return None
        state = self.state
        gate = state.layout.gate(trial.gate)
        logs = gate / "logs"
        if logs.exists():
            return None  # never over what a verifier left
        for name, data in seen.files.items():
            target = logs.joinpath(*name.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        verifier_log = state.path(trial.gate, "verifier.log")
        verifier_log.write_bytes(
            seen.verifier_log
            + f"selfbench: as an earlier run of this verifier image saw it ({key})\n".encode()
        )
        run = TrialRun(
            agent_log=state.path(trial.gate, "agent.log"),
            collect_log=state.path(trial.gate, "collect.log"),
            verifier_log=verifier_log,
            patch=patch,
            test=ExecOutcome(exit_code=seen.exit_code, seconds=seen.seconds),
        )
        run.evidence = read_verifier(state.layout.verifier_logs(trial.gate))
        if run.reward is None or run.reward.reward != 0:
            # Only reward-0 runs are kept: this one is not what the runner wrote. Nothing of it
            # stays where the fresh verifier now logs.
            shutil.rmtree(logs, ignore_errors=True)
            verifier_log.unlink(missing_ok=True)
            return None
        return run

    def remember_run(
        self, trial: TrialPlan, patch: bytes, run: TrialRun, scratch: StageResult
    ) -> None:
        """An early run that ended with reward 0 within every limit, kept for the next verify
        only once this one's hack stage has passed (keep_runs): a run that lost by chance,
        beside another that won, never becomes what later verifies see."""
        test, details = run.test, run.details
        if test is None or test.exit_code is None or test.timed_out or test.oom_killed:
            return
        if test.storage_exceeded_mb is not None or test.truncation is not None:
            return
        if test.limits.pids_limit_hits > 0 or test.limits.pids_at_limit or scratch.truncated:
            return
        if details is None or details.truncated_logs or details.pids_limit_hits > 0:
            return
        if details.oom_kills > 0 or run.reward is None or run.reward.reward != 0:
            return
        key = self._run_key(trial, patch)
        if key is None:
            return
        logs = self.state.layout.gate(trial.gate) / "logs"
        files: dict[str, bytes] = {}
        total = 0
        for path in sorted(logs.rglob("*")):
            if path.is_symlink():
                return  # a verifier's copied-out logs are regular files: this run is not kept
            if not path.is_file():
                continue
            total += path.stat().st_size
            if total > MAX_RUN_BYTES or len(files) >= MAX_RUN_FILES:
                return
            files[path.relative_to(logs).as_posix()] = path.read_bytes()
        seen = RememberedRun(
            exit_code=test.exit_code,
            seconds=test.seconds,
            verifier_log=log_tail(run.verifier_log),
            files=files,
        )
        with self.lock:
            self.runs.append((key, seen))

    def keep_runs(self, passed: bool) -> None:
        """The early runs this verify saw end with reward 0, remembered when its hack stage
        passed (every exploit earned nothing); forgotten otherwise."""
        with self.lock:
            runs, self.runs[:] = list(self.runs), []
        if passed:
            for key, seen in runs:
                self.store.remember_run(key, seen)
