"""`export --check`: an export archive verified as it streams (runner.present.export writes it):
every member bounded and named inside the archive, each task's inner archive opened and checked
the same way, every digest compared, the manifest's signature and each bundle's seal (its
files' digests, its signature) verified with the keys this host trusts and those given."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zlib
from pathlib import Path
from typing import IO, Any

from runner.base.errors import InvalidTaskError
from runner.base.treeread import HashingReader
from runner.base.validation import check_task_id
from runner.compile import signing
from runner.compile.seal import manifest_problem, same_run_problem
from runner.model.layout import MANIFEST_FILE
from runner.present.export import (
    MANIFEST,
    MAX_MEMBER_BYTES,
    manifest_digest,
)

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_MEMBERS = 100_000
_CHUNK = 1024 * 1024


# A header tarfile reads whole before any member's rule applies: a GNU long name or a pax
# header. Real ones are a few hundred bytes; a 9 MB archive's 2 GiB long name cost 4 GB.
MAX_HEADER_BYTES = 1024 * 1024


class BoundedHeaders(tarfile.TarInfo):
    """tarfile's headers, but a long-name or pax header over MAX_HEADER_BYTES is refused
    before it is read (`tarfile.open(..., tarinfo=BoundedHeaders)`)."""

    def _proc_gnulong(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.size > MAX_HEADER_BYTES:
            raise tarfile.HeaderError(f"a long-name header of {self.size} bytes")
        found: tarfile.TarInfo = super()._proc_gnulong(tar)  # type: ignore[misc]
        return found

    def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.size > MAX_HEADER_BYTES:
            raise tarfile.HeaderError(f"a pax header of {self.size} bytes")
        found: tarfile.TarInfo = super()._proc_pax(tar)  # type: ignore[misc]
        return found


def member_problem(member: tarfile.TarInfo, prefix: str = "") -> str | None:
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or "\0" in name:
        return f"{name[:200]!r} is an absolute or escaping path"
    if prefix and parts[0] != prefix:
        return f"{name[:200]!r} is outside {prefix}/"
    if not (member.isfile() or member.isdir()):
        return f"{name[:200]!r} is a link or a special file"
    if member.size > MAX_MEMBER_BYTES or member.size < 0:
        return f"{name[:200]!r} is larger than 4 GiB, or of a negative size"
    return None


def _check_bundle(
    stream: IO[bytes], task_id: str, run_id: str | None, where: str, trusted: dict[str, Any]
) -> None:
    """A task's inner archive: streamed, every member inside `<taskId>/`, regular files and
    directories only, each bounded; and its seal: every file's digest as its manifest records
    it, the manifest signed by a trusted key, naming the task and run the listing says."""
    count = 0
    files: dict[str, str] = {}
    sealed: bytes | None = None
    with tarfile.open(fileobj=stream, mode="r|gz", tarinfo=BoundedHeaders) as inner:
        for member in inner:
            count += 1
            if count > MAX_MEMBERS:
                raise InvalidTaskError(f"{where} holds more than {MAX_MEMBERS} entries")
            problem = member_problem(member, prefix=task_id)
            if problem is not None:
                raise InvalidTaskError(f"{where}: {problem}")
            if member.isfile():
                handle = inner.extractfile(member)
                assert handle is not None
                relative = member.name[len(task_id) + 1 :]
                if relative == MANIFEST_FILE:
                    if member.size > MAX_MANIFEST_BYTES:
                        raise InvalidTaskError(f"{where}: its {MANIFEST_FILE} is too large")
                    sealed = handle.read()
                    continue
                sha = hashlib.sha256()
                while chunk := handle.read(_CHUNK):
                    sha.update(chunk)
                files[relative] = sha.hexdigest()
    try:
        document = json.loads(sealed) if sealed is not None else None
    except (UnicodeDecodeError, ValueError):
        document = None
    problem = manifest_problem(document, files, trusted)
    if problem is None and isinstance(document, dict):
        problem = same_run_problem(document, task_id, run_id)
    if problem is not None:
        raise InvalidTaskError(f"{where}: the bundle does not match its seal: {problem[:400]}")


def check(archive: Path, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every digest of an export archive, streamed: each member bounded, names checked, and
    each task's inner archive opened and checked the same way. Raises InvalidTaskError with one
    line on anything else (a truncated or malformed archive, a manifest of another shape)."""
    where = str(archive)
    trusted = signing.trusted_keys(keys)
    try:
        return _check(archive, trusted)
    except InvalidTaskError as exc:
        raise InvalidTaskError(exc.message, path=where) from None
    except (OSError, EOFError, tarfile.TarError, zlib.error, ValueError) as exc:
        raise InvalidTaskError(
            f"not a readable export archive: {str(exc)[:200] or type(exc).__name__}", path=where
        ) from None


