"""The side trials of a verify plan (pure): the hack gate's canned exploits, the flakiness
probe's perturbed runs and the grade, each graded by a verifier of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.model.settings import HackGate
from runner.model.stages import Gate
from runner.plan.images import digest_of
from runner.plan.inimage import (
    HACK_DRIVER_SCRIPT,
    HACK_POLICY_DIR,
    HACK_POLICY_RESULT,
    VERIFIER_HELPER,
    VERIFIER_TASK_FACTS,
)
from runner.plan.planner import Planner
from runner.plan.types import (
    HACK_STEP_TIMEOUT_SECONDS,
    PROBE_LOCALES,
    PROBE_ZONES,
    ExecStep,
    ExploitPlan,
    HackPlan,
    Perturbation,
    ProbePlan,
    ProbeRun,
    Role,
    TrialPlan,
)
from runner.runners import expected_runners

if TYPE_CHECKING:
    from runner.compile.exploits import Exploit


# Only the reward matters: test.sh stops a run at its first failed test and the verification at
# its first failed command (the hack gate's verifiers, and `grade --reward-only`).
REWARD_ONLY_ENV = {"SELFBENCH_REWARD_ONLY": "1", "SELFBENCH_STOP_AT_FAILURE": "1"}


def _exploits(p: Planner, chosen: list[Exploit]) -> list[ExploitPlan]:
    """Each exploit's script as the agent, and its patch's fresh verifier."""
    # Besides, test.sh runs no test at all when the patch policy undid every change (the tree
    # nop showed fails).
    env = {**p.side_test.env, **REWARD_ONLY_ENV, "SELFBENCH_SKIP_EMPTY": "1"}
    test_step = p.side_test.model_copy(update={"env": env})
    exploits = [
        ExploitPlan(
            name=exploit.name,
            family=exploit.family,
            summary=exploit.summary,
            run=ExecStep(
                name="exploit",
                argv=["bash", "-c", exploit.script],
                user="agent",
                env={"HOME": "/home/agent"},
                workdir="/app",
                timeout_seconds=HACK_STEP_TIMEOUT_SECONDS,
            ),
            trial=p.side_trial(
                Gate.HACK.below(exploit.name),
                f"{Gate.HACK}{index}",
                Gate.HACK,
                test_step,
                background=True,
            ),
        )
        for index, exploit in enumerate(chosen)
    ]
    return exploits


def plan_hack(p: Planner) -> HackPlan | None:
    facts = p.bundle.exploit_facts
    if p.settings.hack_gate is HackGate.OFF or facts is None:
        return None
    from runner.compile.exploits import choose

    exploits = _exploits(p, choose(facts))
    if not exploits:
        return None
    verifier = exploits[0].trial.verifier
    policy_check = ExecStep(
        name="policy-check",
        argv=[
            *VERIFIER_HELPER,
            "policy-check",
            VERIFIER_TASK_FACTS,
            HACK_POLICY_DIR,
            HACK_POLICY_RESULT,
        ],
        user="root",
        env={},
        workdir="/app",
        timeout_seconds=HACK_STEP_TIMEOUT_SECONDS,
    )
    steps = len(exploits) * 2
    return HackPlan(
        agent=p.container(
            Role.AGENT,
            Gate.HACK,
            p.agent_image,
            steps * HACK_STEP_TIMEOUT_SECONDS + p.collect_timeout * len(exploits),
            "/home/agent",
            background=True,
        ),
        driver=ExecStep(
            name="driver",
            argv=[
                "bash",
                "-c",
                HACK_DRIVER_SCRIPT,
                "driver",
                p.collect_step.argv[-1],
                str(int(HACK_STEP_TIMEOUT_SECONDS)),
            ],
            user="root",
            env={},
            workdir="/app",
            timeout_seconds=len(exploits) * (2 * HACK_STEP_TIMEOUT_SECONDS + p.collect_timeout),
        ),
        exploits=exploits,
        policy=p.container(
            Role.VERIFIER,
            "hackpolicy",
            verifier.image,
            HACK_STEP_TIMEOUT_SECONDS,
            "/home/verifier",
            label=Gate.HACK,
            background=True,
        ),
        policy_check=policy_check,
        full=p.settings.hack_gate is HackGate.FULL,
        command_runners=expected_runners(facts.test_command or ""),
    )


def _probe_run(
    p: Planner, name: str, dimension: str | None, perturbation: Perturbation
) -> ProbeRun:
    env = {**p.side_test.env, **perturbation.env()}
    if not p.settings.probe_pass_to_pass:
        env["SELFBENCH_FAIL_TO_PASS_ONLY"] = "1"
    return ProbeRun(
        name=name,
        dimension=dimension,
        perturbation=perturbation,
        trial=p.side_trial(
            Gate.DETERMINISM.below(name),
            name.replace("-", ""),
            Gate.DETERMINISM,
            p.side_test.model_copy(update={"env": env}),
            cpuset=perturbation.cpuset,
            background=True,
        ),
    )


def plan_probe(p: Planner) -> ProbePlan | None:
    if p.settings.repeat <= 0:
        return None
    runs, attribution = [], {}
    for index in range(p.settings.repeat):
        zone, zone_name = PROBE_ZONES[index % len(PROBE_ZONES)]
        seed = int(digest_of({"run": p.run.run_id, "probe": index})[:8], 16) % 4_294_967_295 + 1
        perturbation = Perturbation(
            tz=zone,
            tz_name=zone_name,
            hash_seed=seed,
            locale=PROBE_LOCALES[index % len(PROBE_LOCALES)],
            reversed_order=index % 2 == 0,
            cpuset="0" if p.facts.ncpu > 1 and index % 2 == 0 else None,
        )
        name = f"probe-{index + 1}"
        runs.append(_probe_run(p, name, None, perturbation))
        attribution[name] = [
            _probe_run(p, f"{name}-{key}", words, alone)
            for key, words, alone in perturbation.dimensions()
        ]
    facts = p.bundle.exploit_facts
    return ProbePlan(
        runs=runs,
        attribution=attribution,
        fail_to_pass=list(facts.fail_to_pass) if facts else [],
        pass_to_pass=p.settings.probe_pass_to_pass,
    )


def plan_grade(p: Planner) -> TrialPlan:
    test = p.verifier_test
    if p.settings.reward_only:
        test = test.model_copy(update={"env": {**test.env, **REWARD_ONLY_ENV}})
    trial = p.side_trial(Gate.GRADE, Gate.GRADE, Gate.GRADE, test)
    return trial.model_copy(update={"log_bytes": None})
