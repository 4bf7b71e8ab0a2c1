"""`evaluate`: an agent's whole run graded, predictions in, per-instance results and one
evaluation summary out (runner.batch.evaluate)."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import click

from runner.base.errors import UsageError, printable
from runner.cli.common import _build_environment, cli, interrupts, require_extra
from runner.cli.options import (
    BASE_IMAGE,
    BUILD_NETWORK,
    EVIDENCE_CHECKS,
    EXTRA_CA,
    MAX_LOG_SIZE,
    PIDS_LIMIT,
    STORAGE_LIMIT,
    TOOLCHAIN_MIRROR,
    TOOLCHAIN_SOURCE,
)
from runner.cli.output import print_problems
from runner.cli.worker import STORE, temporal_queue, temporal_tls
from runner.model.settings import EvidenceChecks, SharedSettings, StorageLimit


def _line(text: str) -> None:
    """A progress line: what a grade said may quote a hostile file name (escaped, one line)."""
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} {printable(text)}", file=sys.stderr, flush=True)


def _progress(quiet: bool) -> Any:
    from runner.batch.evaluation import EvaluateProgress

    if quiet:
        return EvaluateProgress()
    return EvaluateProgress(
        started=lambda i, engine: _line(f"grade {i.prediction.instance_id} on {engine}"),
        finished=lambda r, done, total: _line(
            f"[{done}/{total}] {r.instance_id}: {r.status} ({r.seconds:.1f} s) {r.detail[:160]}"
        ),
        note=_line,
    )


def _said(summary: Any, out: Path, *, as_json: bool, interrupted: bool) -> None:
    """The input's problems (FILE:LINE, field) and the totals on stderr; --json's summary."""
    from runner.base.errors import Problem

    if summary.input_problems:
        print_problems(
            [
                Problem(file=p.where, field=p.field, message=p.message)
                for p in summary.input_problems
            ]
        )
    if as_json:
        click.echo(summary.to_json(), nl=False)
    click.echo(
        f"evaluate: {summary.resolved} of {summary.instances} resolved "
        f"({summary.resolved_rate * 100:.1f}%; {summary.resolved_of_tasks * 100:.1f}% of "
        f"{summary.tasks} task(s)), {summary.unresolved} unresolved, "
        f"{summary.empty_patches} empty, {summary.not_applied} not applied, {summary.errors} "
        f"error(s), {summary.tampered} with tampering, {summary.not_graded} not graded, "
        f"{len(summary.input_problems)} input problem(s); {out / 'index.html'}",
        err=True,
    )
    if interrupted:
        click.echo(
            f"evaluate: interrupted; {summary.not_graded} prediction(s) not graded: run the same "
            "command again to grade them (what has a result is not graded again)",
            err=True,
        )


def _local(
    out: Path,
    jobs: int,
    engines: tuple[str, ...],
    retries: int,
    keys: tuple[str, ...],
    settings: SharedSettings,
    *,
    reward_only: bool,
) -> Any:
    """The options of an evaluation graded here: its engines, grade's options, the keys."""
    from runner.batch.evaluate import key_environment
    from runner.batch.evaluation import EvaluateOptions
    from runner.batch.model import EngineSpec
    from runner.supervise.job import grade_arguments

    specs = [EngineSpec.parse(e, default_capacity=jobs) for e in engines] or [
        EngineSpec.from_environment(jobs)
    ]
    return EvaluateOptions(
        out=out.resolve(),
        engines=specs,
        jobs=jobs,
        retries=retries,
        grade_options=grade_arguments(settings, reward_only=reward_only),
        env=key_environment(keys),
    )


def _fleet(
    temporal: dict[str, str],
    tls: Any,
    store: str | None,
    *,
    engines: bool,
    concurrency: int,
    max_attempts: int,
    evidence_checks: str,
    reward_only: bool,
) -> tuple[Any, tuple[str, ...]]:
    """`--temporal`: the fleet's grading settings, and what each result's key holds of them."""
    require_extra("fleet", "evaluate --temporal")
    from runner.artifacts.store import open_store
    from runner.cli.batch import _check_temporal_options
    from runner.model.settings import cache_root
    from runner.worker.evalfleet import FleetGrade, fleet_key_options

    if store is None:
        raise UsageError(
            "--temporal grades by reference: give the fleet's --store", field="--store"
        )
    _check_temporal_options(temporal["address"], tls, store, engines=engines, budget=None)
    fleet = FleetGrade(
        address=temporal["address"],
        namespace=temporal["namespace"],
        task_queue=temporal["task_queue"],
        store=open_store(store, cache=cache_root() / "store"),
        concurrency=concurrency,
        max_attempts=max_attempts,
        evidence_checks=evidence_checks,
        reward_only=reward_only,
        tls=tls,
    )
    return fleet, fleet_key_options(evidence_checks, reward_only)


