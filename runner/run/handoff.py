"""Build caches handed forward from a trusted run: what nop's verifier wrote under the
toolchains' cache directories (Go's build cache) goes, as a private copy, into every side
trial's verifier before it starts, so a hack or probe run does not compile again what nop
compiled. Nothing flows back: each copy is unpacked into one container's own layer."""

from __future__ import annotations

import logging
import time

from runner import judge
from runner.model.report import GateData
from runner.model.stages import GateId
from runner.plan.runtime import ArchiveToPut, Container
from runner.plan.types import TrialPlan
from runner.run import collect as left
from runner.run.state import RunState, StageResult, TrialRun

log = logging.getLogger(__name__)


def hand_off(
    state: RunState,
    trial: TrialPlan,
    verifier: Container,
    stage: StageResult,
    data: GateData,
    run: TrialRun,
) -> None:
    """After the producer's tests, in its verifier: pack what they added to the caches and keep
    it for the verifiers after it. A red producer hands nothing (the verdict is settled, and
    its tests may not have built what the others need)."""
    plan = state.plan.hand_off
    if plan is None or trial.gate != GateId(plan.producer):
        return
    if state.settled.is_set() or state.interrupted.is_set():
        return
    if run.reward is None or not judge.evaluate_gate(trial.gate.kind, run.reward)[0]:
        return
    started = time.monotonic()
    log_path = state.path(trial.gate, "hand-off.log")
    outcome = verifier.exec(plan.pack, log_path, limit=state.plan.max_log_bytes)
    said = left.last_meaningful(log_path)
    if outcome.exit_code != 0 or outcome.timed_out:
        log.warning(
            "%s: its build caches were not handed on (%s); every later verifier builds on its "
            "own; see %s",
            trial.gate,
            said or f"exit {outcome.exit_code}",
            log_path,
        )
        return
    archive = verifier.get_file(plan.archive, limit=plan.max_bytes)
    if not archive:
        log.debug("%s: no build cache to hand on (%s)", trial.gate, said)
        return
    state.handed_caches = archive
    data.handed_cache_bytes = len(archive)
    stage.logs.append(str(log_path))
    log.info(
        "%s: its build caches (%s) go to the verifiers after it, in %.1f s",
        trial.gate,
        said or f"{len(archive)} bytes",
        time.monotonic() - started,
    )


def handed(state: RunState, trial: TrialPlan) -> tuple[ArchiveToPut, ...]:
    """What a verifier of `trial` starts with: the handed caches, when it takes them."""
    if not trial.handed_caches or state.handed_caches is None:
        return ()
    return (ArchiveToPut(directory="/", data=state.handed_caches),)
