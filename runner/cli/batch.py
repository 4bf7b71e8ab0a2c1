"""`batch`: many tasks through `verify`, with a live view, one summary (batch.json, .md, .html,
JUnit) and GitHub Actions' annotations and outputs."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click

from runner.base.errors import UsageError
from runner.base.safeio import private_dir
from runner.cli.batchview import BatchView
from runner.cli.common import _forwarded, cli, interrupts, require_extra
from runner.cli.options import CHILD_VERIFY_OPTIONS, ByteSize, logs_root_option
from runner.cli.output import in_github_actions
from runner.cli.worker import STORE, temporal_queue, temporal_tls
from runner.model.settings import SharedSettings, environment_value

MAX_ANNOTATIONS = 10  # GitHub shows at most 10 error annotations per step


def _targets(args: tuple[Path, ...], from_file: Path | None) -> list[Path]:
    targets = list(args)
    if from_file is not None:
        try:
            text = from_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read: {exc}", path=str(from_file), field="--from") from None
        stripped = text.strip()
        if stripped.startswith("["):
            try:
                items = json.loads(stripped)
            except ValueError as exc:
                raise UsageError(
                    f"not a JSON list: {exc}", path=str(from_file), field="--from"
                ) from None
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise UsageError(
                    "must be a JSON list of paths", path=str(from_file), field="--from"
                )
            lines = items
        else:
            lines = [ln.strip() for ln in text.splitlines()]
        base = from_file.parent
        for line in lines:
            if line and not line.startswith("#"):
                path = Path(line)
                targets.append(path if path.is_absolute() else base / path)
    if not targets:
        raise UsageError("name at least one task (TASK_DIR... or --from FILE)", field="TASK_DIR")
    for target in targets:
        if not target.is_dir():
            raise UsageError(
                "is not a task directory or bundle", path=str(target), field="TASK_DIR"
            )
    return targets


def _github_outputs(result: Any, batch_json: Path, summary: str) -> None:
    """A step summary (at most 1 MiB), at most 10 error annotations, and the step's outputs."""
    red = [t for t in result.tasks if t.verdict != "accepted"]
    for task in red[:MAX_ANNOTATIONS]:
        message = (task.reason or task.verdict).replace("%", "%25").replace("\r", "")
        message = message.replace("\n", "%0A")
        title = f"selfbench {task.task_id or task.target} {task.verdict}".replace("::", ": ")
        print(f"::error title={title}::{message}", file=sys.stderr)
    if len(red) > MAX_ANNOTATIONS:
        print(
            f"::error title=selfbench batch::{len(red) - MAX_ANNOTATIONS} more red task(s); "
            f"see {batch_json}",
            file=sys.stderr,
        )
    path = environment_value("GITHUB_STEP_SUMMARY")
    if path:
        with Path(path).open("a", encoding="utf-8") as handle:
            handle.write(summary)
    output = environment_value("GITHUB_OUTPUT")
    if output:
        totals = result.totals()
        with Path(output).open("a", encoding="utf-8") as handle:
            for verdict, count in totals.items():
                handle.write(f"{verdict.replace('_', '-')}={count}\n")
            handle.write(f"exit-code={int(result.exit_code)}\n")
            handle.write(f"batch-json={batch_json}\n")


@cli.command("batch")
@click.argument("task_dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--from",
    "from_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A file listing tasks: one path per line, or a JSON list (relative to the file).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Tasks verified at once (across every engine).",
)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    metavar="URL|CONTEXT[=N]",
    help="A Docker engine for the batch, with how many tasks it takes at once (repeatable): "
    "unix://, tcp:// (TLS from DOCKER_TLS_VERIFY/DOCKER_CERT_PATH), ssh://, or a context name. "
    "Default: DOCKER_HOST or the current context.",
)
@click.option(
    "--retries",
    type=click.IntRange(0, 10),
    default=1,
    show_default=True,
    help="Retries of a task whose verification failed for infrastructure reasons "
    "(never of a red verdict).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    help="The batch directory (default: <logs>/batch-<time>).",
)
@logs_root_option("Where the default --out goes.")
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write JUnit XML here (a testcase per task and per gate).",
)
@click.option(
    "--cache-budget",
    type=ByteSize(),
    default=None,
    help="Keep the runner's task images under this size on each engine, removing the "
    "least recently used between tasks (e.g. 20GB).",
)
@click.option(
    "--temporal",
    "temporal_address",
    metavar="HOST:PORT",
    help="Run the batch as a selfbench.batch workflow on this Temporal frontend: the workers "
    "polling --task-queue verify it (with their own verify options); --jobs is the workflow's "
    "concurrency and --retries its retries of an infrastructure failure.",
)
@temporal_queue
@temporal_tls
@STORE
@CHILD_VERIFY_OPTIONS
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
def batch_command(
    task_dirs: tuple[Path, ...],
    from_file: Path | None,
    jobs: int,
    engines: tuple[str, ...],
    retries: int,
    out: Path | None,
    logs_root: Path,
    junit_path: Path | None,
    cache_budget: int | None,
    temporal_address: str | None,
    namespace: str,
    task_queue: str,
    tls: Any,
    store: str | None,
    child: SharedSettings,
    quiet: bool,
) -> int:
    """Verify many tasks: bounded concurrency, several engines, one summary. Writes batch.json,
    batch.md and batch.html in the batch directory (and --junit). Exit code: 0 all accepted, 1
    any rejected or invalid, 3 infrastructure failures and none rejected, 2 usage.

    \b
    Examples:
      selfbench-runner batch tasks/ --jobs 2 --out batch-out
      selfbench-runner batch tasks/ --temporal 127.0.0.1:7233 --out batch-out
      selfbench-runner batch --from pool.json --temporal 127.0.0.1:7233 --jobs 16 \\
        --store s3://selfbench-artifacts/fleet --out pool-out
    """
    from runner.base.safeio import check_writable_file
    from runner.batch.model import EngineSpec
    from runner.batch.run import Batch, BatchOptions, Progress

    targets = _targets(task_dirs, from_file)
    _check_temporal_options(
        temporal_address, tls, store, engines=bool(engines), budget=cache_budget
    )
    specs = [EngineSpec.parse(e, default_capacity=jobs) for e in engines] or [
        EngineSpec.from_environment(jobs)
    ]
    if junit_path is not None:
        check_writable_file(junit_path, option="--junit")
    forwarded, _ = _forwarded(child)
    out = _batch_directory(out, logs_root)
    view = BatchView(len(targets), quiet=quiet)
    if temporal_address is not None:
        temporal = {"address": temporal_address, "namespace": namespace, "task_queue": task_queue}
        return _temporal_batch(
            temporal,
            jobs,
            retries,
            tls,
            store,
            targets=targets,
            out=out,
            junit=junit_path,
            view=view,
        )
    batch = Batch(
        BatchOptions(
            targets=targets,
            out=out.resolve(),
            engines=specs,
            jobs=jobs,
            retries=retries,
            verify_settings=forwarded,
            cache_budget=cache_budget,
        ),
        Progress(started=view.started, stage=view.stage, finished=view.finished, note=view.note),
    )
    started = time.monotonic()
    try:
        with interrupts():
            result = batch.run()
    finally:
        view.close()
    result.seconds = time.monotonic() - started
    batch_json = _write_results(result, out, junit_path)
    click.echo(f"batch: {_totals_line(result)}; {batch_json}", err=True)
    return int(result.exit_code)


