"""`export`: accepted tasks as one deterministic archive (the seed's export contract).

    archive.tar.gz
      manifest.json          task ids, difficulty, source PR, each bundle's digest, the runner
                             version, and the manifest's own digest
      tasks/<taskId>.tar.gz  the Harbor bundle: snapshot, held-out tests, reference solution
                             (no git history, no run logs)

The same input gives a byte-identical archive: entries sorted, owners, times and modes
normalised, gzip without a name or time. Only a bundle whose seal a trusted key signed is
exported (a report that says "accepted" is anyone's to write), and the manifest is signed with
the runner's key (Ed25519 signs the same bytes the same way). `export --check` verifies every
digest, the manifest's signature, and each bundle's seal (its files' digests, its signature),
with the keys this host trusts and those `--key` names.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from runner import __version__
from runner.base.errors import InvalidTaskError, UsageError
from runner.base.safeio import file_sha256
from runner.base.validation import check_task_id
from runner.compile import signing
from runner.compile.seal import MAX_SEALED_FILE_BYTES
from runner.model.harbor import MAX_TOML_BYTES, parse_task_toml
from runner.model.layout import TASK_TOML_FILE, BundleLayout, RunLayout

MANIFEST = "manifest.json"
# A bundle's largest member: the seal's bound (runner.compile.seal), which export --check
# holds an archive's members to.
MAX_MEMBER_BYTES = MAX_SEALED_FILE_BYTES


@dataclass(frozen=True, kw_only=True)
class Accepted:
    run_dir: Path
    bundle: Path
    task_id: str
    run_id: str
    trusted: tuple[str, ...] = ()  # the keys its seal was checked against


class NotAcceptedError(UsageError):
    """A run whose verdict is not accepted: `export` names it and goes on with the others, as it
    does with a batch's red tasks."""

    def __init__(self, words: str, *, path: str) -> None:
        super().__init__(f"{words}; export takes accepted tasks only", path=path)
        self.words = words


def accepted_run(run_dir: Path, trusted: tuple[str, ...] = ()) -> Accepted:
    """The run's bundle, if the run was accepted and its seal is a trusted key's; a clear
    refusal otherwise."""
    from runner.present.runlogs import run_report

    report = run_report(run_dir)
    if report is None:
        raise UsageError("no readable report.json: not a run directory", path=str(run_dir))
    verdict = report.get("verdict")
    if verdict != "accepted":
        reason = report.get("reason") or ""
        raise NotAcceptedError(
            f"{report.get('taskId') or run_dir}: {verdict}"
            + (f" ({' '.join(str(reason).split())[:200]})" if reason else ""),
            path=str(run_dir),
        )
    given = report.get("taskId")
    task_id = given if isinstance(given, str) else ""
    problem = check_task_id(task_id) if isinstance(given, str) else "is not a string"
    if problem is not None:
        # The id names the archive's entry: never a path of its own.
        raise UsageError(f"taskId {problem}", path=str(RunLayout(run_dir).report), field="taskId")
    # One pointing at a host directory would export that directory.
    bundle = RunLayout(run_dir).own_bundle(report.get("bundle"), report.get("runDir"))
    if bundle.is_symlink() or not BundleLayout(bundle).task_toml.is_file():
        raise UsageError(f"the accepted run's bundle is gone ({bundle})", path=str(run_dir))
    from runner.compile.seal import seal_problem

    problem = seal_problem(bundle, trusted, task_id=task_id, run_id=str(report["runId"]))
    if problem is not None:
        raise UsageError(
            f"the accepted run's bundle does not match its seal: {problem}", path=str(bundle)
        )
    return Accepted(
        run_dir=run_dir,
        bundle=bundle,
        task_id=task_id,
        run_id=str(report["runId"]),
        trusted=trusted,
    )


@dataclass(frozen=True, kw_only=True)
class BatchRuns:
    accepted: list[Accepted]
    left: list[str]  # "<task>: <verdict>" for each task of the batch not accepted


