"""The verify plan's frozen types: what the executor is given (every build, container, step and
limit), with no logic that decides them (that is runner.plan.verify). Labels are in
runner.plan.labels, paths and commands inside the images in runner.plan.inimage."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner import __version__
from runner.model.canaries import CanaryPlan
from runner.model.settings import StorageLimit
from runner.model.stages import Gate, GateId, Stage
from runner.model.toolchains import Arch
from runner.plan.inimage import HAND_OFF_ARCHIVE, HAND_OFF_MAX_BYTES

PLAN_SCHEMA_VERSION = 1
HACK_STEP_TIMEOUT_SECONDS = 120.0
SIDE_RUN_MAX_LOG_BYTES = 256 * 1024


class _Frozen(BaseModel):
    # camelCase in JSON, as the report; Python keeps its names, and reads back either spelling.
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel,
                              populate_by_name=True, serialize_by_alias=True)  # fmt: skip


class EngineFacts(_Frozen):
    """What the plan needs to know about the engine that will run it."""

    ncpu: int = Field(ge=1)
    arch: Arch
    storage_quota: bool | None = None  # whether `--storage-opt size` works; None: unknown
    source: Literal["engine", "host"] = "engine"
    memory_mb: int | None = None  # the engine's memory; None: unknown


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


class StepLimits(_Frozen):
    """What a build step that runs the task's code runs under: every limit of the task (the
    builder alone applies memory and a CPU set), and the labels of its container."""

    limits: Limits
    storage: StorageLimit
    labels: dict[str, str]
    name: str  # the step container's name stem


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
    steps: StepLimits | None = None


class ExecStep(_Frozen):
    name: str  # also the log file's stem
    argv: list[str]
    user: str
    env: dict[str, str]
    workdir: str
    timeout_seconds: float


class Role(StrEnum):
    """What a container is for: a gate's agent or verifier side, the smoke check's own, or a
    build step's."""

    AGENT = "agent"
    VERIFIER = "verifier"
    SMOKE = Stage.SMOKE.value
    BUILD = Stage.BUILD.value


class ContainerPlan(_Frozen):
    name: str
    image: str
    role: Role
    command: list[str]
    env: dict[str, str]
    proxy_env: list[str]
    workdir: str
    network: str
    limits: Limits
    labels: dict[str, str]
    storage: StorageLimit
    # The hack gate's and the flakiness probe's containers: they take the CPU the gates that
    # decide the verdict leave (a lower CPU weight; all of it when nothing else runs).
    background: bool = False
    # Replaces the image's (a build step's container keeps the image's own command, which its
    # commit then keeps too).
    entrypoint: list[str] | None = None


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
    gate: GateId  # nop, oracle, or hack/<exploit> (also the run directory it logs to)
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
    # Its verifier starts with the build caches nop's verifier warmed (VerifyPlan.hand_off),
    # when there are any: the side trials, which run after nop.
    handed_caches: bool = False


class CacheHandOff(_Frozen):
    """The build caches the producer gate's verifier warmed (nop's: the post-setup tree and the
    held-out tests, no agent's code) go to the verifiers after it (TrialPlan.handed_caches), each
    a private copy unpacked into its container before the start: nothing a hack or probe run
    writes reaches another verifier. A cache an agent's or an exploit's run could write is never
    read by a later gate (content-addressed caches can be poisoned)."""

    producer: Gate = Gate.NOP
    directories: list[str]
    pack: ExecStep
    archive: str = HAND_OFF_ARCHIVE
    max_bytes: int = HAND_OFF_MAX_BYTES


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
    # Every exploit in turn in one root exec, the tree reset after each (HACK_DRIVER_SCRIPT).
    driver: ExecStep
    exploits: list[ExploitPlan]
    # Every collected patch through the verifier's patch policy at once, without tests: one
    # whose changes the policy undoes entirely leaves nop's tree, which nop showed fails.
    policy: ContainerPlan | None = None
    policy_check: ExecStep | None = None
    # --hack-gate full (a verifier for each exploit, proved or not: judge.runner_proof), and
    # the known runners the test command starts (model.runners.expected_runners).
    full: bool = False
    command_runners: list[str] = Field(default_factory=list)


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
    pass_to_pass: bool = False  # its runs take the pass-to-pass selection too


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
    # None: no selected toolchain has a build cache outside /app, or --no-hand-caches.
    hand_off: CacheHandOff | None = None
    hack_gate: bool = True
    # False: the first red gate settles the verdict and stops what is still running.
    keep_going: bool = False
    # Both verifiers run at once only when twice the task's cpus fit the engine: a suite slowed
    # by contention could otherwise time out, a false red.
    parallel_verifiers: bool
    tests_network: Literal["no-network", "public"]
    storage: StorageLimit
    keep: bool
    remove_images: bool
    max_log_bytes: int
    canaries: CanaryPlan = Field(default_factory=CanaryPlan)  # the census keeps the killed

    def build(self, kind: str) -> ImageBuild:
        return next(b for b in self.builds if b.kind == kind)

    def trial(self, gate: GateId | Gate) -> TrialPlan:
        return next(t for t in self.trials if t.gate == gate)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


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
