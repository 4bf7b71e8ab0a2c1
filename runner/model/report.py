"""The structured report: one document per verify, versioned, with a JSON Schema that describes
every stage's data. Built once at the end of a run from the stages' results.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner.base.errors import ExitCode, Problem
from runner.base.safeio import write_atomic
from runner.model.canaries import DroppedCanary
from runner.model.evidence import EvidenceSummary, PolicyChange, SelectorResult
from runner.model.reward import Reward, VerifierDetails
from runner.model.stages import STAGE_NAMES

REPORT_SCHEMA_VERSION = 2


class CouplingItem(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, serialize_by_alias=True
    )

    kind: str  # private-name, internal-constant, error-message, string-literal, new-module,
    # gold-only-file, gold-only-name
    name: str
    test_file: str
    test_line: int
    gold_file: str
    gold_line: int


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # the task is at fault (red)
    ERROR = "error"  # infrastructure is at fault
    SKIPPED = "skipped"


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    INFRASTRUCTURE_FAILED = "infrastructure_failed"
    INVALID = "invalid"

    @property
    def exit_code(self) -> ExitCode:
        return {
            Verdict.ACCEPTED: ExitCode.ACCEPTED,
            Verdict.REJECTED: ExitCode.REJECTED,
            Verdict.INVALID: ExitCode.INVALID,
            Verdict.INFRASTRUCTURE_FAILED: ExitCode.INFRASTRUCTURE,
        }[self]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )


class InputProblem(_Model):
    file: str | None
    field: str | None
    message: str

    @classmethod
    def of(cls, problem: Problem) -> InputProblem:
        return cls(file=problem.file, field=problem.field, message=problem.message)


class TruncatedLog(_Model):
    path: str
    original_bytes: int
    kept_bytes: int


class LimitsData(_Model):
    """What the container limits did during a gate."""

    pids_limit_hits: int = -1  # -1: unknown
    oom_kills: int = -1
    pids_at_limit: bool = False  # every process slot taken when a deadline stopped the command
    storage_exceeded_mb: int | None = None
    storage_mechanism: str | None = None


# ---- stage data -------------------------------------------------------------------------------


class CompileData(_Model):
    bundle: str | None = None
    errors: list[InputProblem] = Field(default_factory=list)
    traceback_log: str | None = None


class AuditMetrics(_Model):
    implementation_files: int
    implementation_changed_lines: int
    test_files: int


class AuditData(_Model):
    blockers: list[str] = Field(default_factory=list)
    metrics: AuditMetrics | None = None
    repository_checked: bool = False
    # What the held-out tests reach for that only the gold patch brings (evidence for the
    # verification round, never a blocker).
    coupling: list[CouplingItem] = Field(default_factory=list)
    # Why a blocker holds where the seed's fixed words cannot say.
    hints: list[str] = Field(default_factory=list)


class ImageData(_Model):
    tag: str
    id: str | None = None
    cached: bool = False
    seconds: float = 0.0
    cached_steps: int = 0
    total_steps: int = 0


class BuildData(_Model):
    base_image: str | None = None
    base_image_id: str | None = None
    # The registry digests the engine knows for the base image: empty for an image that was
    # made locally (a stand-in under a well-known tag is visible here).
    base_image_digests: list[str] = Field(default_factory=list)
    from_image: str | None = None
    images: dict[str, ImageData] = Field(default_factory=dict)
    failed_image: str | None = None
    failed_step: str | None = None
    step_number: int | None = None
    exit_code: int | None = None
    timed_out: bool = False
    tail: list[str] = Field(default_factory=list)
    last_good_layer: str | None = None
    debug_command: str | None = None


class SmokeData(_Model):
    exit_code: int | None = None
    timed_out: bool = False
    answers: list[str] = Field(default_factory=list)
    output: list[str] = Field(default_factory=list)
    limits: LimitsData | None = None


class GateData(_Model):
    solve_exit_code: int | None = None
    collect_exit_code: int | None = None
    agent_patch_bytes: int | None = None
    verifier_exit_code: int | None = None
    timed_out: Literal["solve", "collect", "verifier"] | None = None
    reward: Reward | None = None
    details: VerifierDetails | None = None
    limits: LimitsData | None = None
    # Agent (or gold) changes the verifier's patch policy undid before the tests ran (paths),
    # and why each (the policy: only source and data changes stay).
    discarded: list[str] = Field(default_factory=list)
    undone: list[PolicyChange] = Field(default_factory=list)
    # The per-test evidence of the verifier's runs: per selector what ran, passed, failed and was
    # skipped; "exit-code evidence only" for a runner the verifier does not know.
    evidence: EvidenceSummary | None = None
    # Each fail-to-pass selector run alone (when several failed together): its exit code.
    selectors: list[SelectorResult] = Field(default_factory=list)
    # Each pass-to-pass selector run alone (when several failed together).
    pass_to_pass_selectors: list[SelectorResult] = Field(default_factory=list)
    # A red gate retried with the internet on (the tests run without it by default): whether it
    # then passed, i.e. the tests need the network. None: not retried.
    passes_online: bool | None = None
    # The oracle's verifier ran on the patch its agent side made last time, beside this run's
    # agent side: "confirmed" (the collected patch was byte-for-byte that one, so that run is
    # this gate's), "mismatched" (it was not: the collected patch was verified afresh), None (no
    # prediction).
    predicted_patch: Literal["confirmed", "mismatched"] | None = None
    # nop: the build caches its verifier warmed, handed to the verifiers after it (the tar's
    # size in bytes). None: nothing handed (no cache directory, --no-hand-caches, or a red nop).
    handed_cache_bytes: int | None = None


class ProbeResult(_Model):
    """One run of the flakiness probe: the oracle's patch, verified under `perturbation`."""

    name: str
    perturbation: str  # in words, each dimension
    dimension: str | None = None  # an attribution run: this dimension alone
    passed: bool
    what_failed: str = ""  # fail-to-pass, its repeat, pass-to-pass, or how the run ended
    failing_selectors: list[str] = Field(default_factory=list)
    reward: Reward | None = None
    logs: str | None = None  # its run directory


