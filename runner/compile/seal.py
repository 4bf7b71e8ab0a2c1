"""Sealing a bundle: its census written in, the digest of every file recorded in its manifest,
and the manifest signed with the runner's key (runner.compile.signing); and the check that a bundle
still matches its seal and that a trusted key signed it (what `grade` and `export` trust)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.base.errors import InvalidTaskError, UsageError, printable
from runner.base.safeio import (
    optional_regular,
    read_opened,
    stream_sha256,
    write_atomic,
)
from runner.base.treeread import (
    FILE_FLAGS,
    Below,
    HashingReader,
    copy_bounded,
    held_directory,
    walk_below,
    walk_held,
)
from runner.compile import signing
from runner.model.census import Census
from runner.model.evidence import MAX_EVIDENCE_BYTES
from runner.model.layout import CENSUS_FILE, MANIFEST_FILE, MAX_BUNDLE_FILES, BundleLayout
from runner.model.manifest import MANIFEST_FIELDS

CENSUS_PATH = f"tests/{CENSUS_FILE}"


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def seal(bundle: Path, census: Census, out: Path) -> Path:
    """The bundle with its census sealed in, at `out` (the bundle itself when it is already
    there; else a copy, its large files linked): tests/expected-tests.json, recorded in the
    manifest with its digest. Returns `out`."""
    if bundle.resolve() != out.resolve():
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(bundle, out, symlinks=True, copy_function=_link_or_copy)
    text = census.to_json()
    target = BundleLayout(out).census
    target.unlink(missing_ok=True)  # a linked copy must not write through to the original
    write_atomic(target, text)
    manifest_path = BundleLayout(out).manifest
    raw = optional_regular(manifest_path, limit=MAX_EVIDENCE_BYTES)
    document = json.loads(raw) if raw else {}
    if not isinstance(document, dict):
        document = {}
    # Only the compiler's own fields are sealed: the runner's key must never sign fields a
    # bundle's author chose (a signed document of another kind, say what the hack gate
    # remembers, would then come out of any verify of a planted bundle).
    document = {k: v for k, v in document.items() if k in MANIFEST_FIELDS}
    # The seal: every file of the bundle as the verification left it (grade compares it).
    document["seal"] = {"files": bundle_digests(out)}
    document["census"] = {
        "file": CENSUS_PATH,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "runId": census.run_id,
        "failToPass": census.fail_to_pass.mode,
        "passToPass": census.pass_to_pass.mode,
        "tests": len(census.fail_to_pass.tests) + len(census.pass_to_pass.tests),
    }
    signing.sign_document(document)
    manifest_path.unlink(missing_ok=True)
    write_atomic(manifest_path, json.dumps(document, indent=2) + "\n")
    return out


def bundle_digests(root: Path) -> dict[str, str]:
    """The sha256 of every file of a bundle but its manifest, by relative path, read through no
    link (runner.base.treeread.walk_below); a link or a special file is recorded as such (a
    sealed bundle holds regular files only)."""
    digests: dict[str, str] = {}
    for entry in walk_below(root, max_entries=MAX_BUNDLE_FILES):
        if entry.relative == MANIFEST_FILE:
            continue
        file = entry.file
        digests[entry.relative] = stream_sha256(file) if file is not None else "not a regular file"
    return digests


class SealBrokenError(UsageError):
    """A bundle that does not match its seal: what differs, as seal_problem says it."""


# The largest file a sealed bundle holds (its repository snapshot): a larger one is refused
# before a byte of it is hashed (a sparse file of a terabyte costs no disk and an hour of hash).
MAX_SEALED_FILE_BYTES = 4 * 1024**3


def sealed_files(
    root: Path,
    trusted: tuple[str, ...] = (),
    *,
    task_id: str | None = None,
    run_id: str | None = None,
) -> Iterator[Below]:
    """The files of a sealed bundle, read once and each checked against the seal as it is read
    (what a caller copies or archives is then what was sealed, whatever changes on disk
    meanwhile): the root held through no link, the manifest read first and its signature
    checked against the keys this host trusts (its own, SELFBENCH_TRUSTED_KEYS', `trusted`'s),
    and, when given, its task id and its census's run id against the run's (another task's
    sealed bundle, or an older run's, copied in is refused); every file walked through no link
    (walk_held) and yielded open, its digest and size compared once the caller has read it; the
    manifest itself is yielded as the bytes that were checked. SealBrokenError as soon as
    something differs: a file added, gone, changed, not a regular file, or larger than
    MAX_SEALED_FILE_BYTES (refused by name and size before it is hashed)."""
    with held_directory(root) as fd:
        raw = _manifest_bytes(fd, root)
        document = _manifest_document(raw, root)
        problem = signing.document_problem(document, signing.trusted_keys(trusted))
        if problem:
            raise SealBrokenError(f"its seal: {problem}", path=str(root))
        problem = same_run_problem(document, task_id, run_id)
        if problem:
            raise SealBrokenError(problem, path=str(root))
        files = document["seal"]["files"]
        seen: set[str] = set()
        for entry in walk_held(fd, max_entries=MAX_BUNDLE_FILES, where=root):
            name = entry.relative
            if name == MANIFEST_FILE:
                seen.add(name)
                yield replace(entry, size=len(raw or b""), file=io.BytesIO(raw or b""))
                continue
            if name not in files:
                raise SealBrokenError(f"{name} was added after it was sealed", path=str(root))
            if entry.file is None:
                raise SealBrokenError(f"{name} changed after it was sealed", path=str(root))
            if entry.size > MAX_SEALED_FILE_BYTES:
                raise SealBrokenError(f"{name} is larger than 4 GiB", path=str(root))
            # Taken only whole: exactly the size it had when opened, with the sealed digest.
            hashing = HashingReader(entry.file, entry.size)
            yield replace(entry, file=io.BufferedReader(hashing))
            if hashing.drain() != files[name] or hashing.count != entry.size:
                raise SealBrokenError(f"{name} changed after it was sealed", path=str(root))
            seen.add(name)
        for name in sorted({*files, MANIFEST_FILE} - seen):
            raise SealBrokenError(f"{name} is gone since it was sealed", path=str(root))


def copy_sealed(
    root: Path,
    out: Path,
    trusted: tuple[str, ...] = (),
    *,
    task_id: str | None = None,
    run_id: str | None = None,
) -> bytes:
    """The sealed bundle at `root` copied to `out` through sealed_files (each file taken only
    as sealed, its mode bits kept but for write by others); the manifest's bytes as checked.
    SealBrokenError (or InvalidTaskError from the walk) when anything differs."""
    manifest = b""
    for entry in sealed_files(root, trusted, task_id=task_id, run_id=run_id):
        assert entry.file is not None  # sealed_files yields regular files only
        copy = out / entry.relative
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy_bounded(entry.file, entry.size, copy, f"{root}/{entry.relative}")
        copy.chmod(stat.S_IMODE(entry.mode) & 0o755)
        if entry.relative == MANIFEST_FILE:
            manifest = copy.read_bytes()
    return manifest


def _manifest_document(raw: bytes | None, root: Path) -> dict[str, Any]:
    try:
        document = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        raise SealBrokenError(f"{MANIFEST_FILE} is not JSON", path=str(root)) from None
    if not isinstance(document, dict) or not _has_seal(document):
        raise SealBrokenError("it has no seal (no verification accepted it)", path=str(root))
    return document


def same_run_problem(
    document: dict[str, Any], task_id: str | None, run_id: str | None
) -> str | None:
    """Why a signed manifest is not the seal of this run (None when it is): it must name the
    run's task and, in its census, the run's id (another task's sealed bundle, or an older
    run's, copied in is not this run's). An id not given is not compared."""
    sealed_task = document.get("taskId")
    if task_id is not None and sealed_task != task_id:
        return f"its seal is task {printable(str(sealed_task))[:100]}'s, not {task_id}'s"
    census = document.get("census")
    sealed_run = census.get("runId") if isinstance(census, dict) else None
    if run_id is not None and sealed_run != run_id:
        return f"its seal is run {printable(str(sealed_run))[:100]}'s, not this run's ({run_id})"
    return None


def _manifest_bytes(fd: int, root: Path) -> bytes | None:
    try:
        opened = os.open(MANIFEST_FILE, FILE_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SealBrokenError(f"{MANIFEST_FILE}: {exc.strerror}", path=str(root)) from None
    return read_opened(opened, f"{root}/{MANIFEST_FILE}", MAX_EVIDENCE_BYTES)


def has_seal(root: Path) -> bool:
    """Whether the bundle's manifest carries a seal (signed or not: sealed_files says)."""
    try:
        with held_directory(root) as fd:
            raw = _manifest_bytes(fd, root)
        return raw is not None and _has_seal(json.loads(raw))
    except (OSError, ValueError, RecursionError, UsageError, InvalidTaskError):
        return True  # what cannot be read as unsealed is checked as sealed, and refused


def seal_problem(
    root: Path,
    trusted: tuple[str, ...] = (),
    *,
    task_id: str | None = None,
    run_id: str | None = None,
) -> str | None:
    """Why a bundle does not match its seal (None when it does): sealed_files read through."""
    try:
        for _ in sealed_files(root, trusted, task_id=task_id, run_id=run_id):
            pass
    except SealBrokenError as exc:
        return exc.message
    return None


def _has_seal(document: object) -> bool:
    seal = document.get("seal") if isinstance(document, dict) else None
    return isinstance(seal, dict) and isinstance(seal.get("files"), dict)


def manifest_problem(document: object, now: dict[str, str], trusted: signing.Trusted) -> str | None:
    """Why a bundle whose files' digests are `now` (its manifest's own left out) does not match
    the manifest `document` (None when it does): no seal, the first file changed, added or
    removed since it was sealed, or no trusted key signed the manifest. Whether the files are
    on disk (seal_problem) or streamed from an archive (export --check)."""
    if not isinstance(document, dict) or not _has_seal(document):
        return "it has no seal (no verification accepted it)"
    files = document["seal"]["files"]
    for name in sorted(set(files) | set(now)):
        if name not in now:
            return f"{name} is gone since it was sealed"
        if name not in files:
            return f"{name} was added after it was sealed"
        if now[name] != files[name]:
            return f"{name} changed after it was sealed"
    problem = signing.document_problem(document, trusted)
    return f"its seal: {problem}" if problem else None
