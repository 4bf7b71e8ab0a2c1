"""The hack gate's memory for one run: the exploit sides and policy checks earlier runs of
the same agent and verifier images saw (runner.run.remembered), read before the stage and
written after it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runner import __version__
from runner.base.errors import RunnerError
from runner.model.evidence import PolicyCheck
from runner.plan.types import ExploitPlan, HackPlan
from runner.run.hackagent import ExploitAgent
from runner.run.remembered import Remembered, check_key, patch_digest, side_key
from runner.run.state import ExploitSide, RunState, StageResult

log = logging.getLogger(__name__)

_PLAN_ONLY = {"name", "labels", "image", "background"}  # not what a container does


@dataclass(frozen=True, kw_only=True)
class HackMemory:
    """The hack gate's remembered sides and checks for one run (runner.run.remembered): keyed
    by the image ids, the containers' plans (but their names and labels), the driver and policy
    steps, each exploit's script, and each patch's digest."""

    store: Remembered
    plan: HackPlan
    agent_image: str
    verifier_image: str | None
    exploit_agent: ExploitAgent

    @classmethod
    def of(cls, state: RunState, exploit_agent: ExploitAgent) -> HackMemory | None:
        """What earlier runs of the same agent and verifier images saw (runner.run.remembered);
        None with --hack-gate full or --keep, or when an image's id is unknown."""
        plan = state.plan.hack
        store = state.env.remembered
        if plan is None or store is None or plan.full or state.plan.keep:
            return None
        try:
            agent = state.engine.image(plan.agent.image)
            verifier = state.engine.image(plan.policy.image) if plan.policy else None
        except RunnerError as exc:
            log.debug("no remembered hack-gate sides: %s", exc)
            return None
        if agent is None:
            return None
        return cls(
            store=store,
            plan=plan,
            agent_image=agent.id,
            verifier_image=verifier.id if verifier is not None else None,
            exploit_agent=exploit_agent,
        )

    def _side_key(self, exploit: ExploitPlan) -> str:
        return side_key(
            {
                "version": __version__,
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