class SelectorRate(_Model):
    selector: str
    passed: int
    runs: int


class DeterminismData(_Model):
    deterministic: int | None = None
    repeat_exit_code: int | None = None
    # The flakiness probe (--repeat N): each run, each fail-to-pass selector's pass rate over the
    # perturbed runs, and the perturbations that changed an outcome (found by retrying a failed
    # run with each of its dimensions alone).
    probe: list[ProbeResult] = Field(default_factory=list)
    selectors: list[SelectorRate] = Field(default_factory=list)
    perturbations: list[str] = Field(default_factory=list)


ExploitOutcome = Literal[
    "resisted", "proved", "earned-reward", "no-effect", "not-applicable", "error"
]


class ExploitResult(_Model):
    """One canned hostile agent patch and what the verifier gave it."""

    name: str
    family: str
    summary: str
    # resisted: reward 0; earned-reward: reward 1 (the verifier can be gamed); no-effect: the
    # collected patch was empty; not-applicable: nothing to attack, or its patch did not apply;
    # error: the exploit or its verifier did not run to the end; proved: its patch leaves
    # changes the policy keeps, and the task's runners are ones whose per-test evidence the
    # project's hack corpus proves (not run: `provedFor`, by the report's `runnerVersion`).
    outcome: ExploitOutcome
    detail: str = ""
    reward: Reward | None = None
    discarded: list[str] = Field(default_factory=list)  # what test.sh undid
    undone: list[PolicyChange] = Field(default_factory=list)
    evidence: EvidenceSummary | None = None
    patch: str | None = None  # the collected patch, in the run directory
    patch_bytes: int | None = None
    # task: decided on this task (by the policy, or a verifier's run); runner: proved for the
    # task's runners by this runner version (--hack-gate full runs it instead).
    scope: Literal["task", "runner"] = "task"
    proved_for: list[str] = Field(default_factory=list)


class HackData(_Model):
    exploits: list[ExploitResult] = Field(default_factory=list)


class _Stage(_Model):
    status: Status = Status.SKIPPED
    seconds: float = 0.0
    detail: str = "not run"
    logs: list[str] = Field(default_factory=list)
    truncated_logs: list[TruncatedLog] = Field(default_factory=list)


