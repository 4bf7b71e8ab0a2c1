"""The verify plan (pure): a bundle, the settings and a few engine facts in; a frozen VerifyPlan
out, naming every image build (tag, context digest, build args, limits, timeout) and every gate
container (image, user, command, environment, files, limits, timeout, network).

Nothing here touches Docker, git or the network. The executor carries a plan out; `verify
--plan` prints one. Secrets stay out: proxy variables appear by name, their values are added at
execution.
"""

from __future__ import annotations

from runner.compile.bundle import Bundle
from runner.model.canaries import CanaryPlan
from runner.model.harbor import AGENT_PATCH
from runner.model.layout import BundleLayout
from runner.model.settings import (
    SMOKE_TIMEOUT_SECONDS,
    HackGate,
    VerifySettings,
)
from runner.model.stages import Gate, GateId, Stage
from runner.plan.inimage import (
    HAND_OFF_ARCHIVE,
    HAND_OFF_MAX_BYTES,
    HAND_OFF_SCRIPT,
    HAND_OFF_TIMEOUT_SECONDS,
    SMOKE_SCRIPT,
    SOLVE_ARGV,
    VERIFIER_LOGS,
)
from runner.plan.planner import Planner
from runner.plan.sidetrials import plan_grade, plan_hack, plan_probe
from runner.plan.types import (
    CacheHandOff,
    EngineFacts,
    ExecStep,
    Role,
    RunIdentity,
    SmokePlan,
    TrialPlan,
    VerifyPlan,
)


def plan_verify(
    bundle: Bundle, settings: VerifySettings, facts: EngineFacts, run: RunIdentity
) -> VerifyPlan:
    planner = Planner(bundle, settings, facts, run)
    builds = planner.builds()
    trials = plan_trials(planner)
    return VerifyPlan(
        task_id=planner.task_id,
        grade=plan_grade(planner),
        hand_off=plan_hand_off(planner),
        run_id=run.run_id,
        bundle=str(bundle.root),
        facts=facts,
        base=planner.base,
        builds=builds,
        smoke=plan_smoke(planner),
        trials=trials,
        hack=plan_hack(planner),
        hack_gate=settings.hack_gate is not HackGate.OFF,
        keep_going=settings.keep_going,
        probe=plan_probe(planner),
        parallel_verifiers=2 * planner.limits.requested_cpus <= facts.ncpu,
        tests_network=planner.tests_network,
        storage=planner.storage,
        keep=settings.keep,
        remove_images=settings.remove_images,
        max_log_bytes=settings.max_log_bytes,
        canaries=CanaryPlan.of(bundle.canaries),
    )


def plan_hand_off(p: Planner) -> CacheHandOff | None:
    """nop's verifier hands what it wrote under the toolchains' cache directories to the side
    trials' verifiers (none: no such directory, or --no-hand-caches)."""
    directories = sorted({path for layer in p.layers for path in layer.caches})
    if not p.settings.hand_caches or not directories:
        return None
    return CacheHandOff(
        directories=directories,
        pack=ExecStep(
            name="hand-off",
            argv=[
                "bash",
                "-c",
                HAND_OFF_SCRIPT,
                "hand-off",
                str(HAND_OFF_MAX_BYTES),
                HAND_OFF_ARCHIVE,
                AGENT_PATCH,
                *directories,
            ],
            user="root",
            env={},
            workdir="/",
            timeout_seconds=HAND_OFF_TIMEOUT_SECONDS,
        ),
    )


def plan_smoke(p: Planner) -> SmokePlan:
    shared = p.bundle.default_smoke
    timeout = min(p.verifier_timeout, SMOKE_TIMEOUT_SECONDS)
    return SmokePlan(
        container=None
        if shared
        else p.container(Role.SMOKE, Stage.SMOKE, p.verifier_image, timeout, "/home/verifier"),
        run=ExecStep(
            name=Stage.SMOKE,
            argv=["bash", SMOKE_SCRIPT],
            user="verifier",
            env={"HOME": "/home/verifier"},
            workdir="/app",
            timeout_seconds=timeout,
        ),
        services=None if shared else p.services(Stage.SMOKE, timeout),
    )


def plan_trials(p: Planner) -> list[TrialPlan]:
    return [plan_trial(p, Gate.NOP), plan_trial(p, Gate.ORACLE)]


def plan_trial(p: Planner, gate: Gate) -> TrialPlan:
    agent_timeout = p.config.agent.timeout_sec
    oracle = gate is Gate.ORACLE
    offline = p.tests_network != "public"
    return TrialPlan(
        gate=GateId(gate),
        agent=p.container(
            Role.AGENT, gate, p.agent_image, p.collect_timeout + agent_timeout,
            "/home/agent",
        )
        if oracle
        else None,
        solution_dir=str(BundleLayout(p.bundle.root).solution) if oracle else None,
        solve=ExecStep(
            name="agent",
            argv=list(SOLVE_ARGV),
            user="agent",
            env={"HOME": "/home/agent"},
            workdir="/app",
            timeout_seconds=agent_timeout,
        )
        if oracle
        else None,
        collect=p.collect_step if oracle else None,
        agent_patch=AGENT_PATCH,
        verifier=p.container(
            Role.VERIFIER, gate, p.verifier_image, p.verifier_timeout, "/home/verifier"
        ),
        online_verifier=p.container(
            Role.VERIFIER, f"{gate}online", p.verifier_image, p.verifier_timeout,
            "/home/verifier", label=gate,
        ).model_copy(update={"network": "bridge"})
        if offline
        else None,
        online_services=p.services(f"{gate}online", p.verifier_timeout)
        if offline
        else None,
        test=p.verifier_test,
        verifier_logs=VERIFIER_LOGS,
        services=p.services(gate, p.verifier_timeout),
    )  # fmt: skip
