"""`evaluate`'s tasks: each bundle it grades against, taken once into <out>/bundles/<taskId>
through one checked read of its seal, from an export archive or a directory of sealed bundles or
run directories; with what the summary groups by (difficulty, repository) and the weight that
orders them (heaviest first).

Whatever the source, a bundle is copied only through runner.compile.seal.sealed_files: each file
as sealed, the manifest signed by a key this host trusts (or one given with --key). An archive's
bundles are first unpacked into a staging directory (regular files and directories only, every
name inside its task's folder, each bounded), its manifest checked (digest, signature, each
inner archive's sha256), then taken the same way. A bundle that fails is a problem of its own;
the others are graded."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, NamedTuple, cast

from runner.base.errors import InvalidTaskError, Problem, RunnerError, UsageError
from runner.base.safeio import file_sha256
from runner.base.treeread import copy_bounded
from runner.base.validation import check_task_id
from runner.compile.bundle import is_bundle, load_bundle
from runner.compile.seal import SealBrokenError, copy_sealed
from runner.model.layout import RunLayout
from runner.present.export import MANIFEST
from runner.present.exportcheck import (
    MAX_MEMBERS,
    BoundedHeaders,
    member_problem,
    read_manifest,
)

# What one bundle may unpack to: four of its largest files (the snapshot is the large one).
MAX_UNPACKED_BYTES = 16 * 1024**3


@dataclass(frozen=True, kw_only=True)
class EvalTask:
    task_id: str
    bundle: Path  # <out>/bundles/<taskId>, a checked copy
    digest: str  # sha256 of its seal (the signed manifest, which names every file's digest)
    difficulty: str
    repository: str
    # What orders the tasks, heaviest first: the verifier's timeout (what one grade may take).
    weight: float
    run_id: str | None = None  # the run its seal's census names (the accepting verification)


class Sources(NamedTuple):
    tasks: dict[str, EvalTask]  # by task id
    problems: list[Problem]
    refused: int  # tasks of the source that were not taken (a score counts them unresolved)


def gather(source: Path, out: Path, keys: tuple[str, ...]) -> Sources:
    """Every task of `source` taken into <out>/bundles, and a problem for each that could not
    be. UsageError when `source` is none of what evaluate takes, or an archive whose manifest
    fails its check."""
    bundles = out / "bundles"
    bundles.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    tasks: dict[str, EvalTask] = {}
    problems: list[Problem] = []
    if source.is_file():
        staged = _unpack_archive(source, out, keys, problems)
        try:
            for task_id, (root, run_id) in staged.items():
                _take(root, bundles, keys, tasks, problems, task_id=task_id, run_id=run_id)
        finally:
            for root, _ in staged.values():
                shutil.rmtree(root.parent, ignore_errors=True)
        return Sources(tasks, problems, len(problems))
    if not source.is_dir():
        raise UsageError(
            "is neither an export archive nor a directory of bundles or run directories",
            path=str(source),
            field="SOURCE",
        )
    if is_bundle(source) or RunLayout(source).report.is_file():
        candidates = [source]
    else:
        candidates = sorted(
            (p for p in source.iterdir() if not p.name.startswith(".") and p.is_dir()),
            key=lambda p: p.name,
        )
    strays = 0
    for candidate in candidates:
        root = candidate if is_bundle(candidate) else RunLayout(candidate).bundle
        if not is_bundle(candidate) and not RunLayout(candidate).report.is_file():
            problems.append(
                Problem(file=str(candidate), field=None, message="is neither a bundle nor a run")
            )
            strays += 1
            continue
        _take(root, bundles, keys, tasks, problems)
    return Sources(tasks, problems, len(problems) - strays)


def _take(
    root: Path,
    bundles: Path,
    keys: tuple[str, ...],
    tasks: dict[str, EvalTask],
    problems: list[Problem],
    *,
    task_id: str | None = None,
    run_id: str | None = None,
) -> None:
    """The bundle at `root` copied into `bundles` through one checked read of its seal."""
    staging = Path(tempfile.mkdtemp(prefix=".take.", dir=bundles))
    try:
        manifest = copy_sealed(root, staging, keys, task_id=task_id, run_id=run_id)
        bundle = load_bundle(staging)
        document = json.loads(manifest)
        sealed_task = document.get("taskId")
        if sealed_task != bundle.task_id:
            raise SealBrokenError("its task.toml names another task than its seal", path=str(root))
        if bundle.task_id in tasks:
            raise UsageError(
                f"task {bundle.task_id} is given twice (also {tasks[bundle.task_id].bundle})",
                path=str(root),
            )
        target = bundles / bundle.task_id
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except RunnerError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        message = exc.message
        if isinstance(exc, SealBrokenError):
            message = f"the bundle does not match its seal: {message}"
        problems.append(Problem(file=exc.path or str(root), field=exc.field, message=message))
        return
    metadata = bundle.config.metadata
    tasks[bundle.task_id] = EvalTask(
        task_id=bundle.task_id,
        bundle=target,
        digest=hashlib.sha256(manifest).hexdigest(),
        difficulty=metadata.difficulty.value,
        repository=metadata.repo,
        weight=float(bundle.config.verifier.timeout_sec),
        run_id=_census_run(document),
    )


def _census_run(document: dict[str, Any]) -> str | None:
    census = document.get("census")
    run_id = census.get("runId") if isinstance(census, dict) else None
    return run_id if isinstance(run_id, str) else None


def unpack_bundle_archive(archive: Path, task_id: str, root: Path) -> Path:
    """A bundle's archive as export writes it (`<taskId>/...`) unpacked at `root` by the same
    rules as an export's (regular files and directories under its task's folder only, each
    bounded, at most MAX_UNPACKED_BYTES); InvalidTaskError when it breaks one. Its seal is the
    reader's to check."""
    if check_task_id(task_id) is not None:
        raise InvalidTaskError("names no task id (its folder in the archive)")
    root.mkdir(parents=True)
    try:
        with archive.open("rb") as stream:
            _unpack_members(stream, task_id, root)
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise InvalidTaskError(f"cannot be unpacked: {str(exc)[:200]}") from None
    return root


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """An archive's members, each checked by export --check's rules (bounded, named inside the
    archive, a regular file or a directory), at most MAX_MEMBERS."""
    for count, member in enumerate(tar, start=1):
        if count > MAX_MEMBERS:
            raise InvalidTaskError(f"holds more than {MAX_MEMBERS} entries")
        problem = member_problem(member)
        if problem is not None:
            raise InvalidTaskError(problem)
        yield member


