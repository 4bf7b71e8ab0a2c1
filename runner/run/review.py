"""`review`: what a verification round's reviewing agent receives, from a run, as one directory
an orchestrator hands over unchanged (the task contract, "Verification rounds": the green task's
instruction, held-out test patch, gold patch and environment contract, the rendered Harbor
files, the verification report and the deterministic coupling evidence).

    <out>/index.json       every item: its contract name, path, bytes and sha256; the run
    <out>/index.md         the same for a person
    <out>/instruction.md   <out>/test.patch   <out>/gold.patch   <out>/definition.json
    <out>/environment.json the environment contract: the definition's fields a fix may change
    <out>/rendered/        the bundle as verified (its census sealed), without the repository
                           snapshots (repo.tar.gz: listed in the index with their digests)
    <out>/report.json      <out>/report.html (when the run wrote one)
    <out>/coupling.json    the audit's coupling evidence and its notes

Written all at once (a staged directory renamed into place); a run without an authored task
(a bundle was verified) needs --task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runner.base.errors import InvalidTaskError, UsageError, printable
from runner.base.safeio import (
    file_kind,
    file_sha256,
    read_regular,
    size_words,
    staged_directory,
)
from runner.base.treeread import copy_bounded, read_below, sha256_exactly, walk_below
from runner.compile.compiler import REPO_ARCHIVE
from runner.compile.fixrules import FIXABLE_FIELDS
from runner.compile.render import CONTEXT_DIRS
from runner.compile.taskdir import (
    DEFINITION,
    GOLD_PATCH,
    INSTRUCTION,
    TEST_PATCH,
    AuthoredTask,
    load_authored_task,
    parse_json_object,
    write_authored,
)
from runner.model.layout import (
    MAX_BUNDLE_FILES,
    MAX_REPORT_BYTES,
    REPORT_FILE,
    REPORT_HTML_FILE,
    RunLayout,
)
from runner.model.report import Report, Verdict
from runner.model.stages import Stage

INDEX_JSON = "index.json"
INDEX_MD = "index.md"
RENDERED_DIR = "rendered"
ENVIRONMENT = "environment.json"
COUPLING = "coupling.json"
# The repository snapshot in each image's build context: the base commit's files, which the
# reviewer has as its repository; listed, not copied. Only where the compiler writes it.
SNAPSHOTS = frozenset(f"{directory}/{REPO_ARCHIVE}" for directory in CONTEXT_DIRS)
# What a rendered bundle may hold besides its snapshots: its task files, Dockerfiles, scripts and
# the helper, with room (the task's own files are at most 24 MiB: runner.base.validation).
MAX_RENDERED_BYTES = 256 * 1024 * 1024

# (contract name, path in the output, what it is)
ITEMS = (
    ("instruction", INSTRUCTION, "the instruction the coding agent receives"),
    ("held-out test patch", TEST_PATCH, "the held-out tests (applied only by the verifier)"),
    ("gold patch", GOLD_PATCH, "the reference solution"),
    ("definition", DEFINITION, "definition.json as verified"),
    (
        "environment contract",
        ENVIRONMENT,
        "the definition's environment and test fields: what a fix may change",
    ),
    ("rendered files", RENDERED_DIR, "the Harbor bundle as verified, census sealed"),
    ("verification report", REPORT_FILE, "the report of the verification (verify --json)"),
    ("coupling evidence", COUPLING, "the audit's deterministic test-to-gold coupling evidence"),
)


def _report(run_dir: Path) -> tuple[dict[str, Any], Report]:
    path = RunLayout(run_dir).report
    raw = read_regular(path, limit=MAX_REPORT_BYTES)
    document = parse_json_object(raw, path)
    try:
        return document, Report.model_validate(document)
    except ValidationError as exc:
        raise InvalidTaskError(
            f"not a report of this runner: {exc.errors()[0]['msg']}", path=str(path)
        ) from None


def _authored(run_dir: Path, task_dir: Path | None) -> AuthoredTask:
    where = task_dir if task_dir is not None else RunLayout(run_dir).authored
    if task_dir is None and where.is_symlink():
        # A run directory is input: its task linked to another task's directory would hand
        # that task's instruction and gold patch to the reviewer.
        raise UsageError(f"{where} is a symbolic link; it is not followed", path=str(where))
    if task_dir is None and not where.is_dir():
        raise UsageError(
            f"{run_dir} holds no authored task (the run verified a bundle, or an older runner "
            "made it): pass --task TASK_DIR",
            path=str(where),
        )
    return load_authored_task(where)


def _copy_rendered(
    bundle: Path, target: Path, *, sealed: bool, task_id: str | None, run_id: str | None
) -> list[dict[str, Any]]:
    """The bundle's files without its repository snapshots (returned as omitted, hashed), read
    once: an accepted run's through its seal (runner.compile.seal.sealed_files: every file
    checked as it is copied, so the hand-off holds what was sealed), another's through no link
    (runner.base.treeread.walk_below). A bundle this runner wrote holds regular files only, so
    a link, a FIFO or a device is refused, never followed; so is one holding more than
    MAX_RENDERED_BYTES besides its snapshots, or a snapshot larger than the seal allows."""
    from runner.compile.seal import MAX_SEALED_FILE_BYTES, sealed_files

    entries = (
        sealed_files(bundle, task_id=task_id, run_id=run_id)
        if sealed
        else walk_below(bundle, max_entries=MAX_BUNDLE_FILES)
    )
    omitted: list[dict[str, Any]] = []
    copied = 0
    for entry in entries:
        where = f"{bundle}/{entry.relative}"
        file = entry.file
        if file is None:
            raise InvalidTaskError(
                f"is {file_kind(entry.mode)}; a run's bundle holds regular files only", path=where
            )
        if entry.relative in SNAPSHOTS:
            if entry.size > MAX_SEALED_FILE_BYTES:
                raise InvalidTaskError("is larger than 4 GiB", path=where)
            omitted.append(
                {
                    "path": f"{RENDERED_DIR}/{entry.relative}",
                    "bytes": entry.size,
                    "sha256": sha256_exactly(file, entry.size, where),
                    "why": "the repository snapshot at the base commit (the reviewer's "
                    "repository holds it)",
                }
            )
            continue
        copied += entry.size
        if copied > MAX_RENDERED_BYTES:
            raise InvalidTaskError(
                f"the run's bundle holds more than {size_words(MAX_RENDERED_BYTES)} besides its "
                "repository snapshots; it is not a rendered task of this runner",
                path=str(bundle),
            )
        destination = target / entry.relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        copy_bounded(file, entry.size, destination, where)
    return omitted


def write_review(run_dir: Path, out: Path, *, task_dir: Path | None = None) -> dict[str, Any]:
    """The reviewer's directory for `run_dir` at `out` (which must not exist, or be empty);
    returns its index."""
    document, report = _report(run_dir)
    task = _authored(run_dir, task_dir)
    if task.definition.task_id != report.task_id:
        raise UsageError(
            f"the task ({task.definition.task_id}) is not the run's ({report.task_id})",
            path=str(task.directory),
        )
    # One naming /etc would put the host's files in the hand-off directory an agent receives.
    bundle = RunLayout(run_dir).own_bundle(report.bundle, report.run_dir)
    if bundle.is_symlink():
        raise UsageError(f"{bundle} is a symbolic link; it is not followed", path=str(bundle))
    if not bundle.is_dir():
        raise UsageError(f"{run_dir}: the run's bundle is gone ({bundle})", path=str(bundle))
    with staged_directory(out) as staged:
        return _fill(staged, run_dir, document, report, task, bundle)


def _fill(
    staged: Path,
    run_dir: Path,
    document: dict[str, Any],
    report: Report,
    task: AuthoredTask,
    bundle: Path,
) -> dict[str, Any]:
    write_authored(task, staged)
    definition = parse_json_object(task.definition_bytes, task.directory / DEFINITION)
    contract = {key: definition[key] for key in sorted(FIXABLE_FIELDS) if key in definition}
    (staged / ENVIRONMENT).write_text(json.dumps(contract, indent=2) + "\n")
    # A seal that is there is checked whatever the report says (its verdict is a file anyone
    # may edit); an accepted run's bundle must have one.
    from runner.compile.seal import has_seal

    sealed = report.verdict is Verdict.ACCEPTED or has_seal(bundle)
    omitted = _copy_rendered(
        bundle,
        staged / RENDERED_DIR,
        sealed=sealed,
        task_id=report.task_id,
        run_id=report.run_id,
    )
    (staged / REPORT_FILE).write_text(json.dumps(document, indent=2) + "\n")
    try:
        html = read_below(run_dir, REPORT_HTML_FILE, limit=MAX_REPORT_BYTES)
    except FileNotFoundError:
        html = None
    if html is not None:
        (staged / REPORT_HTML_FILE).write_bytes(html)
    audit = report.stages.audit.data
    coupling = {
        "taskId": report.task_id,
        "repositoryChecked": bool(audit and audit.repository_checked),
        "evidence": [c.model_dump(mode="json") for c in audit.coupling] if audit else [],
        "notes": list(audit.hints) if audit else [],
        Stage.AUDIT.value: report.stages.audit.status.value,
    }
    (staged / COUPLING).write_text(json.dumps(coupling, indent=2) + "\n")
    items = []
    for name, path, what in ITEMS:
        target = staged / path
        entry: dict[str, Any] = {"name": name, "path": path, "what": what}
        if target.is_file():
            entry |= {"bytes": target.stat().st_size, "sha256": file_sha256(target)}
        else:
            entry["files"] = sorted(
                p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()
            )
        items.append(entry)
    index = {
        "schemaVersion": 1,
        "taskId": report.task_id,
        "runId": report.run_id,
        "verdict": report.verdict.value,
        "reason": report.reason,
        "runnerVersion": report.runner_version,
        "items": items,
        "omitted": omitted,
        # Whether rendered/ was checked against the bundle's signed seal as it was copied.
        "sealed": sealed,
    }
    (staged / INDEX_JSON).write_text(json.dumps(index, indent=2) + "\n")
    (staged / INDEX_MD).write_text(_index_md(index))
    return index


def _index_md(index: dict[str, Any]) -> str:
    # What a run directory said (its report's id, verdict and reason) is escaped: a newline
    # or a lone surrogate there would add a line of its own to what the reviewer reads, or end
    # the write.
    def said(value: object) -> str:
        return printable(str(value))

    reason = said(index["reason"])
    lines = [
        f"# Review of {said(index['taskId'])} (run {said(index['runId'])})",
        "",
        f"Verdict: {said(index['verdict'])}" + (f" ({reason})" if reason else ""),
        "",
        "| item | path | what |",
        "| --- | --- | --- |",
        *(f"| {i['name']} | `{i['path']}` | {i['what']} |" for i in index["items"]),
    ]
    if index["omitted"]:
        omitted = index["omitted"]
        lines += ["", "Not copied:", *(f"- `{said(o['path'])}`: {o['why']}" for o in omitted)]
    lines += ["", "## Handing back a fix", "", *HAND_BACK]
    return "\n".join(lines) + "\n"


# What index.md tells the reviewer to hand back (docs/orchestrator.md, the verification round).
HAND_BACK = (
    "Edit the held-out tests in a work tree of the repository at the task's base commit with",
    "`test.patch` applied; put only the changed contract fields (those of `environment.json`) in",
    "`fix/definition.json`, or a whole new test patch in `fix/test.patch`. Then:",
    "",
    "    selfbench-runner fix TASK_DIR --tree WORKTREE [--fix fix] -o NEW_TASK_DIR",
    "",
    "writes the fixed task (every change outside the held-out tests and the contract is refused,",
    "named, with nothing written), ready for `selfbench-runner verify NEW_TASK_DIR`. A sidecar",
    "takes the same fix as a request with `fixOf` naming this verification.",
)
