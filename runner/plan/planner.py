"""What every part of one verify plan shares (pure): the task, its images, limits, network,
timeouts and labels, and the containers and service sets made from them."""

from __future__ import annotations

from runner.base import validation as v
from runner.compile.bundle import Bundle
from runner.compile.render import AGENT_CONTEXT, VERIFIER_CONTEXT, healthcheck_test
from runner.model.harbor import AGENT_PATCH
from runner.model.settings import (
    CONTAINER_MARGIN_SECONDS,
    EvidenceChecks,
    VerifySettings,
)
from runner.model.stages import Gate, GateId, Stage
from runner.model.toolchains import load_catalog
from runner.plan.dockerfile import STEP_RECIPE
from runner.plan.images import container_limits, digest_of, plan_base, resolve_storage
from runner.plan.inimage import KEEP_ALIVE, TASK_BUILD_STEPS, VERIFIER_LOGS, VERIFIER_TEST_ARGV
from runner.plan.labels import runner_labels
from runner.plan.types import (
    SIDE_RUN_MAX_LOG_BYTES,
    ContainerPlan,
    EngineFacts,
    ExecStep,
    GateServices,
    HealthcheckPlan,
    ImageBuild,
    Role,
    RunIdentity,
    ServicePlan,
    StepLimits,
    TrialPlan,
)