def batch_runs(
    path: Path, locate: Callable[[str], Path] = Path, trusted: tuple[str, ...] = ()
) -> BatchRuns:
    """The accepted runs a batch's `batch.json` lists (its `tasks[i].runDir`), and what it
    leaves out. A batch directory that moved (a CI artifact unpacked elsewhere) is followed: a
    runDir that is gone is looked for at the same place under the file's own `runs/`.
    `locate` makes a runDir a local directory (a fleet's batch names runs in its store)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"not a readable batch.json ({exc})", path=str(path)) from None
    tasks = document.get("tasks") if isinstance(document, dict) else None
    if not isinstance(tasks, list):
        raise UsageError("not a batch.json: no tasks list", path=str(path), field="tasks")
    accepted: list[Accepted] = []
    left: list[str] = []
    for index, task in enumerate(tasks):
        field = f"tasks[{index}]"
        if not isinstance(task, dict):
            raise UsageError("is not an object", path=str(path), field=field)
        verdict, name = task.get("verdict"), task.get("taskId") or task.get("target")
        if verdict != "accepted":
            left.append(f"{name or field}: {verdict}")
            continue
        run_dir = task.get("runDir")
        if not isinstance(run_dir, str) or not run_dir:
            raise UsageError("an accepted task with no runDir", path=str(path), field=field)
        accepted.append(accepted_run(_located(locate(run_dir), path.parent), trusted))
    if not accepted:
        raise UsageError(
            "no accepted task in this batch"
            + (f" ({'; '.join(left[:5])}{'; …' if len(left) > 5 else ''})" if left else ""),
            path=str(path),
        )
    return BatchRuns(accepted=accepted, left=left)


def _located(run_dir: Path, batch_dir: Path) -> Path:
    if RunLayout(run_dir).report.is_file():
        return run_dir
    parts = run_dir.parts
    if len(parts) >= 3 and parts[-3] == "runs":
        moved = batch_dir.joinpath(*parts[-3:])
        if RunLayout(moved).report.is_file():
            return moved
    return run_dir  # accepted_run says what is missing


# One archive member of the export: its name, and its bytes, a file of the runner's own staging
# directory, or None for a directory.
_Member = tuple[str, bytes | Path | None]


@contextlib.contextmanager
def _tar_gz(out: IO[bytes]) -> Iterator[tarfile.TarFile]:
    """A gzipped tar on `out`, streamed: a file's bytes go from its file to `out` a chunk at a
    time, so memory holds no member whole (a bundle's repository snapshot can be gigabytes).
    Deflate's output does not depend on how its input is cut."""
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        yield tar


def _add(
    tar: tarfile.TarFile,
    name: str,
    data: BinaryIO | None = None,
    size: int = 0,
    executable: bool = False,
) -> None:
    """One member, normalised (no times, no owners); a directory when `data` is None. Exactly
    `size` bytes of `data`, or tarfile raises."""
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if data is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
        return
    info.mode = 0o755 if executable else 0o644
    info.size = size
    tar.addfile(info, data)


def _write_tar_gz(out: IO[bytes], members: list[_Member]) -> None:
    """The export's own archive: `members`, sorted."""
    with _tar_gz(out) as tar:
        for name, content in sorted(members, key=lambda m: m[0]):
            if content is None:
                _add(tar, name)
            elif isinstance(content, bytes):
                _add(tar, name, io.BytesIO(content), len(content))
            else:
                with content.open("rb") as source:
                    _add(tar, name, source, os.fstat(source.fileno()).st_size)


def write_bundle_archive(out: IO[bytes], run: Accepted) -> bytes:
    """A run's bundle under `<taskId>/` as a gzipped tar, in the order of its paths'
    components, read once through runner.compile.seal.sealed_files: every file is checked
    against the seal as it is archived, so the archive holds what was sealed, whatever changes
    on disk meanwhile (a file swapped, the bundle replaced by a link). Returns its task.toml
    as archived. SealBrokenError when anything differs."""
    from runner.compile.seal import sealed_files

    made: set[str] = set()
    task_toml = b""
    with _tar_gz(out) as tar:
        for entry in sealed_files(run.bundle, run.trusted, task_id=run.task_id, run_id=run.run_id):
            assert entry.file is not None  # sealed_files yields regular files only
            parts = entry.relative.split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in made:
                    made.add(directory)
                    _add(tar, f"{run.task_id}/{directory}")
            data: BinaryIO = entry.file
            if entry.relative == TASK_TOML_FILE:
                if entry.size > MAX_TOML_BYTES:
                    raise InvalidTaskError("is too large for a task.toml", path=str(run.bundle))
                task_toml = entry.file.read(entry.size)
                data = io.BytesIO(task_toml)
            executable = bool(entry.mode & 0o111)
            _add(tar, f"{run.task_id}/{entry.relative}", data, entry.size, executable)
    return task_toml


def manifest_digest(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k not in ("digest", signing.SIGNATURE)}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def export(runs: list[Accepted], out: Path) -> dict[str, Any]:
    """The archive of `runs` at `out` (written whole or not at all): each task's bundle as its
    own .tar.gz, staged in a directory beside `out` and streamed, then the manifest."""
    seen: dict[str, Path] = {}
    for run in runs:
        if run.task_id in seen:
            raise UsageError(
                f"task {run.task_id!r} is given twice ({seen[run.task_id]} and {run.run_dir})",
                path=str(run.run_dir),
            )
        seen[run.task_id] = run.run_dir
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as staging:
        members: list[_Member] = [("tasks", None)]
        tasks = []
        for run in sorted(runs, key=lambda r: r.task_id):
            inner = Path(staging) / f"{run.task_id}.tar.gz"
            try:
                with inner.open("wb") as handle:
                    raw = write_bundle_archive(handle, run)
            except OSError as exc:  # a file cut short while it was archived
                raise UsageError(
                    f"the accepted run's bundle changed while it was archived ({exc})",
                    path=str(run.bundle),
                ) from None
            config = parse_task_toml(raw, BundleLayout(run.bundle).task_toml)
            name = f"tasks/{run.task_id}.tar.gz"
            members.append((name, inner))
            metadata = config.metadata
            tasks.append(
                {
                    "taskId": run.task_id,
                    "difficulty": metadata.difficulty.value,
                    "sourcePr": metadata.source_pr,
                    "sourceUrl": metadata.source_url,
                    "file": name,
                    "sha256": file_sha256(inner),
                    "runId": run.run_id,
                }
            )
        manifest: dict[str, Any] = {
            "schemaVersion": 1,
            "runnerVersion": __version__,
            "tasks": tasks,
        }
        manifest["digest"] = manifest_digest(manifest)
        signing.sign_document(manifest)
        members.append((MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode()))
        whole = Path(staging) / "export.tar.gz"
        with whole.open("wb") as handle:
            _write_tar_gz(handle, members)
        whole.chmod(0o644)
        os.replace(whole, out)
    return manifest