class CompileStage(_Stage):
    data: CompileData = Field(default_factory=CompileData)


class AuditStage(_Stage):
    data: AuditData = Field(default_factory=AuditData)


class BuildStage(_Stage):
    data: BuildData = Field(default_factory=BuildData)


class SmokeStage(_Stage):
    data: SmokeData = Field(default_factory=SmokeData)


class GateStage(_Stage):
    data: GateData = Field(default_factory=GateData)


class DeterminismStage(_Stage):
    data: DeterminismData = Field(default_factory=DeterminismData)


class HackStage(_Stage):
    data: HackData = Field(default_factory=HackData)


AnyStage = (
    CompileStage | AuditStage | BuildStage | SmokeStage | GateStage | DeterminismStage | HackStage
)


class Stages(_Model):
    compile: CompileStage = Field(default_factory=CompileStage)
    audit: AuditStage = Field(default_factory=AuditStage)
    build: BuildStage = Field(default_factory=BuildStage)
    smoke: SmokeStage = Field(default_factory=SmokeStage)
    nop: GateStage = Field(default_factory=GateStage)
    oracle: GateStage = Field(default_factory=GateStage)
    determinism: DeterminismStage = Field(default_factory=DeterminismStage)
    hack: HackStage = Field(default_factory=HackStage)

    def get(self, name: str) -> AnyStage:
        stage = getattr(self, name)
        assert isinstance(stage, _Stage)
        return stage  # type: ignore[return-value]

    def items(self) -> list[tuple[str, AnyStage]]:
        return [(name, self.get(name)) for name in STAGE_NAMES]


class KeptContainer(_Model):
    label: str
    name: str
    enter: str


class ReportSettings(_Model):
    base_image: str | None = None
    extra_ca_certs: str | None = None
    toolchain_sources: dict[str, str] = Field(default_factory=dict)
    toolchain_mirrors: dict[str, str] = Field(default_factory=dict)
    build_network: str | None = None
    pids_limit: int | None = None
    max_log_bytes: int | None = None
    storage_limit: str | None = None  # what held storage_mb, said in words
    tests_network: str | None = None  # no-network (the default) or public, as the task declares
    keep: bool = False
    # --keep-going: every gate ran to its end (else a red gate stopped the others).
    keep_going: bool = False
    # --hand-caches (the default): the build caches nop's verifier warmed went to the verifiers
    # after it, each a private copy.
    hand_caches: bool = True


class ReportCanaries(_Model):
    """The task's canaries (tests the reference solution must fail): how many the compiler
    made, how many the oracle killed and the census keeps, each one dropped and why, the chance
    a blind guess gets past those kept, and, when none is kept, why (`none`)."""

    made: int = 0
    kept: int = 0
    exit_code: int = 0  # of `kept`, the exit-code canaries (one more test run each)
    guess: float = 1.0
    dropped: list[DroppedCanary] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)


class ReportCensus(_Model):
    """The census sealed into the run's bundle: the tests its nop and oracle saw, by which every
    later verifier (Harbor's too) grades an agent. `exit-code` for a runner the verifier does
    not know (exit-code evidence only)."""

    file: str
    fail_to_pass: str
    pass_to_pass: str
    fail_to_pass_tests: int
    pass_to_pass_tests: int
    canaries: ReportCanaries | None = None


class Report(_Model):
    schema_version: Literal[2] = 2
    task_id: str | None
    verdict: Verdict
    reason: str = ""
    interrupted: bool = False
    errors: list[InputProblem] = Field(default_factory=list)
    stages: Stages = Field(default_factory=Stages)
    seconds: float = 0.0
    runner_version: str
    run_id: str
    started_at: str
    run_dir: str | None = None
    bundle: str | None = None
    settings: ReportSettings = Field(default_factory=ReportSettings)
    kept: list[KeptContainer] = Field(default_factory=list)
    census: ReportCensus | None = None

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.INTERRUPTED if self.interrupted else self.verdict.exit_code

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def report_schema() -> dict[str, Any]:
    return Report.model_json_schema(by_alias=True)


def write_report(path: Path, report: Report) -> None:
    write_atomic(path, report.to_json())


def load_report(path: Path) -> Report:
    return Report.model_validate(json.loads(path.read_text()))
