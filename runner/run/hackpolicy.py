"""The hack gate's patch policy check: every collected exploit patch through the verifier's
patch policy at once (verifier.pl policy-check), in one verifier container, without tests."""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Future
from pathlib import PurePosixPath

from runner.base.errors import RunnerError
from runner.model.evidence import MAX_EVIDENCE_BYTES, PolicyCheck, parse_policy_check
from runner.model.stages import Stage
from runner.plan.inimage import HACK_POLICY_DIR, HACK_POLICY_RESULT
from runner.plan.runtime import Container
from runner.plan.types import ContainerPlan
from runner.run.state import ExploitSide, RunState, StageResult

log = logging.getLogger(__name__)

# Beside each exploit's patch: what the policy check said of it, when that decided it.
POLICY_CHECK_FILE = "policy-check.json"


class PolicyChecker:
    def __init__(self, state: RunState) -> None:
        self.state = state

    def open(self, stack: contextlib.ExitStack, container: ContainerPlan) -> Container:
        """The policy check's verifier container (the hack plan's `policy`, its image maybe
        pinned to an id: HackMemory.pinned), started while the agent side runs (its start is
        then off the hack gate's longest path); removed when `stack` closes."""
        return stack.enter_context(
            self.state.engine.container(
                container, env=self.state.env.proxies, keep=self.state.plan.keep
            )
        )

    def check(
        self,
        sides: dict[str, ExploitSide],
        stage: StageResult,
        opening: Future[Container] | None,
        known: dict[str, PolicyCheck] | None = None,
    ) -> dict[str, PolicyCheck]:
        """verifier.pl policy-check on every collected patch but those `known` already (an
        earlier run checked them: runner.run.remembered), in one verifier container. What it
        cannot say (it failed, or its engine call did) leaves each patch to its verifier."""
        known = dict(known or {})
        patches = {
            name: side.patch for name, side in sides.items() if side.patch and name not in known
        }
        checks = {**known, **self._run(patches, stage, opening)}
        recalled = [name for name in known if sides.get(name) is not None and sides[name].patch]
        if recalled:
            self._log_recalled(recalled, known, stage)
        for name, check in checks.items():
            if sides.get(name) is not None and sides[name].patch:
                self.state.path(Stage.HACK, name, POLICY_CHECK_FILE).write_text(
                    check.model_dump_json(by_alias=True, indent=2)
                )
        return checks

    def _log_recalled(
        self, names: list[str], known: dict[str, PolicyCheck], stage: StageResult
    ) -> None:
        """policy-check.log says which checks came from an earlier verify (after what the
        container printed, if it ran for the others), as the agent's log does for its sides."""
        log_path = self.state.path(Stage.HACK, "policy-check.log")
        with log_path.open("a") as log_file:
            for name in names:
                check = known[name]
                log_file.write(
                    f"selfbench: {name}: as an earlier verify of the same verifier image "
                    f"checked it ({'applies' if check.applied else 'does not apply'}; the "
                    f"policy keeps {check.kept} change(s), {check.restores} restore(s))\n"
                )
        if str(log_path) not in stage.logs:
            stage.logs.append(str(log_path))

    def _run(
        self,
        patches: dict[str, bytes],
        stage: StageResult,
        opening: Future[Container] | None,
    ) -> dict[str, PolicyCheck]:
        plan = self.state.plan.hack
        assert plan is not None
        if opening is None or plan.policy_check is None:
            return {}
        where = PurePosixPath(HACK_POLICY_DIR)
        log_path = self.state.path(Stage.HACK, "policy-check.log")
        raw: bytes | None = None
        try:
            container = opening.result()
            self.state.keep("hack policy", container)
            if not patches:
                return {}
            stage.logs.append(str(log_path))
            # One archive for every patch: each put is an unpack of its own in the engine
            # (measured: 25 puts took 2.3 s of the hack stage of a pytest task).
            container.put_files(
                [
                    (str(where.parent), f"{where.name}/{name}.patch", patch, 0o600)
                    for name, patch in patches.items()
                ]
            )
            ran = container.exec(plan.policy_check, log_path, limit=self.state.plan.max_log_bytes)
            if ran.exit_code == 0 and not ran.timed_out:
                raw = container.get_file(HACK_POLICY_RESULT, limit=MAX_EVIDENCE_BYTES)
        except RunnerError as exc:
            log.warning("the hack gate's policy check failed (%s): every exploit is verified", exc)
            return {}
        if raw is None:
            log.warning("the hack gate's policy check said nothing; see %s", log_path)
            return {}
        return {name: c for name, c in parse_policy_check(raw).items() if name in patches}
