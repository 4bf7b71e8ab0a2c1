"""`export`: accepted tasks as one deterministic archive (the seed's export contract).

    archive.tar.gz
      manifest.json          task ids, difficulty, source PR, each bundle's digest, the runner
                             version, and the manifest's own digest
      tasks/<taskId>.tar.gz  the Harbor bundle: snapshot, held-out tests, reference solution
                             (no git history, no run logs)

The same input gives a byte-identical archive: entries sorted, owners, times and modes
normalised, gzip without a name or time. `export --check` verifies every digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import __version__
from runner.base.errors import InvalidTaskError, UsageError
from runner.base.safeio import write_atomic
from runner.model.harbor import read_task_toml

MANIFEST = "manifest.json"
MAX_MEMBER_BYTES = 4 * 1024**3


@dataclass(frozen=True, kw_only=True)
class Accepted:
    run_dir: Path
    bundle: Path
    task_id: str
    run_id: str


def accepted_run(run_dir: Path) -> Accepted:
    """The run's bundle, if the run was accepted; a clear refusal otherwise."""
    try:
        report = json.loads((run_dir / "report.json").read_text())
    except (OSError, ValueError):
        raise UsageError(
            "no readable report.json: not a run directory", path=str(run_dir)
        ) from None
    verdict = report.get("verdict")
    if verdict != "accepted":
        reason = report.get("reason") or ""
        raise UsageError(
            f"{report.get('taskId') or run_dir} was {verdict}, not accepted"
            + (f" ({reason[:200]})" if reason else "")
            + "; export takes accepted tasks only",
            path=str(run_dir),
        )
    bundle = Path(report.get("bundle") or run_dir / "bundle")
    if not (bundle / "task.toml").is_file():
        raise UsageError(f"the accepted run's bundle is gone ({bundle})", path=str(run_dir))
    return Accepted(
        run_dir=run_dir, bundle=bundle, task_id=str(report["taskId"]), run_id=str(report["runId"])
    )


@dataclass(frozen=True, kw_only=True)
class BatchRuns:
    accepted: list[Accepted]
    left: list[str]  # "<task>: <verdict>" for each task of the batch not accepted


def batch_runs(path: Path) -> BatchRuns:
    """The accepted runs a batch's `batch.json` lists (its `tasks[i].runDir`), and what it
    leaves out. A batch directory that moved (a CI artifact unpacked elsewhere) is followed: a
    runDir that is gone is looked for at the same place under the file's own `runs/`."""
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
        accepted.append(accepted_run(_located(Path(run_dir), path.parent)))
    if not accepted:
        raise UsageError(
            "no accepted task in this batch"
            + (f" ({'; '.join(left[:5])}{'; …' if len(left) > 5 else ''})" if left else ""),
            path=str(path),
        )
    return BatchRuns(accepted=accepted, left=left)


def _located(run_dir: Path, batch_dir: Path) -> Path:
    if (run_dir / "report.json").is_file():
        return run_dir
    parts = run_dir.parts
    if len(parts) >= 3 and parts[-3] == "runs":
        moved = batch_dir.joinpath(*parts[-3:])
        if (moved / "report.json").is_file():
            return moved
    return run_dir  # accepted_run says what is missing


def _gzip(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as out:
        out.write(data)
    return buffer.getvalue()


def _tar(entries: list[tuple[str, bytes | None, bool]]) -> bytes:
    """A tar of (name, content or None for a directory, executable), normalised."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content, executable in sorted(entries, key=lambda e: e[0]):
            info = tarfile.TarInfo(name)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if content is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.size = len(content)
                info.mode = 0o755 if executable else 0o644
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def bundle_archive(bundle: Path, task_id: str) -> bytes:
    entries: list[tuple[str, bytes | None, bool]] = []
    for root, dirnames, filenames in os.walk(bundle, followlinks=False):
        dirnames.sort()
        relative = Path(root).relative_to(bundle)
        if relative != Path("."):
            entries.append((f"{task_id}/{relative.as_posix()}", None, True))
        for name in sorted(filenames):
            path = Path(root) / name
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidTaskError("a bundle holds regular files only", path=str(path))
            if info.st_size > MAX_MEMBER_BYTES:
                raise InvalidTaskError("larger than 4 GiB", path=str(path))
            entries.append(
                (
                    f"{task_id}/{(relative / name).as_posix()}",
                    path.read_bytes(),
                    bool(info.st_mode & 0o111),
                )
            )
    return _gzip(_tar(entries))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_digest(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "digest"}
    return _digest(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def export(runs: list[Accepted], out: Path) -> dict[str, Any]:
    seen: dict[str, Path] = {}
    files: list[tuple[str, bytes | None, bool]] = [("tasks", None, True)]
    tasks = []
    for run in sorted(runs, key=lambda r: r.task_id):
        if run.task_id in seen:
            raise UsageError(
                f"task {run.task_id!r} is given twice ({seen[run.task_id]} and {run.run_dir})",
                path=str(run.run_dir),
            )
        seen[run.task_id] = run.run_dir
        config = read_task_toml(run.bundle)
        data = bundle_archive(run.bundle, run.task_id)
        name = f"tasks/{run.task_id}.tar.gz"
        files.append((name, data, False))
        metadata = config.metadata
        tasks.append(
            {
                "taskId": run.task_id,
                "difficulty": metadata.difficulty.value,
                "sourcePr": metadata.source_pr,
                "sourceUrl": metadata.source_url,
                "file": name,
                "sha256": _digest(data),
                "runId": run.run_id,
            }
        )
    manifest: dict[str, Any] = {
        "schemaVersion": 1,
        "runnerVersion": __version__,
        "tasks": tasks,
    }
    manifest["digest"] = manifest_digest(manifest)
    files.append((MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode(), False))
    write_atomic(out, _gzip(_tar(files)))
    return manifest


def check(archive: Path) -> dict[str, Any]:
    """Every digest of an export archive; raises InvalidTaskError naming the first mismatch."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = {
                m.name: m for m in tar.getmembers() if m.isfile() and m.size <= MAX_MEMBER_BYTES
            }
            if MANIFEST not in members:
                raise InvalidTaskError("has no manifest.json", path=str(archive))
            manifest = json.loads(tar.extractfile(members[MANIFEST]).read())  # type: ignore[union-attr]
            if manifest.get("digest") != manifest_digest(manifest):
                raise InvalidTaskError(
                    "manifest.json's digest does not match its content", path=str(archive)
                )
            for task in manifest.get("tasks") or []:
                name = str(task.get("file"))
                if name not in members:
                    raise InvalidTaskError(f"{name} is missing", path=str(archive))
                data = tar.extractfile(members[name]).read()  # type: ignore[union-attr]
                if _digest(data) != task.get("sha256"):
                    raise InvalidTaskError(f"{name}: digest mismatch", path=str(archive))
    except (OSError, tarfile.TarError, ValueError) as exc:
        raise InvalidTaskError(f"not a readable export archive: {exc}", path=str(archive)) from None
    return dict(manifest)