class Planner:
    """What every part of one verify plan shares (the task, its images, limits, network and
    timeouts), and one method per part: the builds, smoke, the nop and oracle trials, the side
    trials (hack, probe, grade) that a verifier of their own grades."""

    def __init__(
        self, bundle: Bundle, settings: VerifySettings, facts: EngineFacts, run: RunIdentity
    ) -> None:
        self.bundle, self.settings, self.facts, self.run = bundle, settings, facts, run
        config = self.config = bundle.config
        self.task_id = config.task_id
        self.slug = v.image_slug(self.task_id)
        self.suffix = run.run_id.rsplit("-", 1)[-1]
        contract = self.contract = bundle.contract
        self.base = plan_base(
            settings,
            config.metadata.toolchains,
            facts.arch,
            pinned=contract.base_image if contract else None,
        )
        self.limits, self.build_limits = container_limits(bundle, settings, facts)
        self.storage = resolve_storage(settings.storage_limit, facts)
        layers = self.layers = load_catalog().close(config.metadata.toolchains)
        self.build_args = {
            "BASE_IMAGE": self.base.from_image,
            **settings.build.toolchains.build_args(layers),
        }
        self.proxies = sorted(settings.build.proxies)
        self.tests_network = contract.tests_network if contract else "no-network"
        self.verifier_timeout = config.verifier.timeout_sec
        self.collect_timeout = config.verifier.collect[0].timeout_sec
        self.collect_step = ExecStep(
            name="collect",
            argv=["bash", "-c", config.verifier.collect[0].command],
            user="root",
            env={},
            workdir="/app",
            timeout_seconds=self.collect_timeout,
        )
        self.verifier_test = ExecStep(
            name="verifier",
            argv=list(VERIFIER_TEST_ARGV),
            user="root",
            env={
                "HOME": "/home/verifier",
                "SELFBENCH_MAX_LOG_BYTES": str(settings.max_log_bytes),
                **(
                    {"SELFBENCH_EVIDENCE_CHECKS": settings.evidence_checks.value}
                    if settings.evidence_checks is not EvidenceChecks.ALL
                    else {}
                ),
            },
            workdir="/app",
            timeout_seconds=self.verifier_timeout,
        )
        # The hack gate's and the probe's many runs keep shorter logs: they must not multiply a
        # loud suite's output (their reward and last lines are what they are read for).
        self.side_log_bytes = min(settings.max_log_bytes, SIDE_RUN_MAX_LOG_BYTES)
        self.side_test = self.verifier_test.model_copy(
            update={
                "env": {
                    **self.verifier_test.env,
                    "SELFBENCH_MAX_LOG_BYTES": str(self.side_log_bytes),
                }
            }
        )
        self.agent_image = self.verifier_image = ""

    # ---- what every part uses -----------------------------------------------------------

    def labels(self, kind: str, side: str | None = None) -> dict[str, str]:
        return runner_labels(
            kind=kind,
            run=self.run.run_id,
            task=self.task_id,
            # A kept container outlives its runner on purpose: with no owner, no other runner's
            # stale-run reaper removes it (CI 2026-12: a --keep run's containers were reaped by
            # a parallel run while the test that asked to keep them still inspected them).
            owner=None if self.settings.keep else self.run.owner,
            side=side,
        )

    def network_for(self, role: Role, gate: str) -> str:
        """Agent sides need no network (solve.sh applies a patch, collect diffs). The verifier's
        tests have none unless the task declares `testsNetwork: public`; its services' network
        is internal, so joining it reaches the services and nothing else."""
        if role is Role.AGENT:
            return "none"
        if self.tests_network == "public":
            return "bridge"
        if self.contract is not None and self.contract.services:
            return f"selfbench-{self.slug}-{gate}-{self.suffix}"
        return "none"

    def container(
        self,
        role: Role,
        gate: str,
        image: str,
        deadline: float,
        home: str,
        label: str | None = None,
        cpuset: str | None = None,
        background: bool = False,
    ) -> ContainerPlan:
        side = "" if role is Role.SMOKE else f"-{role}"
        return ContainerPlan(
            name=f"selfbench-{self.slug}-{gate}{side}-{self.suffix}",
            image=image,
            role=role,
            # The main process only keeps the container alive, and dies on its own a margin
            # after the gate's deadline even if the runner was killed and never removed it.
            command=[KEEP_ALIVE, str(int(deadline + CONTAINER_MARGIN_SECONDS))],
            env={"HOME": home},
            proxy_env=self.proxies,
            workdir="/app",
            network=self.network_for(role, gate),
            limits=self.limits.model_copy(update={"cpuset": cpuset}) if cpuset else self.limits,
            labels=self.labels(label or gate, side=role if role is not Role.SMOKE else None),
            storage=self.storage,
            background=background,
        )

    def services(self, gate: str, ready_timeout: float) -> GateServices | None:
        contract = self.contract
        if contract is None or not contract.services:
            return None
        return GateServices(
            network=f"selfbench-{self.slug}-{gate}-{self.suffix}",
            network_labels=self.labels(gate),
            services=[
                ServicePlan(
                    name=service.name,
                    container=f"selfbench-{self.slug}-{gate}-svc-{service.name}-{self.suffix}",
                    image=service.image,
                    env=dict(sorted(service.env.items())),
                    command=list(service.command) if service.command else None,
                    healthcheck=HealthcheckPlan(
                        test=healthcheck_test(service.healthcheck.command),
                        interval_seconds=service.healthcheck.interval_seconds,
                        timeout_seconds=service.healthcheck.timeout_seconds,
                        retries=service.healthcheck.retries,
                        start_period_seconds=service.healthcheck.start_period_seconds,
                    ),
                    labels=self.labels(gate, side=f"service-{service.name}"),
                    limits=self.limits,
                )
                for service in contract.services
            ],
            ready_timeout_seconds=ready_timeout,
        )

    # ---- the parts ----------------------------------------------------------------------

    def builds(self) -> list[ImageBuild]:
        base_identity = self.base.derived.digest if self.base.derived else self.base.image
        builds = []
        for kind, context in (("agent", AGENT_CONTEXT), ("verifier", VERIFIER_CONTEXT)):
            digest = self.bundle.context_digests[context]
            # "steps": how task steps are built (runner.engine.steps); an image built before
            # its setup ran under the task's limits is not reused.
            inputs = digest_of(
                {
                    "context": digest,
                    "args": self.build_args,
                    "base": base_identity,
                    "steps": STEP_RECIPE,
                }
            )
            builds.append(
                ImageBuild(
                    kind=kind,  # type: ignore[arg-type]
                    tag=f"selfbench/{self.slug}:{kind}-{inputs[:16]}",
                    context=str(self.bundle.root / context),
                    context_digest=digest,
                    from_image=self.base.from_image,
                    build_args=self.build_args,
                    proxy_build_args=self.proxies,
                    labels=runner_labels(task=self.task_id, kind=kind, inputs=inputs),
                    limits=self.build_limits,
                    timeout_seconds=self.config.environment.build_timeout_sec,
                    network=self.settings.build.build_network,
                    task_steps=list(TASK_BUILD_STEPS),
                    steps=StepLimits(
                        limits=self.limits,
                        storage=self.storage,
                        labels=self.labels(Stage.BUILD, side=kind),
                        name=f"selfbench-{self.slug}-build-{kind}-{self.suffix}",
                    ),
                )
            )
        self.agent_image, self.verifier_image = builds[0].tag, builds[1].tag
        return builds

    def side_trial(
        self,
        gate: GateId | Gate,
        key: str,
        label: str,
        test: ExecStep,
        cpuset: str | None = None,
        *,
        background: bool = False,
    ) -> TrialPlan:
        """A verifier of its own for a patch the runner hands it (an exploit's, the oracle's
        again, one to grade), graded by the sealed census: no agent side. `background`: it
        takes the CPU the verdict's gates leave."""
        return TrialPlan(
            census="sealed",
            gate=GateId(gate),
            agent=None,
            solution_dir=None,
            solve=None,
            collect=None,
            agent_patch=AGENT_PATCH,
            verifier=self.container(
                Role.VERIFIER,
                key,
                self.verifier_image,
                self.verifier_timeout,
                "/home/verifier",
                label=label,
                cpuset=cpuset,
                background=background,
            ),
            test=test,
            verifier_logs=VERIFIER_LOGS,
            services=self.services(key, self.verifier_timeout),
            log_bytes=self.side_log_bytes,
            handed_caches=True,
        )