def _archive_manifest(archive: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """The archive's manifest, checked (its digest and its signature by a trusted key): read
    in a first pass that writes nothing, so no byte of an archive no trusted key signed is
    unpacked."""
    manifest = None
    with tarfile.open(archive, mode="r|gz", tarinfo=BoundedHeaders) as tar:
        for member in _members(tar):
            if member.name == MANIFEST and member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                manifest = read_manifest(handle, keys)
    if manifest is None:
        raise InvalidTaskError("has no manifest.json")
    return manifest


def _unpack_archive(
    archive: Path, out: Path, keys: tuple[str, ...], problems: list[Problem]
) -> dict[str, tuple[Path, str | None]]:
    """Each task of an export archive unpacked into a staging directory of its own, by task id
    with the run id its manifest lists. Its manifest must pass first (UsageError); each inner
    archive is unpacked only once its digest is the one the signed manifest lists; one that
    does not pass is a problem, and left out."""
    where = str(archive)
    staged: dict[str, tuple[Path, str | None]] = {}
    try:
        manifest = _archive_manifest(archive, keys)
        listed = {task["file"]: task for task in manifest["tasks"]}
        seen: set[str] = set()
        with tarfile.open(archive, mode="r|gz", tarinfo=BoundedHeaders) as tar:
            for member in _members(tar):
                name = member.name
                if member.isdir() or name == MANIFEST:
                    continue
                if name in seen or name not in listed:
                    raise InvalidTaskError(f"{name[:200]!r} is not in manifest.json, or is twice")
                seen.add(name)
                handle = tar.extractfile(member)
                assert handle is not None
                root = _unpack_bundle(handle, member.size, listed[name], out, problems)
                if root is not None:
                    run_id = listed[name].get("runId")
                    staged[listed[name]["taskId"]] = (
                        root,
                        run_id if isinstance(run_id, str) else None,
                    )
    except InvalidTaskError as exc:
        _remove(staged)
        raise UsageError(exc.message, path=where, field="SOURCE") from None
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        _remove(staged)
        raise UsageError(
            f"not a readable export archive: {str(exc)[:200] or type(exc).__name__}",
            path=where,
            field="SOURCE",
        ) from None
    except BaseException:
        _remove(staged)  # interrupted: nothing half-unpacked stays
        raise
    for name in sorted(set(listed) - seen):
        problems.append(Problem(file=where, field=None, message=f"{name} is missing"))
    return staged


def _remove(staged: dict[str, tuple[Path, str | None]]) -> None:
    for root, _ in staged.values():
        shutil.rmtree(root.parent, ignore_errors=True)


def _unpack_bundle(
    handle: IO[bytes], size: int, listed: dict[str, Any], out: Path, problems: list[Problem]
) -> Path | None:
    """One inner archive copied aside while hashed, then, when its digest is the one the
    manifest lists, unpacked (regular files and directories under its task's folder only,
    each bounded, at most MAX_UNPACKED_BYTES in all); its task's folder, or None (a problem)."""
    name, prefix = listed["file"], listed["taskId"]
    staging = Path(tempfile.mkdtemp(prefix=".unpack.", dir=out))
    try:
        inner = staging / "inner.tar.gz"
        copy_bounded(cast(BinaryIO, handle), size, inner, name)
        if file_sha256(inner) != listed["sha256"]:
            problems.append(Problem(file=name, field=None, message="digest mismatch"))
            shutil.rmtree(staging)
            return None
        root = staging / "bundle"
        root.mkdir()
        try:
            with inner.open("rb") as stream:
                _unpack_members(stream, prefix, root)
        except (InvalidTaskError, OSError, EOFError, tarfile.TarError, zlib.error) as exc:
            text = exc.message if isinstance(exc, InvalidTaskError) else str(exc)[:200]
            problems.append(Problem(file=name, field=None, message=f"cannot be unpacked: {text}"))
            shutil.rmtree(staging)
            return None
        inner.unlink()
        return root
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def remove_stale(out: Path) -> None:
    """What an earlier run that was killed (not interrupted) left half-made: its staging
    directories, this evaluation's own."""
    for parent in (out, out / "bundles"):
        for stale in [*parent.glob(".unpack.*"), *parent.glob(".take.*")]:
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)


def _unpack_members(stream: IO[bytes], prefix: str, root: Path) -> None:
    total = 0
    with tarfile.open(fileobj=stream, mode="r|gz", tarinfo=BoundedHeaders) as inner:
        for count, member in enumerate(inner, start=1):
            if count > MAX_MEMBERS:
                raise InvalidTaskError(f"holds more than {MAX_MEMBERS} entries")
            problem = member_problem(member, prefix=prefix)
            if problem is not None:
                raise InvalidTaskError(problem)
            relative = member.name[len(prefix) + 1 :]
            if not relative:
                continue
            target = root / relative
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            total += member.size
            if total > MAX_UNPACKED_BYTES:
                raise InvalidTaskError("unpacks to more than 16 GiB")
            target.parent.mkdir(parents=True, exist_ok=True)
            source = inner.extractfile(member)
            assert source is not None
            copy_bounded(cast(BinaryIO, source), member.size, target, f"{prefix}/{relative}")
            target.chmod(0o755 if member.mode & 0o111 else 0o644)
