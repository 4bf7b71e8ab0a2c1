"""`evaluate`'s output: each graded prediction's result (results/<key>.json, keyed by the
bundle's and the patch's content, the model and grade's options: a run started again grades only
what has no result yet, and a changed prediction is graded again) and the evaluation summary.
The input is read by runner.model.evalinput."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner import __version__
from runner.base.errors import Problem
from runner.model.evidence import EvidenceSummary, PolicyChange

Status = Literal["resolved", "unresolved", "empty-patch", "not-applied", "error"]
STATUSES: tuple[Status, ...] = ("resolved", "unresolved", "empty-patch", "not-applied", "error")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="forbid"
    )


class InputProblem(_Model):
    where: str | None
    field: str | None
    message: str

    @classmethod
    def of(cls, problem: Problem) -> InputProblem:
        return cls(where=problem.file, field=problem.field, message=problem.message)


class InstanceResult(_Model):
    """One graded prediction: <out>/results/<key>.json."""

    schema_version: Literal[1] = 1
    instance_id: str
    task_id: str
    model: str
    key: str
    bundle_digest: str
    patch_sha256: str
    patch_bytes: int
    status: Status
    reward: Literal[0, 1] | None = None
    fail_to_pass: bool | None = None
    pass_to_pass: bool | None = None
    detail: str
    # Signals of tampering (apart from failing): what the patch policy undid, held-out
    # canaries that passed, evidence the verifier could not trust.
    tampering: list[str] = Field(default_factory=list)
    undone: list[PolicyChange] = Field(default_factory=list)
    discarded: list[str] = Field(default_factory=list)
    evidence: EvidenceSummary | None = None
    difficulty: str | None = None
    repository: str | None = None
    run_dir: str | None = None  # relative to the evaluation's directory
    logs: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    runner_version: str = __version__
    # The runner's signature (runner.compile.signing): a run that resumes takes a result only
    # when a key it trusts signed it, never one planted in the evaluation's directory.
    signature: dict[str, Any] | None = None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


class Tally(_Model):
    total: int = 0
    resolved: int = 0
    rate: float = 0.0


class SummaryRow(_Model):
    instance_id: str
    task_id: str
    model: str
    status: Status
    reward: Literal[0, 1] | None = None
    tampered: bool = False
    detail: str
    result: str  # results/<key>.json
    seconds: float = 0.0


class EvaluationSummary(_Model):
    """<out>/evaluation.json: what `selfbench-runner schema --evaluation` describes."""

    schema_version: Literal[1] = 1
    runner_version: str = __version__
    # This run's id: its grades' run ids (and their containers' run labels) start with
    # `eval-<evaluationId>-`.
    evaluation_id: str = ""
    source: str
    predictions: str
    models: list[str] = Field(default_factory=list)
    # grade's options every prediction was graded with (part of each result's key).
    grade_options: list[str] = Field(default_factory=list)
    tasks: int = 0  # the source's tasks that could be graded
    instances: int = 0  # predictions that name one of them (graded, or not yet)
    resolved: int = 0
    resolved_rate: float = 0.0  # of the instances
    # The benchmark's score: resolved over every task, for every model (a task a model left
    # out, or predicted on a line that was refused, counts as not resolved).
    resolved_of_tasks: float = 0.0
    unresolved: int = 0
    empty_patches: int = 0
    not_applied: int = 0
    errors: int = 0
    tampered: int = 0
    not_graded: int = 0  # predictions with no result yet (the run was stopped)
    graded_now: int = 0  # graded by this run (the rest were results of an earlier one)
    by_difficulty: dict[str, Tally] = Field(default_factory=dict)
    by_repository: dict[str, Tally] = Field(default_factory=dict)
    by_model: dict[str, Tally] = Field(default_factory=dict)
    input_problems: list[InputProblem] = Field(default_factory=list)
    rows: list[SummaryRow] = Field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def exit_code(self, *, interrupted: bool) -> int:
        """0: every prediction graded; 1: some (see the errors and the input's problems); 2:
        none, for the input's sake; 3: none, for the machine's (every grade an error); 130:
        interrupted (run it again to grade the rest)."""
        if interrupted:
            return 130
        graded = self.instances - self.not_graded - self.errors
        if graded == self.instances and not self.input_problems:
            return 0
        if graded > 0:
            return 1
        return 3 if self.errors else 2


def _tally(groups: dict[str, Tally], name: str, resolved: bool) -> None:
    tally = groups.setdefault(name, Tally())
    tally.total += 1
    tally.resolved += int(resolved)
    tally.rate = round(tally.resolved / tally.total, 4)


def summarize(
    summary: EvaluationSummary,
    results: list[InstanceResult],
    *,
    not_graded: int,
    models: Collection[str] = (),
) -> EvaluationSummary:
    """`summary` (its source, predictions, problems already set) counted from `results`, in
    instance order."""
    summary.instances = len(results) + not_graded
    summary.not_graded = not_graded
    summary.models = sorted({r.model for r in results if r.model})
    counts = {status: 0 for status in STATUSES}
    for result in sorted(results, key=lambda r: (r.instance_id, r.model)):
        counts[result.status] += 1
        resolved = result.status == "resolved"
        _tally(summary.by_difficulty, result.difficulty or "unknown", resolved)
        _tally(summary.by_repository, result.repository or "unknown", resolved)
        _tally(summary.by_model, result.model, resolved)
        summary.tampered += int(bool(result.tampering))
        summary.rows.append(
            SummaryRow(
                instance_id=result.instance_id,
                task_id=result.task_id,
                model=result.model,
                status=result.status,
                reward=result.reward,
                tampered=bool(result.tampering),
                detail=result.detail,
                result=f"results/{result.key}.json",
                seconds=result.seconds,
            )
        )
    summary.resolved = counts["resolved"]
    summary.unresolved = counts["unresolved"]
    summary.empty_patches = counts["empty-patch"]
    summary.not_applied = counts["not-applied"]
    summary.errors = counts["error"]
    summary.resolved_rate = (
        round(summary.resolved / summary.instances, 4) if summary.instances else 0.0
    )
    if summary.tasks:
        # Every model that predicted: one whose predictions all failed to grade is still one.
        count = max(1, len({r.model for r in results} | set(models)))
        summary.resolved_of_tasks = round(summary.resolved / (summary.tasks * count), 4)
    return summary
