"""A run's archive in and out of the store.

A worker publishes what a verification left (the task it verified, its run directory with the
report, logs and bundle, its events) as one compressed tar blob, and a record `runs/<key>.json`
pointing at it and at the report's own blob. Any host with the store then reads the run: the
archive is fetched once into the local cache (keyed by its digest, so a newer attempt of the same
key is a new directory and an old one is never stale) and unpacked with tarfile's `data` filter
(no absolute names, no `..`, no links out, no devices; PEP 706).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.artifacts.address import DIGEST, RUN_KEY, RUNS, parse_run_address
from runner.artifacts.store import ArtifactStore, StoreError, open_store
from runner.base.safeio import private_dir
from runner.model.layout import REPORT_FILE

RUN_DIR = "run"  # the run directory inside a sidecar's archive (runner.sidecar.verification)


def pack(directory: Path, destination: Path) -> None:
    """`directory`'s regular files and directories as a gzip tar at `destination` (links,
    sockets and the like are left out: a run directory has none worth keeping)."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if not (info.isfile() or info.isdir()):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(destination, "w:gz", compresslevel=6) as tar:
        for path in sorted(directory.iterdir()):
            tar.add(path, arcname=path.name, filter=keep)


def publish_run(
    store: ArtifactStore, key: str, archive: Path, summary: dict[str, Any]
) -> dict[str, Any]:
    """Put `archive` (a sidecar archive directory) into the store under run `key`; the record
    written (`summary` with the archive's and the report's digests and the run's address)."""
    if not RUN_KEY.fullmatch(key):
        raise StoreError(f"{key!r} is not a run key")
    with tempfile.TemporaryDirectory(prefix="publish.") as tmp:
        packed = Path(tmp) / "archive.tar.gz"
        pack(archive, packed)
        archive_digest = store.put_file(packed)
    report = archive / REPORT_FILE
    record = {
        **summary,
        "key": key,
        "run": store.url.run_address(key),
        "archive": archive_digest,
        "report": store.put_file(report) if report.is_file() else None,
    }
    store.put_record(f"{RUNS}/{key}", record)
    return record


def run_record(store: ArtifactStore, key: str) -> dict[str, Any]:
    record = store.get_record(f"{RUNS}/{key}")
    if record is None:
        raise StoreError(f"no run {key} in the store {store.url}")
    archive = record.get("archive")
    if not isinstance(archive, str) or not DIGEST.fullmatch(archive):
        raise StoreError(f"{store.url.run_address(key)}: its record names no archive")
    return record


REQUEST_FILE = "request.json"  # the request a sidecar's archive holds (its task, its id)
MAX_REQUEST_BYTES = 256 * 1024 * 1024


def published_request(store: ArtifactStore, key: str) -> tuple[bytes, dict[str, Any]] | None:
    """The request a published run verified (request.json from its archive, read alone and
    bounded) and the run's record; None when the store holds no such run or its archive has
    no readable request (a fix is then checked against nothing: refused)."""
    try:
        record = run_record(store, key)
        blob = store.fetch(str(record["archive"]))
    except StoreError:
        return None
    try:
        with tarfile.open(blob, "r:gz") as tar:
            for member in tar:
                if member.name.lstrip("./") != REQUEST_FILE:
                    continue
                if not member.isfile() or member.size > MAX_REQUEST_BYTES:
                    return None
                handle = tar.extractfile(member)
                return (handle.read(), record) if handle is not None else None
    except (tarfile.TarError, OSError, EOFError):
        return None
    return None


# What one run archive may unpack to: a gzip bomb (2 MB that inflate to gigabytes) or an archive
# of a million empty files stops here, not when the reader's disk is full.
MAX_UNPACKED_BYTES = 32 << 30
MAX_UNPACKED_MEMBERS = 200_000


def _bounded_filter(
    where: str,
) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None]:
    """tarfile's `data` filter (PEP 706: no absolute names, no `..`, no links out, no devices)
    that also counts: StoreError past MAX_UNPACKED_MEMBERS members or MAX_UNPACKED_BYTES of
    them, before the member that passes the bound is written."""
    seen = {"members": 0, "bytes": 0}

    def bounded(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        seen["members"] += 1
        seen["bytes"] += max(0, member.size)
        if seen["members"] > MAX_UNPACKED_MEMBERS:
            raise StoreError(f"{where}: its archive holds over {MAX_UNPACKED_MEMBERS} members")
        if seen["bytes"] > MAX_UNPACKED_BYTES:
            raise StoreError(f"{where}: its archive unpacks to over {MAX_UNPACKED_BYTES} bytes")
        return tarfile.data_filter(member, path)

    return bounded


def fetch_run(store: ArtifactStore, key: str, cache: Path) -> Path:
    """The run `key` unpacked on this host: its archive directory (in `cache`)."""
    record = run_record(store, key)
    digest = str(record["archive"])
    target = cache / "runs" / digest.removeprefix("sha256:")
    if (target / ".complete").is_file():
        with contextlib.suppress(OSError):
            os.utime(target)  # recently used: the last `gc --store-cache-budget` removes
        return target
    blob = store.fetch(digest)
    private_dir(target.parent)
    staged = Path(tempfile.mkdtemp(prefix=".unpack.", dir=target.parent))
    try:
        with tarfile.open(blob, "r:gz") as tar:
            tar.extractall(staged, filter=_bounded_filter(store.url.run_address(key)))
        (staged / ".complete").write_text(key + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)
    except (tarfile.TarError, OSError) as exc:
        raise StoreError(f"cannot unpack {store.url.run_address(key)}: {exc}") from None
    finally:
        if staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    return target


def local_run_dir(text: str, *, cache: Path, field: str = "RUN_DIR") -> Path:
    """A run's store address (`<store>/runs/<key>`) as a directory on this host: the run
    directory of its archive (the archive itself when the run left none, as a reused answer)."""
    url, key = parse_run_address(text, field=field)
    store = open_store(url, cache=cache / "store", field=field)
    archive = fetch_run(store, key, cache)
    run = archive / RUN_DIR
    return run if run.is_dir() else archive
