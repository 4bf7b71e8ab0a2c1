"""`evaluate`'s results: an instance (a prediction with its task and its result's key), its
result made from its grade's report (or, for an empty patch, without one), written signed with
the runner's key, and read back on a later run only when that key signed it."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from runner.base.errors import InvalidTaskError, Problem
from runner.base.safeio import optional_regular, write_atomic
from runner.batch.evalsources import EvalTask
from runner.compile import signing
from runner.model.evalinput import Prediction, result_key
from runner.model.evaluation import InstanceResult
from runner.model.layout import RunLayout
from runner.model.stages import Gate
from runner.run.grading import GRADE_FILE, GradeReport

MAX_RESULT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Instance:
    prediction: Prediction
    task: EvalTask
    key: str


def instances(
    predictions: list[Prediction],
    tasks: dict[str, EvalTask],
    problems: list[Problem],
    options: tuple[str, ...] = (),
) -> list[Instance]:
    """Each prediction with its task and result key (`options`: grade's, part of the key); one
    that names no task is a problem."""
    found = []
    for prediction in predictions:
        task = tasks.get(prediction.instance_id)
        if task is None:
            problems.append(
                Problem(
                    file=prediction.where,
                    field="instance_id",
                    message=f"{prediction.instance_id} is no task of the source that can be "
                    "graded (none by that id, or its bundle was refused: see above)",
                )
            )
            continue
        found.append(
            Instance(
                prediction=prediction, task=task, key=result_key(task.digest, prediction, options)
            )
        )
    return found


def stored_result(results: Path, instance: Instance) -> InstanceResult | None:
    """The result an earlier run left for this instance's key, if it is whole, its own, signed
    by a key this host trusts (a result planted in the directory is graded again), and not an
    error (a grade that could not run, the network down say, is tried again)."""
    raw = _read(results / f"{instance.key}.json")
    with contextlib.suppress(ValueError, ValidationError, RecursionError):
        document = json.loads(raw) if raw is not None else None
        if not isinstance(document, dict):
            return None
        if signing.document_problem(document, _own_key()) is not None:
            return None
        result = InstanceResult.model_validate(document)
        own = result.key == instance.key
        if own and (result.instance_id, result.model) == instance.prediction.name:
            return None if result.status == "error" else result
    return None


def _read(path: Path) -> bytes | None:
    """A file of the evaluation's (a result, a grade's report) through no link, regular and at
    most MAX_RESULT_BYTES; None when it is not there or is not that."""
    try:
        return optional_regular(path, limit=MAX_RESULT_BYTES)
    except InvalidTaskError:
        return None


def _own_key() -> signing.Trusted:
    """The runner's own key alone: a result is this host's (or its fleet's signing key's)
    record, not something a key trusted for bundles may vouch for."""
    public = signing.signer().public
    return {signing.key_id(public): public}


def write_result(results: Path, result: InstanceResult) -> None:
    """results/<key>.json, signed with the runner's key."""
    document = json.loads(result.model_dump_json(exclude={"signature"}))
    signing.sign_document(document)
    write_atomic(results / f"{result.key}.json", json.dumps(document, indent=2) + "\n")


def empty_result(instance: Instance) -> InstanceResult:
    return result_of(
        instance,
        status="empty-patch",
        reward=0,
        detail="the patch is empty: nothing to grade (nop proved the tests fail on the base)",
    )


def result_of(instance: Instance, **values: object) -> InstanceResult:
    """An instance's result with `values` (its status, detail, ...)."""
    prediction, task = instance.prediction, instance.task
    return InstanceResult.model_validate(
        {
            "instance_id": prediction.instance_id,
            "task_id": task.task_id,
            "model": prediction.model,
            "key": instance.key,
            "bundle_digest": task.digest,
            "patch_sha256": prediction.patch_sha256,
            "patch_bytes": prediction.patch_bytes,
            "difficulty": task.difficulty,
            "repository": task.repository,
            **values,
        }
    )


def graded_result(
    instance: Instance, report: GradeReport, run_dir: str, evidence_files: list[str]
) -> InstanceResult:
    """The instance's result from its grade's report (`evidence_files`: what the verifier
    wrote beside its reward, the per-test evidence and the policy's record among them)."""
    reward = report.reward
    if report.verdict == "rewarded":
        status = "resolved"
    elif report.verdict == "not-rewarded":
        status = "not-applied" if reward is not None and reward.patch_applied != 1 else "unresolved"
    else:
        status = "error"
    tampering = []
    if report.discarded:
        shown = ", ".join(report.discarded[:5]) + (" ..." if len(report.discarded) > 5 else "")
        tampering.append(f"the patch policy undid {len(report.discarded)} change(s): {shown}")
    for run in report.evidence.runs if report.evidence else []:
        if run.canaries is not None and run.canaries.passed:
            tampering.append(f"{run.canaries.passed} canary test(s) passed in {run.name}")
    return result_of(
        instance,
        status=status,
        reward=None if reward is None else reward.reward,
        fail_to_pass=None if reward is None else reward.fail_to_pass == 1,
        pass_to_pass=None if reward is None else reward.pass_to_pass == 1,
        detail=report.detail,
        tampering=tampering,
        undone=report.undone,
        discarded=report.discarded,
        evidence=report.evidence,
        run_dir=run_dir,
        logs=list(dict.fromkeys(_relative(p, run_dir) for p in [*evidence_files, *report.logs])),
        seconds=report.seconds,
    )


def _relative(path: str, run_dir: str) -> str:
    """A log's path as the page links it: below the evaluation's directory when it is."""
    marker = f"/{run_dir}/"
    return run_dir + "/" + path.split(marker, 1)[1] if marker in path else path


def grade_files(run_dir: Path) -> list[str]:
    """What a grade's page links to: its report, its log, and what its verifier left (the
    reward, the per-test evidence, the policy's record)."""
    layout = RunLayout(run_dir)
    verifier = layout.verifier_logs(Gate.GRADE)
    found = [p for p in sorted(verifier.glob("*")) if p.is_file() and not p.is_symlink()]
    return [str(run_dir / GRADE_FILE), str(layout.runner_log), *map(str, found)]


def grade_report(run_dir: Path) -> GradeReport | None:
    raw = _read(run_dir / GRADE_FILE)
    with contextlib.suppress(ValueError, ValidationError, RecursionError):
        return GradeReport.model_validate(json.loads(raw)) if raw is not None else None
    return None