def _check(archive: Path, trusted: dict[str, Any]) -> dict[str, Any]:
    manifest: dict[str, Any] | None = None
    digests: dict[str, str] = {}
    ids: dict[str, str] = {}  # file -> task id, once the manifest is read
    runs: dict[str, object] = {}  # file -> the run id the listing names
    count = 0
    with tarfile.open(archive, mode="r|gz", tarinfo=BoundedHeaders) as tar:
        for member in tar:
            count += 1
            if count > MAX_MEMBERS:
                raise InvalidTaskError(f"holds more than {MAX_MEMBERS} entries")
            problem = member_problem(member)
            if problem is not None:
                raise InvalidTaskError(problem)
            if member.isdir():
                continue
            if member.name in digests:
                raise InvalidTaskError(f"{member.name} is in the archive twice")
            handle = tar.extractfile(member)
            assert handle is not None
            if member.name == MANIFEST:
                if member.size > MAX_MANIFEST_BYTES:
                    raise InvalidTaskError("manifest.json is larger than 16 MiB")
                manifest = _manifest(handle.read(), trusted)
                ids = {task["file"]: task["taskId"] for task in manifest["tasks"]}
                runs = {task["file"]: task.get("runId") for task in manifest["tasks"]}
                digests[member.name] = ""
                continue
            if not member.name.startswith("tasks/") or not member.name.endswith(".tar.gz"):
                raise InvalidTaskError(f"{member.name[:200]!r} is not a task archive")
            hashing = HashingReader(handle)
            task_id = ids.get(member.name) or member.name[len("tasks/") : -len(".tar.gz")]
            run_id = runs.get(member.name)
            _check_bundle(
                io.BufferedReader(hashing, _CHUNK),
                task_id,
                run_id if isinstance(run_id, str) else None,
                member.name,
                trusted,
            )
            digests[member.name] = hashing.drain()
    if manifest is None:
        raise InvalidTaskError("has no manifest.json")
    for task in manifest["tasks"]:
        name = task["file"]
        if name not in digests:
            raise InvalidTaskError(f"{name} is missing")
        if digests[name] != task["sha256"]:
            raise InvalidTaskError(f"{name}: digest mismatch")
    extra = sorted(set(digests) - {MANIFEST} - {t["file"] for t in manifest["tasks"]})
    if extra:
        raise InvalidTaskError(f"{extra[0]} is not in manifest.json")
    return manifest


def read_manifest(handle: IO[bytes], keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """An archive's manifest.json from `handle` (at most MAX_MANIFEST_BYTES), checked as
    `check` checks it, with the keys this host trusts and `keys`."""
    data = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise InvalidTaskError("manifest.json is larger than 16 MiB")
    return _manifest(data, signing.trusted_keys(keys))


def _manifest(data: bytes, trusted: dict[str, Any]) -> dict[str, Any]:
    """manifest.json, its shape checked: what the rest of the check reads is there."""
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidTaskError(f"manifest.json is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("tasks"), list):
        raise InvalidTaskError("manifest.json has no tasks list")
    if manifest.get("digest") != manifest_digest(manifest):
        raise InvalidTaskError("manifest.json's digest does not match its content")
    problem = signing.document_problem(manifest, trusted)
    if problem is not None:
        raise InvalidTaskError(f"manifest.json: {problem}")
    for index, task in enumerate(manifest["tasks"]):
        task_id = task.get("taskId") if isinstance(task, dict) else None
        if not isinstance(task_id, str) or check_task_id(task_id) is not None:
            raise InvalidTaskError(f"manifest.json: tasks[{index}].taskId is not a task id")
        if task.get("file") != f"tasks/{task_id}.tar.gz" or not isinstance(task.get("sha256"), str):
            raise InvalidTaskError(f"manifest.json: tasks[{index}] names another file or no digest")
    return manifest
