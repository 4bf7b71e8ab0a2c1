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
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runner import __version__
from runner.base import validation as v
from runner.base.resources import dockerfiles_dir
from runner.compile.bundle import Bundle
from runner.compile.render import AGENT_CONTEXT, VERIFIER_CONTEXT, healthcheck_test
from runner.model.harbor import AGENT_PATCH, BASE_GIT
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

PLAN_SCHEMA_VERSION = 1
LABEL_RUNNER = "org.selfbench.runner"
LABEL_RUN = "org.selfbench.run"
LABEL_TASK = "org.selfbench.task"
LABEL_KIND = "org.selfbench.kind"
LABEL_INPUTS = "org.selfbench.inputs"
LABEL_OWNER = "org.selfbench.owner"
LABEL_FROM_ID = "org.selfbench.from-id"

# Instructions (substrings) whose failure is the task's fault: its setup command and the
# dependency-setup pass. Any other failing step is infrastructure (a download, the engine).
TASK_BUILD_STEPS = (
    "/opt/selfbench-environment/setup.sh",
    "/opt/selfbench-environment/root-setup.sh",
    "selfbench-dependency-setup.patch",
)
SETUP_SCRIPT = "/opt/selfbench-environment/setup.sh"
SMOKE_SCRIPT = "/opt/selfbench-environment/smoke.sh"
VERIFIER_LOGS = "/logs/verifier"
SOLUTION_DIR = "/solution"
HACK_STEP_TIMEOUT_SECONDS = 120.0
SIDE_RUN_MAX_LOG_BYTES = 256 * 1024
# Back to the post-setup snapshot between two exploits (ignored files stay: the collect step
# never sees them either).
_GIT = f"git --git-dir={BASE_GIT} --work-tree=/app"
HACK_RESET_COMMAND = (
    "list=$(mktemp) && "
    f'{_GIT} diff --cached --name-only -z HEAD > "$list" && '
    f"{_GIT} reset -q --hard HEAD && {_GIT} clean -fdq && "
    # reset rewrites files as root: hand them back to the repository's owner (the agent).
    '{ xargs -0r -a "$list" chown -h --reference=/app -- 2>/dev/null; true; } && '
    f'rm -f "$list" {AGENT_PATCH}'
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EngineFacts(_Frozen):
    """What the plan needs to know about the engine that will run it."""

    ncpu: int = Field(ge=1)
    arch: Arch
    storage_quota: bool | None = None  # whether `--storage-opt size` works; None: unknown
    source: Literal["engine", "host"] = "engine"


class RunIdentity(_Frozen):
    run_id: str
    owner: str  # host:pid:start of the runner process, for the stale-run reaper


class Limits(_Frozen):
    cpus: float  # applied: the task's cpus, at most the engine's
    requested_cpus: float
    memory_mb: int
    storage_mb: int
    pids: int
    cpuset: str | None = None  # the flakiness probe's "different CPU count"


class BuildLimits(_Frozen):
    memory_mb: int
    cpuset: str


class RegistryArtifact(_Frozen):
    toolchain: str
    file: str
    sha256: str


class DerivedBase(_Frozen):
    """The runner-only base: the user's base plus an extra CA and registry artifacts."""

    tag: str
    digest: str
    extra_ca_sha256: str | None
    artifacts: list[RegistryArtifact]


class BasePlan(_Frozen):
    image: str  # the user's base image reference
    derived: DerivedBase | None

    @property
    def from_image(self) -> str:
        return self.derived.tag if self.derived else self.image


class ImageBuild(_Frozen):
    kind: Literal["agent", "verifier"]
    tag: str
    context: str
    context_digest: str
    from_image: str
    build_args: dict[str, str]
    proxy_build_args: list[str]
    labels: dict[str, str]
    limits: BuildLimits
    timeout_seconds: float
    network: str | None
    task_steps: list[str]


class ExecStep(_Frozen):
    name: str  # also the log file's stem
    argv: list[str]
    user: str
    env: dict[str, str]
    workdir: str
    timeout_seconds: float


class ContainerPlan(_Frozen):
    name: str
    image: str
    role: Literal["smoke", "agent", "verifier"]
    command: list[str]
    env: dict[str, str]
    proxy_env: list[str]
    workdir: str
    network: str
    limits: Limits
    labels: dict[str, str]
    storage: StorageLimit


class HealthcheckPlan(_Frozen):
    test: list[str]  # Docker's form: ["CMD", argv...] or ["CMD-SHELL", "command"]
    interval_seconds: float
    timeout_seconds: float
    retries: int
    start_period_seconds: float


class ServicePlan(_Frozen):
    """A verifier-only service of the environment contract, for one gate."""

    name: str  # its DNS name on the gate's network
    container: str
    image: str  # pinned by digest
    env: dict[str, str]
    command: list[str] | None
    healthcheck: HealthcheckPlan
    labels: dict[str, str]
    limits: Limits


class GateServices(_Frozen):
    """The services a gate's verifier talks to, on a network of their own that the agent
    container never joins. The gate waits for every service to report healthy."""

    network: str
    network_labels: dict[str, str]
    services: list[ServicePlan]
    ready_timeout_seconds: float


class SmokePlan(_Frozen):
    # None: the default, read-only smoke check runs in the nop verifier's container, before
    # its tests (one container fewer); a contract's smoke command gets a container of its own.
    container: ContainerPlan | None
    run: ExecStep
    services: GateServices | None = None


class TrialPlan(_Frozen):
    gate: str  # nop, oracle, or hack/<exploit> (also the run directory it logs to)
    # None for nop: its agent does nothing, and the agent image commits the post-setup tree, so
    # the collected patch is empty by construction; the verifier gets an empty agent.patch.
    agent: ContainerPlan | None
    solution_dir: str | None  # bundle directory copied to /solution (oracle)
    solve: ExecStep | None
    collect: ExecStep | None  # None with no agent container
    agent_patch: str
    verifier: ContainerPlan
    test: ExecStep
    verifier_logs: str
    services: GateServices | None = None
    log_bytes: int | None = None  # a cap of its own on each log (the plan's otherwise)
    # The same verifier with the internet on: a red gate is retried there once, to tell a
    # test that needs the network (None when the task declares testsNetwork: public).
    online_verifier: ContainerPlan | None = None
    online_services: GateServices | None = None
    # Which census the verifier grades by: `unsealed` records the tests it sees (nop and oracle,
    # which make the census); `sealed` grades by the one they made (every later verifier).
    census: Literal["unsealed", "sealed"] = "unsealed"


class ExploitPlan(_Frozen):
    """One canned hostile agent: its script runs as the agent on the post-setup tree, its
    collected patch goes to a fresh verifier (trial.agent is None: one agent container serves
    every exploit in turn, reset between them)."""

    name: str
    family: str
    summary: str
    run: ExecStep
    trial: TrialPlan


class HackPlan(_Frozen):
    agent: ContainerPlan
    collect: ExecStep
    reset: ExecStep  # back to the post-setup tree before the next exploit
    exploits: list[ExploitPlan]


# Time zones as POSIX TZ strings (glibc and CPython read them without tzdata, which a base image
# may lack): the far ends of the UTC offsets and a half-hour one.
PROBE_ZONES = (
    ("<+14>-14", "Pacific/Kiritimati"),
    ("<-0330>3:30", "America/St_Johns"),
    ("UTC0", "UTC"),
)
PROBE_LOCALES = ("C", "C.UTF-8")


class Perturbation(_Frozen):
    """What one probe run changes against the oracle's run; each field is one dimension."""

    tz: str | None = None
    tz_name: str | None = None
    hash_seed: int | None = None
    locale: str | None = None
    reversed_order: bool = False
    cpuset: str | None = None

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if self.tz:
            env["TZ"] = self.tz
        if self.hash_seed is not None:
            env["PYTHONHASHSEED"] = str(self.hash_seed)
        if self.locale:
            env["LANG"] = env["LC_ALL"] = self.locale
        if self.reversed_order:
            env["SELFBENCH_SELECTOR_ORDER"] = "reversed"
        return env

    def dimensions(self) -> list[tuple[str, str, Perturbation]]:
        """(key, words, this dimension alone) for each dimension set."""
        out: list[tuple[str, str, Perturbation]] = []
        if self.tz:
            out.append(
                (
                    "tz",
                    f"TZ={self.tz} (as {self.tz_name})",
                    Perturbation(tz=self.tz, tz_name=self.tz_name),
                )
            )
        if self.hash_seed is not None:
            out.append(
                (
                    "hashseed",
                    f"PYTHONHASHSEED={self.hash_seed}",
                    Perturbation(hash_seed=self.hash_seed),
                )
            )
        if self.locale:
            out.append(("locale", f"LANG=LC_ALL={self.locale}", Perturbation(locale=self.locale)))
        if self.reversed_order:
            out.append(
                ("order", "the selectors in reverse order", Perturbation(reversed_order=True))
            )
        if self.cpuset:
            out.append(
                ("cpus", f"one CPU (cpuset {self.cpuset})", Perturbation(cpuset=self.cpuset))
            )
        return out

    def words(self) -> str:
        return ", ".join(words for _, words, _ in self.dimensions())


class ProbeRun(_Frozen):
    name: str  # probe-N, or probe-N-<dimension> for an attribution run
    dimension: str | None  # None: every dimension of the perturbation
    perturbation: Perturbation
    trial: TrialPlan


class ProbePlan(_Frozen):
    """The flakiness probe: the oracle's patch verified again under perturbations. A run that
    fails is retried with each of its dimensions alone, to name the one that matters."""

    runs: list[ProbeRun]
    attribution: dict[str, list[ProbeRun]]
    fail_to_pass: list[str]  # the selectors whose pass rates the report gives


class VerifyPlan(_Frozen):
    schema_version: Literal[1] = 1
    runner_version: str = __version__
    task_id: str
    run_id: str
    bundle: str
    facts: EngineFacts
    base: BasePlan
    builds: list[ImageBuild]
    smoke: SmokePlan
    trials: list[TrialPlan]
    hack: HackPlan | None = None  # None: --no-hack-gate, or no exploit applies
    probe: ProbePlan | None = None  # None: --repeat 0
    # `grade`: any agent patch through a fresh verifier graded by the sealed census, the path the
    # hack gate's exploits and the probe's runs take.
    grade: TrialPlan | None = None
    hack_gate: bool = True
    # Both verifiers run at once only when twice the task's cpus fit the engine: a suite slowed
    # by contention could otherwise time out, a false red.
    parallel_verifiers: bool
    tests_network: Literal["no-network", "public"]
    storage: StorageLimit
    keep: bool
    remove_images: bool
    max_log_bytes: int

    def build(self, kind: str) -> ImageBuild:
        return next(b for b in self.builds if b.kind == kind)

    def trial(self, gate: str) -> TrialPlan:
        return next(t for t in self.trials if t.gate == gate)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


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
    config = bundle.config
    task_id = config.task_id
    slug = v.image_slug(task_id)
    suffix = run.run_id.rsplit("-", 1)[-1]
    contract = bundle.contract
    base = plan_base(
        settings,
        config.metadata.toolchains,
        facts.arch,
        pinned=contract.base_image if contract else None,
    )
    limits, build_limits = container_limits(bundle, settings, facts)
    storage = resolve_storage(settings.storage_limit, facts)
    catalog = load_catalog()
    layers = catalog.close(config.metadata.toolchains)
    build_args = {"BASE_IMAGE": base.from_image, **settings.build.toolchains.build_args(layers)}
    base_identity = base.derived.digest if base.derived else base.image
    proxies = sorted(settings.build.proxies)

    def labels(kind: str, **extra: str) -> dict[str, str]:
        return {
            LABEL_RUNNER: "1",
            LABEL_RUN: run.run_id,
            LABEL_TASK: task_id,
            LABEL_KIND: kind,
            LABEL_OWNER: run.owner,
            **extra,
        }

    builds = []
    for kind, context in (("agent", AGENT_CONTEXT), ("verifier", VERIFIER_CONTEXT)):
        inputs = _digest(
            {
                "context": bundle.context_digests[context],
                "args": build_args,
                "base": base_identity,
            }
        )
        builds.append(
            ImageBuild(
                kind=kind,  # type: ignore[arg-type]
                tag=f"selfbench/{slug}:{kind}-{inputs[:16]}",
                context=str(bundle.root / context),
                context_digest=bundle.context_digests[context],
                from_image=base.from_image,
                build_args=build_args,
                proxy_build_args=proxies,
                labels={
                    LABEL_RUNNER: "1",
                    LABEL_TASK: task_id,
                    LABEL_KIND: kind,
                    LABEL_INPUTS: inputs,
                },
                limits=build_limits,
                timeout_seconds=config.environment.build_timeout_sec,
                network=settings.build.build_network,
                task_steps=list(TASK_BUILD_STEPS),
            )
        )
    agent_image, verifier_image = builds[0].tag, builds[1].tag

    tests_network = contract.tests_network if contract else "no-network"

    def network_for(role: str, gate: str) -> str:
        """Agent sides need no network (solve.sh applies a patch, collect diffs). The verifier's
        tests have none unless the task declares `testsNetwork: public`; its services' network
        is internal, so joining it reaches the services and nothing else."""
        if role == "agent":
            return "none"
        if tests_network == "public":
            return "bridge"
        if contract is not None and contract.services:
            return f"selfbench-{slug}-{gate}-{suffix}"
        return "none"

    def container(
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
            name=f"selfbench-{slug}-{gate}{side}-{suffix}",
            image=image,
            role=role,  # type: ignore[arg-type]
            # The main process only keeps the container alive, and dies on its own a margin
            # after the gate's deadline even if the runner was killed and never removed it.
            command=["sleep", str(int(deadline + CONTAINER_MARGIN_SECONDS))],
            env={"HOME": home},
            proxy_env=proxies,
            workdir="/app",
            network=network_for(role, gate),
            limits=limits.model_copy(update={"cpuset": cpuset}) if cpuset else limits,
            labels=labels(
                label or gate, **({"org.selfbench.side": role} if role != "smoke" else {})
            ),
            storage=storage,
        )

    verifier_timeout = config.verifier.timeout_sec
    smoke_timeout = min(verifier_timeout, SMOKE_TIMEOUT_SECONDS)

    def services(gate: str, ready_timeout: float) -> GateServices | None:
        if contract is None or not contract.services:
            return None
        return GateServices(
            network=f"selfbench-{slug}-{gate}-{suffix}",
            network_labels=labels(gate),
            services=[
                ServicePlan(
                    name=service.name,
                    container=f"selfbench-{slug}-{gate}-svc-{service.name}-{suffix}",
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
                    labels=labels(gate, **{"org.selfbench.side": f"service-{service.name}"}),
                    limits=limits,
                )
                for service in contract.services
            ],
            ready_timeout_seconds=ready_timeout,
        )

    shared_smoke = bundle.default_smoke
    smoke = SmokePlan(
        container=None
        if shared_smoke
        else container("smoke", "smoke", verifier_image, smoke_timeout, "/home/verifier"),
        run=ExecStep(
            name="smoke",
            argv=["bash", SMOKE_SCRIPT],
            user="verifier",
            env={"HOME": "/home/verifier"},
            workdir="/app",
            timeout_seconds=smoke_timeout,
        ),
        services=None if shared_smoke else services("smoke", smoke_timeout),
    )
    collect_timeout = config.verifier.collect[0].timeout_sec
    collect_step = ExecStep(
        name="collect",
        argv=["bash", "-c", config.verifier.collect[0].command],
        user="root",
        env={},
        workdir="/app",
        timeout_seconds=collect_timeout,
    )
    trials = []
    for gate in ("nop", "oracle"):
        agent_deadline = collect_timeout + (config.agent.timeout_sec if gate == "oracle" else 0)
        solve = None
        if gate == "oracle":
            solve = ExecStep(
                name="agent",
                argv=["bash", f"{SOLUTION_DIR}/solve.sh"],
                user="agent",
                env={"HOME": "/home/agent"},
                workdir="/app",
                timeout_seconds=config.agent.timeout_sec,
            )
        trials.append(
            TrialPlan(
                gate=gate,
                agent=None
                if gate == "nop"
                else container("agent", gate, agent_image, agent_deadline, "/home/agent"),
                solution_dir=str(bundle.root / "solution") if gate == "oracle" else None,
                solve=solve,
                collect=None if gate == "nop" else collect_step,
                agent_patch=AGENT_PATCH,
                verifier=container(
                    "verifier", gate, verifier_image, verifier_timeout, "/home/verifier"
                ),
                online_verifier=None
                if tests_network == "public"
                else container(
                    "verifier",
                    f"{gate}online",
                    verifier_image,
                    verifier_timeout,
                    "/home/verifier",
                    label=gate,
                ).model_copy(update={"network": "bridge"}),
                online_services=None
                if tests_network == "public"
                else services(f"{gate}online", verifier_timeout),
                test=ExecStep(
                    name="verifier",
                    argv=["/tests/test.sh"],
                    user="root",
                    env={
                        "HOME": "/home/verifier",
                        "SELFBENCH_MAX_LOG_BYTES": str(settings.max_log_bytes),
                    },
                    workdir="/app",
                    timeout_seconds=verifier_timeout,
                ),
                verifier_logs=VERIFIER_LOGS,
                services=services(gate, verifier_timeout),
            )
        )
    # The hack gate's and the probe's many runs keep shorter logs: they must not multiply a loud
    # suite's output (their reward and last lines are what they are read for).
    side_log_bytes = min(settings.max_log_bytes, SIDE_RUN_MAX_LOG_BYTES)
    verifier_test = trials[0].test  # the same test.sh run for every verifier
    side_test = verifier_test.model_copy(
        update={"env": {**verifier_test.env, "SELFBENCH_MAX_LOG_BYTES": str(side_log_bytes)}}
    )

    def side_trial(
        gate: str, key: str, label: str, test: ExecStep, cpuset: str | None = None
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
            verifier=container(
                "verifier",
                key,
                verifier_image,
                verifier_timeout,
                "/home/verifier",
                label=label,
                cpuset=cpuset,
            ),
            test=test,
            verifier_logs=VERIFIER_LOGS,
            services=services(key, verifier_timeout),
            log_bytes=side_log_bytes,
        )

    hack = None
    facts_for_exploits = bundle.exploit_facts
    if settings.hack_gate and facts_for_exploits is not None:
        from runner.compile.exploits import choose

        # Only the reward matters: test.sh stops at the first failing command, and runs no
        # test at all when the patch policy undid every change (the tree nop showed fails).
        test_step = side_test.model_copy(
            update={
                "env": {**side_test.env, "SELFBENCH_REWARD_ONLY": "1", "SELFBENCH_SKIP_EMPTY": "1"}
            }
        )
        exploits = []
        for index, exploit in enumerate(choose(facts_for_exploits)):
            key = f"hack{index}"
            exploits.append(
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
                    trial=side_trial(f"hack/{exploit.name}", key, "hack", test_step),
                )
            )
        if exploits:
            steps = len(exploits) * 3
            hack = HackPlan(
                agent=container(
                    "agent",
                    "hack",
                    agent_image,
                    steps * HACK_STEP_TIMEOUT_SECONDS + collect_timeout * len(exploits),
                    "/home/agent",
                ),
                collect=collect_step,
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
    probe = None
    if settings.repeat > 0:

        def probe_run(name: str, dimension: str | None, perturbation: Perturbation) -> ProbeRun:
            key = name.replace("-", "")
            return ProbeRun(
                name=name,
                dimension=dimension,
                perturbation=perturbation,
                trial=side_trial(
                    f"determinism/{name}",
                    key,
                    "determinism",
                    side_test.model_copy(update={"env": {**side_test.env, **perturbation.env()}}),
                    cpuset=perturbation.cpuset,
                ),
            )

        runs, attribution = [], {}
        for index in range(settings.repeat):
            zone, zone_name = PROBE_ZONES[index % len(PROBE_ZONES)]
            seed = int(_digest({"run": run.run_id, "probe": index})[:8], 16) % 4_294_967_295 + 1
            perturbation = Perturbation(
                tz=zone,
                tz_name=zone_name,
                hash_seed=seed,
                locale=PROBE_LOCALES[index % len(PROBE_LOCALES)],
                reversed_order=index % 2 == 0,
                cpuset="0" if facts.ncpu > 1 and index % 2 == 0 else None,
            )
            name = f"probe-{index + 1}"
            runs.append(probe_run(name, None, perturbation))
            attribution[name] = [
                probe_run(f"{name}-{key}", words, alone)
                for key, words, alone in perturbation.dimensions()
            ]
        probe = ProbePlan(
            runs=runs,
            attribution=attribution,
            fail_to_pass=list(bundle.exploit_facts.fail_to_pass) if bundle.exploit_facts else [],
        )
    grade = side_trial("grade", "grade", "grade", verifier_test).model_copy(
        update={"log_bytes": None}
    )
    return VerifyPlan(
        task_id=task_id,
        grade=grade,
        run_id=run.run_id,
        bundle=str(bundle.root),
        facts=facts,
        base=base,
        builds=builds,
        smoke=smoke,
        trials=trials,
        hack=hack,
        hack_gate=settings.hack_gate,
        probe=probe,
        parallel_verifiers=2 * limits.requested_cpus <= facts.ncpu,
        tests_network=tests_network,
        storage=storage,
        keep=settings.keep,
        remove_images=settings.remove_images,
        max_log_bytes=settings.max_log_bytes,
    )


class PreparePlan(_Frozen):
    """`prepare`: the base and toolchain layers exactly as bundles render them, built once so
    later task builds find them in the layer cache."""

    schema_version: Literal[1] = 1
    toolchains: list[str]
    facts: EngineFacts
    base: BasePlan
    tag: str
    files: dict[str, str]  # the rendered context: name -> sha256
    build_args: dict[str, str]
    proxy_build_args: list[str]
    limits: BuildLimits
    timeout_seconds: float
    network: str | None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


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