@cli.command("evaluate")
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "--predictions",
    "predictions_path",
    required=True,
    type=click.Path(path_type=Path),
    help="The agent's patches: JSON lines of instance_id, model_name_or_path and model_patch "
    "(SWE-bench's predictions), or a directory of <taskId>.patch files.",
)
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="The evaluation's directory: results, summary, JUnit, HTML (an earlier run's is "
    "resumed: only what has no result is graded).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Predictions graded at once (across every engine).",
)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    metavar="URL|CONTEXT[=N]",
    help="A Docker engine, with how many grades it runs at once (repeatable), as `batch` "
    "takes them. Default: DOCKER_HOST or the current context.",
)
@click.option(
    "--retries",
    type=click.IntRange(0, 10),
    default=1,
    show_default=True,
    help="Retries of a grade that failed for infrastructure reasons (never of a reward).",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY|FILE",
    help="A key to trust for the bundles' seals beside this host's own and "
    "SELFBENCH_TRUSTED_KEYS' (ed25519:<hex>, or a file holding one).",
)
@BASE_IMAGE
@EXTRA_CA
@TOOLCHAIN_SOURCE
@TOOLCHAIN_MIRROR
@BUILD_NETWORK
@PIDS_LIMIT
@MAX_LOG_SIZE
@STORAGE_LIMIT
@EVIDENCE_CHECKS
@click.option(
    "--reward-only",
    is_flag=True,
    help="Each grade stops a test run at its first failed test (the evidence covers what ran).",
)
@click.option(
    "--temporal",
    "temporal_address",
    metavar="HOST:PORT",
    help="Grade on the fleet: a selfbench.pool of kind grade on this Temporal frontend, the "
    "bundles and patches by reference in --store; the workers polling --task-queue grade with "
    "their own build options (--evidence-checks and --reward-only travel with each "
    "prediction); --jobs is the pool's concurrency.",
)
@temporal_queue
@temporal_tls
@STORE
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def evaluate_command(
    source: Path,
    predictions_path: Path,
    out: Path,
    jobs: int,
    engines: tuple[str, ...],
    retries: int,
    keys: tuple[str, ...],
    base_image: str,
    extra_ca_certs: Path | None,
    sources: tuple[str, ...],
    mirrors: tuple[str, ...],
    build_network: str | None,
    pids_limit: int,
    max_log_size: int,
    storage_limit: str,
    evidence_checks: str,
    reward_only: bool,
    temporal_address: str | None,
    namespace: str,
    task_queue: str,
    tls: Any,
    store: str | None,
    as_json: bool,
    quiet: bool,
) -> int:
    """Grade an agent's predictions against sealed bundles: each by the path `grade` takes
    (a fresh verifier, the sealed census, per-test evidence, the patch policy, the canaries).
    SOURCE is an export archive, or a directory of bundles or run directories.

    \b
    Writes in --out: evaluation.json (the summary; `schema --evaluation`), results/<key>.json
    per instance, junit.xml, index.html. A task's images are built once per engine; the
    heaviest tasks go first. Run it again after an interruption: only what has no result is
    graded, and a changed prediction is graded again.

    \b
    Exit code: 0 every prediction graded, 1 some (the others are errors or bad input, named
    FILE:LINE), 2 none (the input), 3 none (the machine), 130 interrupted.

    \b
    Examples:
      selfbench-runner evaluate export.tar.gz --predictions preds.jsonl -o eval --jobs 2
      selfbench-runner evaluate bundles/ --predictions patches/ -o eval
    """
    from runner.batch.evaluate import evaluate
    from runner.compile import signing

    _build_environment(base_image, extra_ca_certs, sources, mirrors, build_network)
    signing.trusted_keys(keys)  # a key that cannot be read stops here (exit 2)
    settings = SharedSettings(
        base_image=base_image,
        extra_ca_certs=extra_ca_certs,
        sources=sources,
        mirrors=mirrors,
        build_network=build_network,
        pids_limit=pids_limit,
        max_log_size=max_log_size,
        storage_limit=StorageLimit(storage_limit),
        evidence_checks=EvidenceChecks(evidence_checks),
    )
    options = _local(out, jobs, engines, retries, keys, settings, reward_only=reward_only)
    if temporal_address is not None:
        fleet = _fleet(
            {"address": temporal_address, "namespace": namespace, "task_queue": task_queue},
            tls,
            store,
            engines=bool(engines),
            concurrency=jobs,
            max_attempts=retries + 1,
            evidence_checks=evidence_checks,
            reward_only=reward_only,
        )
        options = dataclasses.replace(options, engines=[], fleet=fleet[0], grade_options=fleet[1])
    elif store is not None or tls is not None:
        raise UsageError("--store and the --tls-* options go with --temporal", field="--temporal")
    with interrupts():
        outcome = evaluate(source, predictions_path, options, keys=keys, progress=_progress(quiet))
    _said(outcome.summary, options.out, as_json=as_json, interrupted=outcome.interrupted)
    return outcome.exit_code
