"""`evaluate` from end to end: the predictions read, the bundles taken, what has a result
already set apart, the rest graded (runner.batch.evaluation), and the outputs written in the
evaluation's directory:

    <out>/evaluation.json         the summary (schema: `selfbench-runner schema --evaluation`)
    <out>/evaluation.schema.json  that schema
    <out>/junit.xml               a testcase per instance and per problem of the input
    <out>/index.html              the summary, then every instance (sortable, linked)
    <out>/results/<key>.json      one per graded prediction (kept across runs: the resume)
    <out>/runs/<instance>-<key>/  each grade's run directory (logs, evidence)
    <out>/bundles/<taskId>/       each task's bundle, a checked copy of its seal
    <out>/patches/<sha256>.patch  each prediction's patch as read

The summary, JUnit and page are written also when the run is interrupted (what has no result
is counted as not graded), so a stopped run still says where it got."""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import Interrupted, Problem, UsageError
from runner.base.safeio import private_dir, write_atomic
from runner.batch.evalresults import (
    Instance,
    empty_result,
    instances,
    stored_result,
    write_result,
)
from runner.batch.evalsources import gather
from runner.batch.evaluation import EvaluateOptions, EvaluateProgress, Evaluation
from runner.model.evalinput import read_predictions
from runner.model.evaluation import (
    EvaluationSummary,
    InputProblem,
    InstanceResult,
    summarize,
)
from runner.model.settings import ENV_TRUSTED_KEYS, trusted_key_entries
from runner.present.evaluation import evaluation_html, junit_xml

SUMMARY_FILE = "evaluation.json"
# What evaluate writes below its directory, each checked to be its own (no link planted).
SUBDIRECTORIES = ("results", "runs", "patches", "bundles")
SCHEMA_FILE = "evaluation.schema.json"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    summary: EvaluationSummary
    interrupted: bool

    @property
    def exit_code(self) -> int:
        return self.summary.exit_code(interrupted=self.interrupted)


def key_environment(keys: tuple[str, ...]) -> dict[str, str]:
    """SELFBENCH_TRUSTED_KEYS for every grade: this host's, and the keys given (a key file by
    its absolute path), so a grade trusts the seal evaluate trusted."""
    entries = trusted_key_entries() + [
        key if key.startswith("ed25519:") else str(Path(key).resolve()) for key in keys
    ]
    return {ENV_TRUSTED_KEYS: os.pathsep.join(entries)} if entries else {}


def evaluate(
    source: Path,
    predictions_path: Path,
    options: EvaluateOptions,
    *,
    keys: tuple[str, ...] = (),
    progress: EvaluateProgress | None = None,
) -> Outcome:
    """Grade what has no result yet; write the summary and its views. UsageError when the
    source or the predictions cannot be read at all."""
    started = time.monotonic()
    out = options.out
    for given, field in ((predictions_path, "--predictions"), (source, "SOURCE")):
        if not given.exists():
            raise UsageError("does not exist", path=str(given), field=field)
    _own_directory(out)
    for directory in (out, *(out / name for name in SUBDIRECTORIES)):
        private_dir(directory)
        _own_directory(directory)
    predictions, problems = read_predictions(predictions_path, out / "patches")
    sources = gather(source, out, keys)
    tasks = sources.tasks
    found = instances(predictions, tasks, problems, options.grade_options)
    # The bundles' problems first (a prediction of a refused one says "see above"), then the
    # predictions' in the order of their lines.
    problems = sources.problems + sorted(problems, key=_line_order)
    results: dict[tuple[str, str], InstanceResult] = {}
    todo: list[Instance] = []
    now = 0
    for instance in found:
        stored = stored_result(out / "results", instance)
        if stored is not None:
            results[stored.instance_id, stored.model] = stored
        elif instance.prediction.empty:
            result = empty_result(instance)
            write_result(out / "results", result)
            results[result.instance_id, result.model] = result
            now += 1
        else:
            todo.append(instance)
    progress = progress or EvaluateProgress()
    evaluation = Evaluation(options, progress)
    interrupted = False
    try:
        if options.fleet is None:
            graded_before = {r.task_id for r in results.values() if r.status != "empty-patch"}
            evaluation.run(todo, built=frozenset(graded_before))
        else:
            options.fleet.grade(
                todo,
                out / "results",
                f"evaluate-{evaluation.evaluation_id}",
                note=progress.note,
                finished=progress.finished,
                results=evaluation.results,
            )
    except (KeyboardInterrupt, Interrupted):
        interrupted = True
    for result in evaluation.results:
        results[result.instance_id, result.model] = result
    summary = EvaluationSummary(
        evaluation_id=evaluation.evaluation_id,
        source=str(source),
        predictions=str(predictions_path),
        input_problems=[InputProblem.of(p) for p in problems],
    )
    summary.tasks = len(tasks) + sources.refused
    models = {prediction.model for prediction in predictions}
    summary.grade_options = list(options.grade_options)
    summarize(summary, list(results.values()), not_graded=len(found) - len(results), models=models)
    summary.graded_now = now + len(evaluation.results)
    summary.seconds = round(time.monotonic() - started, 3)
    write_outputs(out, summary, results)
    return Outcome(summary=summary, interrupted=interrupted)


def _own_directory(out: Path) -> None:
    """An evaluation's directory (and each below it) is this user's alone: one that another
    user owns, or may write to, or a link to elsewhere, could hold results, bundles or patches
    that this run did not write, or take what it writes elsewhere."""
    try:
        info = out.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"cannot be used: {exc.strerror}", path=str(out), field="--out") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UsageError("is not a directory (a link is refused)", path=str(out), field="--out")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise UsageError(
            f"is not this user's own directory (owner uid {info.st_uid}, mode "
            f"{stat.S_IMODE(info.st_mode):o}): what it holds could be anyone's",
            path=str(out),
            field="--out",
        )


def _line_order(problem: Problem) -> tuple[str, int]:
    where, _, line = (problem.file or "").rpartition(":")
    return (where, int(line)) if line.isdigit() else (problem.file or "", 0)


def write_outputs(
    out: Path, summary: EvaluationSummary, results: dict[tuple[str, str], InstanceResult]
) -> None:
    write_atomic(out / SUMMARY_FILE, summary.to_json())
    schema = EvaluationSummary.model_json_schema(by_alias=True)
    write_atomic(out / SCHEMA_FILE, json.dumps(schema, indent=2) + "\n")
    write_atomic(out / "junit.xml", junit_xml(summary))
    write_atomic(out / "index.html", evaluation_html(summary, results))
