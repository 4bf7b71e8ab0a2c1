"""`evaluate`: an agent's whole run graded, predictions in, per-instance results and one
evaluation summary out (runner.batch.evaluate)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from runner.base.errors import printable
from runner.cli.common import _build_environment, cli, interrupts
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


def grade_options(
    *,
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
) -> tuple[str, ...]:
    """grade's options for every child, as evaluate checked them."""
    args = ["--base-image", base_image]
    if extra_ca_certs is not None:
        args += ["--extra-ca-certs", str(extra_ca_certs.resolve())]
    for source in sources:
        args += ["--toolchain-source", source]
    for mirror in mirrors:
        args += ["--toolchain-mirror", mirror]
    if build_network:
        args += ["--build-network", build_network]
    args += ["--pids-limit", str(pids_limit), "--max-log-size", str(max_log_size)]
    args += ["--storage-limit", storage_limit, "--evidence-checks", evidence_checks]
    if reward_only:
        args.append("--reward-only")
    return tuple(args)


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
    from runner.batch.evaluate import evaluate, key_environment
    from runner.batch.evaluation import EvaluateOptions
    from runner.batch.model import EngineSpec
    from runner.compile import signing

    _build_environment(base_image, extra_ca_certs, sources, mirrors, build_network)
    signing.trusted_keys(keys)  # a key that cannot be read stops here (exit 2)
    specs = [EngineSpec.parse(e, default_capacity=jobs) for e in engines] or [
        EngineSpec.from_environment(jobs)
    ]
    options = EvaluateOptions(
        out=out.resolve(),
        engines=specs,
        jobs=jobs,
        retries=retries,
        grade_options=grade_options(
            base_image=base_image,
            extra_ca_certs=extra_ca_certs,
            sources=sources,
            mirrors=mirrors,
            build_network=build_network,
            pids_limit=pids_limit,
            max_log_size=max_log_size,
            storage_limit=storage_limit,
            evidence_checks=evidence_checks,
            reward_only=reward_only,
        ),
        env=key_environment(keys),
    )
    with interrupts():
        outcome = evaluate(source, predictions_path, options, keys=keys, progress=_progress(quiet))
    _said(outcome.summary, options.out, as_json=as_json, interrupted=outcome.interrupted)
    return outcome.exit_code
