"""The commands over many tasks besides `batch`: `matrix` (a GitHub Actions matrix), `gc` (the
image cache budget) and `export` (accepted tasks as one archive)."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import click

from runner.base.errors import UsageError
from runner.cli.common import cli
from runner.cli.options import ByteSize, logs_root_option
from runner.model.layout import REPORT_FILE, BundleLayout, RunLayout
from runner.model.settings import cache_root

MATRIX_LIMIT = 256  # GitHub's jobs per matrix


# ---- matrix ------------------------------------------------------------------------------


def _find_tasks(roots: list[Path]) -> list[Path]:
    found: list[Path] = []
    for root in roots:
        if (root / "definition.json").is_file() or BundleLayout(root).task_toml.is_file():
            found.append(root)
            continue
        if not root.is_dir():
            raise UsageError("is not a directory", path=str(root), field="TASK_DIR")
        for definition in sorted(root.rglob("definition.json")):
            if not any(part.startswith(".") for part in definition.relative_to(root).parts):
                found.append(definition.parent)
    return sorted(dict.fromkeys(found))


def _changed_tasks(tasks: list[Path], ref: str) -> list[Path]:
    from runner.compile.repository import changed_paths

    _, changed = changed_paths(ref)
    return [t for t in tasks if any(c.is_relative_to(t.resolve()) for c in changed)]


def _matrix_entry(task: Path) -> dict[str, str]:
    name = task.name
    try:
        definition = json.loads((task / "definition.json").read_text())
        if isinstance(definition, dict) and isinstance(definition.get("taskId"), str):
            name = definition["taskId"]
    except (OSError, ValueError):
        pass
    return {"task": task.as_posix(), "name": name}


@cli.command("matrix")
@click.argument("task_dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--changed-since",
    metavar="REF",
    help="Only tasks with a file changed between REF and HEAD (git diff REF...HEAD).",
)
@click.option(
    "--shard-size",
    type=click.IntRange(1, MATRIX_LIMIT),
    default=MATRIX_LIMIT,
    show_default=True,
    help="Entries per matrix.",
)
@click.option(
    "--legs",
    type=click.IntRange(1, MATRIX_LIMIT),
    help="At most this many legs, however many tasks: more tasks share legs (in order), and "
    "each leg's `tasks` holds its task directories one per line. Prints "
    '{"include": [{"task", "tasks", "name"}, ...], "count": N} (N: the tasks).',
)
def matrix_command(
    task_dirs: tuple[Path, ...], changed_since: str | None, shard_size: int, legs: int | None
) -> int:
    """Print a GitHub Actions matrix for fromJSON(): {"include": [{"task", "name"}, ...]}. More
    tasks than --shard-size: {"shards": [matrix, ...], "count": N}; with --legs, one matrix
    whatever the count. TASK_DIRs may be parents: every directory below holding a
    definition.json is a task."""
    tasks = _find_tasks(list(task_dirs) or [Path(".")])
    if changed_since is not None:
        tasks = _changed_tasks(tasks, changed_since)
    entries = [_matrix_entry(t) for t in tasks]
    # A fixed task keeps its id (`fix -o tasks/x-r2`): job names, and what the workflow names
    # after them, must still differ, so a repeated id is named with its directory too.
    repeated = Counter(e["name"] for e in entries)
    for entry in entries:
        if repeated[entry["name"]] > 1:
            entry["name"] = f"{entry['name']} ({entry['task']})"
    document: dict[str, Any]
    if legs is not None:
        document = {"include": matrix_legs(entries, legs), "count": len(entries)}
    elif len(entries) <= shard_size:
        document = {"include": entries}
    else:
        shards = [
            {"include": entries[i : i + shard_size]} for i in range(0, len(entries), shard_size)
        ]
        document = {"shards": shards, "count": len(entries)}
    click.echo(json.dumps(document, separators=(",", ":")))
    return 0


def matrix_legs(entries: list[dict[str, str]], legs: int) -> list[dict[str, str]]:
    """The entries spread over at most `legs` legs, in order, as evenly as they go (300 tasks on
    256 legs: 44 legs of two, then 212 of one). A leg names its first task, and how many more it
    verifies."""
    count = min(legs, len(entries))
    out: list[dict[str, str]] = []
    start = 0
    for index in range(count):
        size = len(entries) // count + (1 if index < len(entries) % count else 0)
        part = entries[start : start + size]
        start += size
        more = f" (+{len(part) - 1} more)" if len(part) > 1 else ""
        out.append(
            {
                "task": part[0]["task"],
                "tasks": "\n".join(e["task"] for e in part),
                "name": part[0]["name"] + more,
            }
        )
    return out


# ---- gc ----------------------------------------------------------------------------------


@cli.command("gc")
@click.option(
    "--cache-budget",
    type=ByteSize(),
    help="Keep the runner's task images under this size (e.g. 20GB).",
)
@click.option(
    "--store-cache-budget",
    type=ByteSize(),
    help="Keep this host's copies of a fleet's store (the blobs and runs `logs`, `export`, "
    "`grade`, `debug` and `batch --temporal` fetched) under this size (e.g. 5GB).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def gc_command(cache_budget: int | None, store_cache_budget: int | None, dry_run: bool) -> int:
    """Remove the least recently used task images, and copies fetched from a store, until they
    fit their budgets. Never an image a container uses, never an image the runner did not
    create; a fetched copy is fetched again when it is next needed."""
    if cache_budget is None and store_cache_budget is None:
        raise UsageError(
            "give --cache-budget, --store-cache-budget or both", field="--cache-budget"
        )
    verb = "would remove" if dry_run else "removed"
    if store_cache_budget is not None:
        _gc_fetched(store_cache_budget, dry_run=dry_run, verb=verb)
    if cache_budget is None:
        return 0
    from runner.engine.cachebudget import collect
    from runner.engine.docker import connected

    with connected() as engine:
        result = collect(engine, cache_budget, dry_run=dry_run)
    for tag in result.removed:
        click.echo(f"{verb} {tag}")
    click.echo(
        f"{verb} {len(result.removed)} image(s), {result.freed_bytes / 1e6:.1f} MB; "
        f"{result.kept_bytes / 1e6:.1f} MB kept ({result.skipped_in_use} in use)",
        err=True,
    )
    return 0


def _gc_fetched(budget: int, *, dry_run: bool, verb: str) -> None:
    from runner.artifacts.cachebound import prune_fetched

    pruned = prune_fetched(cache_root(), budget, dry_run=dry_run)
    click.echo(
        f"{verb} {pruned.removed} fetched store cop(ies), {pruned.freed_bytes / 1e6:.1f} MB; "
        f"{pruned.kept_bytes / 1e6:.1f} MB kept",
        err=True,
    )


# ---- the runner's key ----------------------------------------------------------------------


@cli.command("key")
def key_command() -> int:
    """Print the public half of this runner's signing key (ed25519:<hex>), made on first use:
    what another host adds to SELFBENCH_TRUSTED_KEYS (or `export --check --key`) to trust the
    bundles and archives this one seals. The key file is SELFBENCH_SIGNING_KEY, else
    ~/.config/selfbench-runner/signing-key (0600)."""
    from runner.compile import signing

    found = signing.signer()
    click.echo(signing.public_text(found.public))
    click.echo(f"key {found.key_id} in {found.path}", err=True)
    return 0


# ---- export ------------------------------------------------------------------------------


@cli.command("export")
@click.argument("input_args", metavar="[INPUTS]...", nargs=-1)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The archive to write (.tar.gz).",
)
@click.option(
    "--check",
    "check_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Verify every digest and signature of an export archive instead.",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY",
    help="A key to trust beside this host's own and SELFBENCH_TRUSTED_KEYS' (ed25519:<hex>, as "
    "`selfbench-runner key` prints it where the bundles were sealed, or a file holding one).",
)
@logs_root_option("Where a TASK_DIR's runs are.")
def export_command(
    input_args: tuple[str, ...],
    output: Path | None,
    check_path: Path | None,
    keys: tuple[str, ...],
    logs_root: Path,
) -> int:
    """Export accepted tasks as one deterministic archive: manifest.json and
    tasks/<taskId>.tar.gz (the Harbor bundle). INPUTS are run directories, their report.json,
    a batch's batch.json (every accepted task in it), or task directories (their newest run of
    those exact files under --logs, a batch's runs included). A run may be named by its store
    address (`<store>/runs/<key>`), and a fleet's batch.json names its runs so."""
    from runner.cli.common import _find_run, local_run
    from runner.present.export import NotAcceptedError, accepted_run, batch_runs, export
    from runner.present.exportcheck import check

    if check_path is not None:
        manifest = check(check_path, keys)
        click.echo(
            f"{check_path}: {len(manifest['tasks'])} task(s), every digest matches, every seal "
            "and the manifest signed by a trusted key"
        )
        return 0
    if output is None or not input_args:
        raise UsageError("name accepted runs and -o ARCHIVE (or --check ARCHIVE)", field="-o")
    runs = []
    left = 0
    for item in (local_run(a, field="INPUTS") for a in input_args):
        if item.suffix == ".json" and item.name != REPORT_FILE:
            batch = batch_runs(item, functools.partial(local_run, field=f"{item}: runDir"), keys)
            runs.extend(batch.accepted)
            for words in batch.left:
                click.echo(f"{item}: not exported, {words}", err=True)
            left += len(batch.left)
            continue
        run_dir = item.parent if item.name == REPORT_FILE else item
        if (run_dir / "definition.json").is_file() and not RunLayout(run_dir).report.is_file():
            found = _find_run(run_dir, logs_root)
            if found is None:
                raise UsageError(
                    "no run of this task's exact files under --logs; verify it first",
                    path=str(item),
                )
            run_dir = found
        try:
            runs.append(accepted_run(run_dir, keys))
        except NotAcceptedError as exc:
            # As a batch's red tasks: named, and the accepted ones still exported.
            click.echo(f"{item}: not exported, {exc.words}", err=True)
            left += 1
    if not runs:
        raise UsageError(
            f"no accepted run among the inputs ({left} not accepted; export takes accepted "
            "tasks only): nothing exported",
            field="INPUTS",
        )
    manifest = export(runs, output)
    click.echo(f"{output}: {len(manifest['tasks'])} task(s), manifest digest {manifest['digest']}")
    return 0
