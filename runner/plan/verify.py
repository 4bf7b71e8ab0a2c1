"""The verify plan (pure): a bundle, the settings and a few engine facts in; a frozen VerifyPlan
out, naming every image build (tag, context digest, build args, limits, timeout) and every gate
container (image, user, command, environment, files, limits, timeout, network).

Nothing here touches Docker, git or the network. The executor carries a plan out; `verify
--plan` prints one. Secrets stay out: proxy variables appear by name, their values are added at
execution.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from functools import cache

from runner.base import validation as v
from runner.base.resources import dockerfiles_dir
from runner.compile.bundle import Bundle
from runner.compile.render import AGENT_CONTEXT, VERIFIER_CONTEXT, healthcheck_test
from runner.model.harbor import AGENT_PATCH
from runner.model.settings import (
    CONTAINER_MARGIN_SECONDS,
    HELPER_BUILD_TIMEOUT_SECONDS,
    HELPER_CPUS,
    HELPER_MEMORY_MB,
    SMOKE_TIMEOUT_SECONDS,
    StorageLimit,
    VerifySettings,
)
from runner.model.task import Toolchain
from runner.model.toolchains import Arch, Source, load_catalog
from runner.plan.types import (
    HACK_RESET_COMMAND,
    HACK_STEP_TIMEOUT_SECONDS,
    LABEL_INPUTS,
    LABEL_KIND,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_RUNNER,
    LABEL_TASK,
    PROBE_LOCALES,
    PROBE_ZONES,
    SIDE_RUN_MAX_LOG_BYTES,
    SMOKE_SCRIPT,
    SOLUTION_DIR,
    TASK_BUILD_STEPS,
    VERIFIER_LOGS,
    BasePlan,
    BuildLimits,
    ContainerPlan,
    DerivedBase,
    EngineFacts,
    ExecStep,
    ExploitPlan,
    GateServices,
    HackPlan,
    HealthcheckPlan,
    ImageBuild,
    Limits,
    Perturbation,
    PreparePlan,
    ProbePlan,
    ProbeRun,
    RegistryArtifact,
    RunIdentity,
    ServicePlan,
    SmokePlan,
    TrialPlan,
    VerifyPlan,
)


@cache
def _template_digest(name: str) -> str:
    return hashlib.sha256((dockerfiles_dir() / name).read_bytes()).hexdigest()


def _digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def plan_base(
    settings: VerifySettings,
    toolchains: Iterable[Toolchain],
    arch: Arch,
    pinned: str | None = None,
) -> BasePlan:
    """The image task builds start FROM: the contract's pinned base when the task has one, else
    the runner's --base-image. A derived base exists only when this machine needs one (an extra
    CA, registry-sourced toolchains); its tag is a hash of its inputs."""
    build = settings.build
    image = pinned or build.base_image
    catalog = load_catalog()
    layers = catalog.close(toolchains)
    artifacts = [
        RegistryArtifact(
            toolchain=layer.name.value,
            file=layer.registry.arch[arch].file,
            sha256=layer.registry.arch[arch].sha256,
        )
        for layer in layers
        if build.toolchains.source(layer.name) is Source.REGISTRY and layer.registry is not None
    ]
    ca_sha = hashlib.sha256(build.extra_ca_pem).hexdigest() if build.extra_ca_pem else None
    if ca_sha is None and not artifacts:
        return BasePlan(image=image, derived=None)
    digest = _digest(
        {
            "base": image,
            "ca": ca_sha,
            "artifacts": [a.model_dump() for a in artifacts],
            "template": _template_digest("derived-base.Dockerfile.j2"),
        }
    )
    return BasePlan(
        image=image,
        derived=DerivedBase(
            tag=f"selfbench/base:{digest[:16]}",
            digest=digest,
            extra_ca_sha256=ca_sha,
            artifacts=artifacts,
        ),
    )


def container_limits(
    bundle: Bundle, settings: VerifySettings, facts: EngineFacts
) -> tuple[Limits, BuildLimits]:
    environment = bundle.config.environment
    applied = min(float(facts.ncpu), environment.cpus)
    cores = max(1, min(facts.ncpu, math.ceil(environment.cpus)))
    return (
        Limits(
            cpus=applied,
            requested_cpus=environment.cpus,
            memory_mb=environment.memory_mb,
            storage_mb=environment.storage_mb,
            pids=settings.pids_limit,
        ),
        BuildLimits(memory_mb=environment.memory_mb, cpuset=f"0-{cores - 1}" if cores > 1 else "0"),
    )


def resolve_storage(requested: StorageLimit, facts: EngineFacts) -> StorageLimit:
    if requested is not StorageLimit.AUTO:
        return requested
    if facts.storage_quota is True:
        return StorageLimit.QUOTA
    if facts.storage_quota is False:
        return StorageLimit.WATCHDOG
    return StorageLimit.AUTO


def plan_verify(
    bundle: Bundle, settings: VerifySettings, facts: EngineFacts, run: RunIdentity
) -> VerifyPlan:
    planner = _Planner(bundle, settings, facts, run)
    builds = planner.builds()
    trials = planner.trials()
    return VerifyPlan(
        task_id=planner.task_id,
        grade=planner.grade(),
        run_id=run.run_id,
        bundle=str(bundle.root),
        facts=facts,
        base=planner.base,
        builds=builds,
        smoke=planner.smoke(),
        trials=trials,
        hack=planner.hack(),
        hack_gate=settings.hack_gate,
        probe=planner.probe(),
        parallel_verifiers=2 * planner.limits.requested_cpus <= facts.ncpu,
        tests_network=planner.tests_network,
        storage=planner.storage,
        keep=settings.keep,
        remove_images=settings.remove_images,
        max_log_bytes=settings.max_log_bytes,
    )


class _Planner:
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
        layers = load_catalog().close(config.metadata.toolchains)
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
            argv=["/tests/test.sh"],
            user="root",
            env={
                "HOME": "/home/verifier",
                "SELFBENCH_MAX_LOG_BYTES": str(settings.max_log_bytes),
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

    def labels(self, kind: str, **extra: str) -> dict[str, str]:
        return {
            LABEL_RUNNER: "1",
            LABEL_RUN: self.run.run_id,
            LABEL_TASK: self.task_id,
            LABEL_KIND: kind,
            # A kept container outlives its runner on purpose: with no owner, no other runner's
            # stale-run reaper removes it (CI 2026-12: a --keep run's containers were reaped by
            # a parallel run while the test that asked to keep them still inspected them).
            **({LABEL_OWNER: self.run.owner} if self.run.owner and not self.settings.keep else {}),
            **extra,
        }

    def network_for(self, role: str, gate: str) -> str:
        """Agent sides need no network (solve.sh applies a patch, collect diffs). The verifier's
        tests have none unless the task declares `testsNetwork: public`; its services' network
        is internal, so joining it reaches the services and nothing else."""
        if role == "agent":
            return "none"
        if self.tests_network == "public":
            return "bridge"
        if self.contract is not None and self.contract.services:
            return f"selfbench-{self.slug}-{gate}-{self.suffix}"
        return "none"

    def container(
        self,
        role: str,
        gate: str,
        image: str,
        deadline: float,
        home: str,
        label: str | None = None,
        cpuset: str | None = None,
    ) -> ContainerPlan:
        side = "" if role == "smoke" else f"-{role}"
        return ContainerPlan(
            name=f"selfbench-{self.slug}-{gate}{side}-{self.suffix}",
            image=image,
            role=role,  # type: ignore[arg-type]
            # The main process only keeps the container alive, and dies on its own a margin
            # after the gate's deadline even if the runner was killed and never removed it.
            command=["sleep", str(int(deadline + CONTAINER_MARGIN_SECONDS))],
            env={"HOME": home},
            proxy_env=self.proxies,
            workdir="/app",
            network=self.network_for(role, gate),
            limits=self.limits.model_copy(update={"cpuset": cpuset}) if cpuset else self.limits,
            labels=self.labels(
                label or gate, **({"org.selfbench.side": role} if role != "smoke" else {})
            ),
            storage=self.storage,
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
                    labels=self.labels(gate, **{"org.selfbench.side": f"service-{service.name}"}),
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
            inputs = _digest({"context": digest, "args": self.build_args, "base": base_identity})
            builds.append(
                ImageBuild(
                    kind=kind,  # type: ignore[arg-type]
                    tag=f"selfbench/{self.slug}:{kind}-{inputs[:16]}",
                    context=str(self.bundle.root / context),
                    context_digest=digest,
                    from_image=self.base.from_image,
                    build_args=self.build_args,
                    proxy_build_args=self.proxies,
                    labels={
                        LABEL_RUNNER: "1",
                        LABEL_TASK: self.task_id,
                        LABEL_KIND: kind,
                        LABEL_INPUTS: inputs,
                    },
                    limits=self.build_limits,
                    timeout_seconds=self.config.environment.build_timeout_sec,
                    network=self.settings.build.build_network,
                    task_steps=list(TASK_BUILD_STEPS),
                )
            )
        self.agent_image, self.verifier_image = builds[0].tag, builds[1].tag
        return builds

    def smoke(self) -> SmokePlan:
        shared = self.bundle.default_smoke
        timeout = min(self.verifier_timeout, SMOKE_TIMEOUT_SECONDS)
        return SmokePlan(
            container=None
            if shared
            else self.container("smoke", "smoke", self.verifier_image, timeout, "/home/verifier"),
            run=ExecStep(
                name="smoke",
                argv=["bash", SMOKE_SCRIPT],
                user="verifier",
                env={"HOME": "/home/verifier"},
                workdir="/app",
                timeout_seconds=timeout,
            ),
            services=None if shared else self.services("smoke", timeout),
        )

    def trials(self) -> list[TrialPlan]:
        return [self.trial("nop"), self.trial("oracle")]

    def trial(self, gate: str) -> TrialPlan:
        agent_timeout = self.config.agent.timeout_sec
        oracle = gate == "oracle"
        offline = self.tests_network != "public"
        return TrialPlan(
            gate=gate,
            agent=self.container(
                "agent", gate, self.agent_image, self.collect_timeout + agent_timeout,
                "/home/agent",
            )
            if oracle
            else None,
            solution_dir=str(self.bundle.root / "solution") if oracle else None,
            solve=ExecStep(
                name="agent",
                argv=["bash", f"{SOLUTION_DIR}/solve.sh"],
                user="agent",
                env={"HOME": "/home/agent"},
                workdir="/app",
                timeout_seconds=agent_timeout,
            )
            if oracle
            else None,
            collect=self.collect_step if oracle else None,
            agent_patch=AGENT_PATCH,
            verifier=self.container(
                "verifier", gate, self.verifier_image, self.verifier_timeout, "/home/verifier"
            ),
            online_verifier=self.container(
                "verifier", f"{gate}online", self.verifier_image, self.verifier_timeout,
                "/home/verifier", label=gate,
            ).model_copy(update={"network": "bridge"})
            if offline
            else None,
            online_services=self.services(f"{gate}online", self.verifier_timeout)
            if offline
            else None,
            test=self.verifier_test,
            verifier_logs=VERIFIER_LOGS,
            services=self.services(gate, self.verifier_timeout),
        )  # fmt: skip

    def side_trial(
        self, gate: str, key: str, label: str, test: ExecStep, cpuset: str | None = None
    ) -> TrialPlan:
        """A verifier of its own for a patch the runner hands it (an exploit's, the oracle's
        again, one to grade), graded by the sealed census: no agent side."""
        return TrialPlan(
            census="sealed",
            gate=gate,
            agent=None,
            solution_dir=None,
            solve=None,
            collect=None,
            agent_patch=AGENT_PATCH,
            verifier=self.container(
                "verifier",
                key,
                self.verifier_image,
                self.verifier_timeout,
                "/home/verifier",
                label=label,
                cpuset=cpuset,
            ),
            test=test,
            verifier_logs=VERIFIER_LOGS,
            services=self.services(key, self.verifier_timeout),
            log_bytes=self.side_log_bytes,
        )

    def hack(self) -> HackPlan | None:
        facts = self.bundle.exploit_facts
        if not self.settings.hack_gate or facts is None:
            return None
        from runner.compile.exploits import choose

        # Only the reward matters: test.sh stops at the first failing command, and runs no
        # test at all when the patch policy undid every change (the tree nop showed fails).
        env = {**self.side_test.env, "SELFBENCH_REWARD_ONLY": "1", "SELFBENCH_SKIP_EMPTY": "1"}
        test_step = self.side_test.model_copy(update={"env": env})
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
                trial=self.side_trial(f"hack/{exploit.name}", f"hack{index}", "hack", test_step),
            )
            for index, exploit in enumerate(choose(facts))
        ]
        if not exploits:
            return None
        steps = len(exploits) * 3
        return HackPlan(
            agent=self.container(
                "agent",
                "hack",
                self.agent_image,
                steps * HACK_STEP_TIMEOUT_SECONDS + self.collect_timeout * len(exploits),
                "/home/agent",
            ),
            collect=self.collect_step,
            reset=ExecStep(
                name="reset",
                argv=["bash", "-c", HACK_RESET_COMMAND],
                user="root",
                env={},
                workdir="/app",
                timeout_seconds=HACK_STEP_TIMEOUT_SECONDS,
            ),
            exploits=exploits,
        )

    def probe_run(self, name: str, dimension: str | None, perturbation: Perturbation) -> ProbeRun:
        env = {**self.side_test.env, **perturbation.env()}
        return ProbeRun(
            name=name,
            dimension=dimension,
            perturbation=perturbation,
            trial=self.side_trial(
                f"determinism/{name}",
                name.replace("-", ""),
                "determinism",
                self.side_test.model_copy(update={"env": env}),
                cpuset=perturbation.cpuset,
            ),
        )

    def probe(self) -> ProbePlan | None:
        if self.settings.repeat <= 0:
            return None
        runs, attribution = [], {}
        for index in range(self.settings.repeat):
            zone, zone_name = PROBE_ZONES[index % len(PROBE_ZONES)]
            seed = (
                int(_digest({"run": self.run.run_id, "probe": index})[:8], 16) % 4_294_967_295 + 1
            )
            perturbation = Perturbation(
                tz=zone,
                tz_name=zone_name,
                hash_seed=seed,
                locale=PROBE_LOCALES[index % len(PROBE_LOCALES)],
                reversed_order=index % 2 == 0,
                cpuset="0" if self.facts.ncpu > 1 and index % 2 == 0 else None,
            )
            name = f"probe-{index + 1}"
            runs.append(self.probe_run(name, None, perturbation))
            attribution[name] = [
                self.probe_run(f"{name}-{key}", words, alone)
                for key, words, alone in perturbation.dimensions()
            ]
        facts = self.bundle.exploit_facts
        return ProbePlan(
            runs=runs,
            attribution=attribution,
            fail_to_pass=list(facts.fail_to_pass) if facts else [],
        )

    def grade(self) -> TrialPlan:
        trial = self.side_trial("grade", "grade", "grade", self.verifier_test)
        return trial.model_copy(update={"log_bytes": None})


def plan_prepare(
    toolchains: Iterable[Toolchain], settings: VerifySettings, facts: EngineFacts
) -> PreparePlan:
    from runner.compile.render import render_toolchain_context

    selected = list(toolchains)
    base = plan_base(settings, selected, facts.arch)
    layers = load_catalog().close(selected)
    files = {
        name: hashlib.sha256(content).hexdigest()
        for name, content in render_toolchain_context(layers).items()
    }
    build_args = {"BASE_IMAGE": base.from_image, **settings.build.toolchains.build_args(layers)}
    digest = _digest(
        {
            "files": files,
            "args": build_args,
            "base": base.derived.digest if base.derived else base.image,
        }
    )
    cores = min(facts.ncpu, int(HELPER_CPUS))
    return PreparePlan(
        toolchains=[layer.name.value for layer in layers],
        facts=facts,
        base=base,
        tag=f"selfbench/toolchains:{digest[:16]}",
        files=files,
        build_args=build_args,
        proxy_build_args=sorted(settings.build.proxies),
        limits=BuildLimits(
            memory_mb=HELPER_MEMORY_MB, cpuset=f"0-{cores - 1}" if cores > 1 else "0"
        ),
        timeout_seconds=HELPER_BUILD_TIMEOUT_SECONDS,
        network=settings.build.build_network,
    )
