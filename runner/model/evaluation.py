"""`evaluate`: an agent's predictions (one patch per task), each graded, and the evaluation
summary. The predictions come as SWE-bench writes them (JSON lines of `instance_id`,
`model_name_or_path`, `model_patch`) or as a directory of `<taskId>.patch` files; each result
is keyed by the content of the bundle and of the patch, so a run started again grades only what
has no result yet, and a changed prediction is graded again.

Bad input is named by FILE:LINE and field, one problem per line of input; what is good is still
graded."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner import __version__
from runner.base.errors import InvalidTaskError, Problem, UsageError
from runner.base.safeio import os_error_text, read_regular, size_words, write_atomic
from runner.model.evidence import EvidenceSummary, PolicyChange
from runner.model.settings import MAX_AGENT_PATCH_BYTES

# A predictions file holds at most this many lines (a patch each, at most the agent patch
# limit): what a benchmark of thousands of tasks writes, not a stream without an end.
MAX_PREDICTIONS = 100_000
# A line holds a patch as JSON text: escaped, it may take twice its bytes.
MAX_LINE_BYTES = 2 * MAX_AGENT_PATCH_BYTES + 64 * 1024
PATCH_SUFFIX = ".patch"
_INSTANCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

Status = Literal["resolved", "unresolved", "empty-patch", "not-applied", "error"]
STATUSES: tuple[Status, ...] = ("resolved", "unresolved", "empty-patch", "not-applied", "error")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="forbid"
    )


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """One instance to grade: the task it names, the model that wrote it, its patch (kept by
    content under the evaluation's patches/, never read again from the input), and where it
    was read (FILE:LINE, or the patch file)."""

    instance_id: str
    model: str
    patch_sha256: str
    patch_bytes: int
    patch: Path
    where: str
    empty: bool = False  # nothing but whitespace: not run (SWE-bench counts it apart too)

    @property
    def name(self) -> tuple[str, str]:
        """What names a prediction: its task and its model (several models, or several samples
        of one, may predict the same task in one file)."""
        return (self.instance_id, self.model)


def result_key(bundle_digest: str, prediction: Prediction) -> str:
    """The result's name: what was graded (the bundle's sealed content), with what patch, for
    which model."""
    parts = f"{bundle_digest}\0{prediction.patch_sha256}\0{prediction.model}"
    return hashlib.sha256(parts.encode()).hexdigest()


def keep_patch(patches: Path, data: bytes) -> tuple[str, Path]:
    """`data` at patches/<sha256>.patch (once: the name is the content)."""
    digest = hashlib.sha256(data).hexdigest()
    path = patches / f"{digest}{PATCH_SUFFIX}"
    if not path.is_file() or path.stat().st_size != len(data):
        write_atomic(path, data, durable=False)
    return digest, path


def _problem(where: str, field: str | None, message: str) -> Problem:
    return Problem(file=where, field=field, message=message)


def _prediction(document: object, where: str, patches: Path) -> Prediction | Problem:
    if not isinstance(document, dict):
        return _problem(where, None, "is not a JSON object")
    instance = document.get("instance_id")
    if not isinstance(instance, str) or not _INSTANCE_ID.fullmatch(instance):
        return _problem(where, "instance_id", "must be a task id ([A-Za-z0-9._-], at most 128)")
    model = document.get("model_name_or_path") or ""
    if not isinstance(model, str) or len(model) > 256:
        return _problem(where, "model_name_or_path", "must be text of at most 256 characters")
    patch = document.get("model_patch")
    if patch is None:
        patch = ""
    if not isinstance(patch, str):
        return _problem(where, "model_patch", "must be a string (the unified diff) or null")
    data = patch.encode("utf-8", errors="surrogateescape")
    if len(data) > MAX_AGENT_PATCH_BYTES:
        return _problem(where, "model_patch", f"is larger than {size_words(MAX_AGENT_PATCH_BYTES)}")
    digest, path = keep_patch(patches, data)
    return Prediction(
        instance_id=instance,
        model=model,
        patch_sha256=digest,
        patch_bytes=len(data),
        patch=path,
        where=where,
        empty=not data.strip(),
    )


def _lines(handle: IO[bytes]) -> Iterator[bytes | None]:
    """The file's lines, each read at most MAX_LINE_BYTES at a time: None for a longer one
    (skipped to its end, never held whole)."""
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = handle.readline(MAX_LINE_BYTES + 1)
            yield None
        else:
            yield raw


def read_jsonl(path: Path, patches: Path) -> tuple[list[Prediction], list[Problem]]:
    """Every prediction of a JSON-lines file, and a problem for each line that is not one (a
    duplicate instance id names the line that gave it first)."""
    predictions: list[Prediction] = []
    problems: list[Problem] = []
    first: dict[tuple[str, str], str] = {}
    with _open_regular(path) as handle:
        for number, raw in enumerate(_lines(handle), start=1):
            where = f"{path}:{number}"
            if number > MAX_PREDICTIONS:
                problems.append(_problem(where, None, f"more than {MAX_PREDICTIONS} lines"))
                break
            if raw is None:
                problems.append(_problem(where, None, f"is longer than {MAX_LINE_BYTES} bytes"))
                continue
            if not raw.strip():
                continue
            try:
                document = json.loads(raw)
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                reason = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc)[:120]
                problems.append(_problem(where, None, f"is not JSON ({reason})"))
                continue
            item = _prediction(document, where, patches)
            if isinstance(item, Problem):
                problems.append(item)
            elif item.name in first:
                problems.append(
                    _problem(
                        where,
                        "instance_id",
                        f"is predicted twice by this model (first at {first[item.name]})",
                    )
                )
            else:
                first[item.name] = where
                predictions.append(item)
    return predictions, problems


def read_patch_directory(path: Path, patches: Path) -> tuple[list[Prediction], list[Problem]]:
    """Every `<taskId>.patch` of a directory (the model is the directory's name); hidden
    files are passed over, anything else is a problem."""
    predictions: list[Prediction] = []
    problems: list[Problem] = []
    model = path.resolve().name
    with os.scandir(path) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries[:MAX_PREDICTIONS]:
        if entry.name.startswith("."):
            continue
        where = str(Path(path, entry.name))
        instance = entry.name.removesuffix(PATCH_SUFFIX)
        if not entry.name.endswith(PATCH_SUFFIX) or not _INSTANCE_ID.fullmatch(instance):
            problems.append(_problem(where, None, "is not a <taskId>.patch file"))
            continue
        try:
            data = read_regular(Path(entry.path), limit=MAX_AGENT_PATCH_BYTES)
        except InvalidTaskError as exc:
            problems.append(_problem(where, None, exc.message))
            continue
        digest, kept = keep_patch(patches, data)
        predictions.append(
            Prediction(
                instance_id=instance,
                model=model,
                patch_sha256=digest,
                patch_bytes=len(data),
                patch=kept,
                where=where,
                empty=not data.strip(),
            )
        )
    return predictions, problems


def read_predictions(path: Path, patches: Path) -> tuple[list[Prediction], list[Problem]]:
    """A JSON-lines file or a directory of patches. Raises UsageError when `path` is neither."""
    patches.mkdir(parents=True, exist_ok=True)
    try:
        if path.is_dir():
            return read_patch_directory(path, patches)
        return read_jsonl(path, patches)
    except OSError as exc:
        raise UsageError(os_error_text(exc), path=str(path), field="--predictions") from None


def _open_regular(path: Path) -> IO[bytes]:
    """`path` opened for reading only if it is a regular file (never a FIFO that blocks, a
    device, or a final link)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
    instances: int = 0
    resolved: int = 0
    resolved_rate: float = 0.0
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
    summary: EvaluationSummary, results: list[InstanceResult], *, not_graded: int
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
        _tally(summary.by_model, result.model or "unknown", resolved)
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
    return summary