def _check_temporal_options(
    address: str | None, tls: Any, store: str | None, *, engines: bool, budget: int | None
) -> None:
    if address is not None and (engines or budget is not None):
        raise UsageError(
            "--engine and --cache-budget are the workers' business under --temporal",
            field="--temporal",
        )
    if address is None and tls is not None:
        raise UsageError("the --tls-* options go with --temporal", field="--temporal")
    if store is not None:
        from runner.artifacts.address import parse_store

        if address is None:
            raise UsageError("--store goes with --temporal (a fleet's store)", field="--store")
        parse_store(store)
    if address is not None:
        from runner.cli.serve import _listen_address

        _listen_address(address)


def _batch_directory(out: Path | None, logs_root: Path) -> Path:
    """--out, or a new directory under the logs root named by the time; empty, and private."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out or logs_root / f"batch-{stamp}"
    if out.exists() and any(out.iterdir()):
        raise UsageError(
            "is not empty: a batch directory holds one batch", path=str(out), field="--out"
        )
    private_dir(out)
    return out


def _temporal_batch(
    temporal: dict[str, str],
    jobs: int,
    retries: int,
    tls: Any,
    store: str | None,
    *,
    targets: list[Path],
    out: Path,
    junit: Path | None,
    view: BatchView,
) -> int:
    """`batch --temporal`: a selfbench.batch workflow (`temporal`: where), a batch's files;
    with `store`, a selfbench.pool workflow over references in that store."""
    require_extra("fleet", "batch --temporal")
    from runner.model.settings import cache_root
    from runner.worker.client import TemporalBatch, ViewCalls, run_batch

    options = TemporalBatch(
        address=temporal["address"],
        namespace=temporal["namespace"],
        task_queue=temporal["task_queue"],
        concurrency=jobs,
        max_attempts=retries + 1,
        tls=tls,
        workflow_id=f"{out.resolve().name}-{uuid.uuid4().hex[:8]}",
    )

    calls = ViewCalls(
        started=view.started, stage=view.stage, finished=view.finished, note=view.note
    )
    try:
        with interrupts():
            if store is None:
                result = run_batch(options, targets, calls)
            else:
                from runner.artifacts.store import open_store
                from runner.worker.fleet import run_pool

                artifacts = open_store(store, cache=cache_root() / "store")
                result = run_pool(options, artifacts, targets, calls)
    finally:
        view.close()
    batch_json = _write_results(result, out, junit)
    click.echo(f"batch: {_totals_line(result)}; {batch_json}", err=True)
    return int(result.exit_code)


def _write_results(result: Any, out: Path, junit_path: Path | None) -> Path:
    from runner.base.safeio import write_atomic
    from runner.batch.model import batch_html, junit_xml, markdown

    batch_json = out / "batch.json"
    summary = markdown(result)
    write_atomic(batch_json, result.to_json())
    write_atomic(out / "batch.md", summary)
    write_atomic(out / "batch.html", batch_html(result))
    if junit_path is not None:
        write_atomic(junit_path, junit_xml(result))
    if in_github_actions():
        _github_outputs(result, batch_json, summary)
    return batch_json


def _totals_line(result: Any) -> str:
    totals = ", ".join(f"{n} {v}" for v, n in result.totals().items() if n)
    moved = sum(t.moved for t in result.tasks)
    retried = sum(max(0, t.attempts - 1 - t.moved) for t in result.tasks)
    extra = f"; {retried} retried, {moved} moved to another engine" if retried or moved else ""
    if result.freed_bytes:
        extra += f"; cache budget freed {result.freed_bytes / 1e9:.2f} GB"
    return f"{totals} in {result.seconds:.1f} s{extra}"
