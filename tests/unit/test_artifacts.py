"""The artifact store on a shared directory: content addressing, what a changed object gets,
a run's archive published and read back from another host's cache, hostile archives, task
references, and the pool's input as plain JSON (pure, and real files; the S3 backend runs
against a real S3-compatible server in tests/integration/test_fleet.py)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runner.artifacts.address import parse_run_address, parse_store
from runner.artifacts.runs import fetch_run, local_run_dir, publish_run
from runner.artifacts.store import DirectoryStore, StoreError, digest_of, open_store
from runner.base.errors import ExitCode, UsageError
from runner.model.layout import RunLayout


@pytest.fixture
def store(tmp_path: Path) -> DirectoryStore:
    opened = open_store(f"file://{tmp_path}/store", cache=tmp_path / "cache")
    assert isinstance(opened, DirectoryStore)
    return opened


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("/srv/store", "is not a store"),
        ("file://relative/dir", "absolute path"),
        ("file:///srv/../etc", "without . or .."),
        ("s3://Bad_Bucket/x", "is not an S3 bucket name"),
        ("s3://bucket/a b", "each part of the prefix"),
        ("s3://bucket/../x", "each part of the prefix"),
    ],
)
def test_a_bad_store_url_is_a_usage_error_naming_the_option(text: str, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_store(text)
    assert words in caught.value.message and caught.value.field == "--store"
    assert caught.value.exit_code == ExitCode.INVALID


def test_store_urls_and_run_addresses_read_back() -> None:
    assert str(parse_store("s3://my-bucket/fleet/a/")) == "s3://my-bucket/fleet/a"
    url, key = parse_run_address("s3://my-bucket/fleet/runs/pool-1-0007")
    assert (url.location, url.prefix, key) == ("my-bucket", "fleet", "pool-1-0007")
    url, key = parse_run_address("file:///srv/store/runs/x.1")
    assert (url.location, key) == ("/srv/store", "x.1")
    for bad in ("file:///srv/store", "file:///srv/store/runs/..", "s3://b/runs/a/b"):
        with pytest.raises(UsageError):
            parse_run_address(bad)


def test_a_blob_is_written_once_under_its_digest_and_read_back_checked(
    store: DirectoryStore, tmp_path: Path
) -> None:
    digest = store.put_bytes(b"held-out tests")
    assert digest == digest_of(b"held-out tests")
    blob = tmp_path / "store" / "blobs" / "sha256" / digest.removeprefix("sha256:")
    assert blob.read_bytes() == b"held-out tests" and blob.stat().st_mode & 0o077 == 0
    before = blob.stat().st_mtime_ns
    assert store.put_bytes(b"held-out tests") == digest
    assert blob.stat().st_mtime_ns == before  # not written again
    assert store.get_bytes(digest, limit=100) == b"held-out tests"
    assert store.put_json({"b": 1, "a": [2]}) == store.put_json({"a": [2], "b": 1})


def test_a_blob_changed_in_the_store_is_refused_not_read(
    store: DirectoryStore, tmp_path: Path
) -> None:
    """A reader on another host (an empty cache) gets an error, never the changed bytes."""
    digest = store.put_bytes(b"the gold patch")
    blob = tmp_path / "store" / "blobs" / "sha256" / digest.removeprefix("sha256:")
    blob.write_bytes(b"something else")
    other = open_store(store.url, cache=tmp_path / "other-cache")
    with pytest.raises(StoreError, match="other bytes under"):
        other.fetch(digest)
    assert not any((tmp_path / "other-cache" / "blobs").iterdir())  # nothing half-written
    with pytest.raises(StoreError, match="is not in the store"):
        other.fetch(digest_of(b"never put"))


def _archive(root: Path, run_dir_recorded: str) -> Path:
    """A sidecar archive as a worker leaves it: the task, the run with its report and logs."""
    archive = root / "archive"
    run = archive / "run"
    (run / "oracle").mkdir(parents=True)
    (run / "bundle").mkdir()
    (run / "bundle" / "task.toml").write_text("version = '1.0'\n")
    (run / "oracle" / "verifier.log").write_text("PASS tests/test_mul.py::test_mul\n")
    report = {
        "taskId": "calc-mul",
        "verdict": "accepted",
        "runId": "20261203T010203Z-1a2b3c",
        "runDir": run_dir_recorded,
        "bundle": f"{run_dir_recorded}/bundle",
        "stages": {
            "oracle": {"status": "passed", "logs": [f"{run_dir_recorded}/oracle/verifier.log"]}
        },
    }
    (run / "report.json").write_text(json.dumps(report))
    (archive / "report.json").write_text(json.dumps(report))
    (archive / "task").mkdir()
    (archive / "task" / "test.patch").write_text("diff --git a/t b/t\n")
    return archive


def test_a_published_run_is_read_from_another_host_s_cache(
    store: DirectoryStore, tmp_path: Path
) -> None:
    worker = tmp_path / "worker-host"
    archive = _archive(worker, "/var/lib/worker-7/runs/p/verify-0/run")
    record = publish_run(store, "pool-1-0003", archive, {"verdict": "accepted"})
    assert record["run"] == f"file://{tmp_path}/store/runs/pool-1-0003"
    assert record["report"] == digest_of((archive / "report.json").read_bytes())
    other = tmp_path / "other-host"
    run = local_run_dir(record["run"], cache=other)
    assert run.is_relative_to(other) and (run / "oracle" / "verifier.log").is_file()
    report = json.loads((run / "report.json").read_text())
    # The report's paths name the worker's directories; read here, they are this copy's.
    layout = RunLayout(run)
    assert layout.here(report["bundle"], report["runDir"]) == run / "bundle"
    logs = [layout.here(p, report["runDir"]) for p in report["stages"]["oracle"]["logs"]]
    assert logs == [run / "oracle" / "verifier.log"]
    assert layout.here("/etc/passwd", report["runDir"]) == Path("/etc/passwd")
    # A second read is the cache's; a newer attempt under the same key is a new directory.
    assert local_run_dir(record["run"], cache=other) == run
    (archive / "run" / "oracle" / "verifier.log").write_text("attempt 2\n")
    publish_run(store, "pool-1-0003", archive, {"verdict": "accepted"})
    again = local_run_dir(record["run"], cache=other)
    assert again != run and (again / "oracle" / "verifier.log").read_text() == "attempt 2\n"


def test_a_hostile_archive_is_refused_and_leaves_nothing(
    store: DirectoryStore, tmp_path: Path
) -> None:
    """A store someone else writes to may hold an archive with names outside its directory:
    tarfile's data filter refuses it, and nothing is left in the cache."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"owned\n"
        info = tarfile.TarInfo("../../escaped")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    digest = store.put_bytes(buffer.getvalue())
    store.put_record("runs/evil", {"archive": digest, "report": None})
    cache = tmp_path / "reader"
    with pytest.raises(StoreError, match="cannot unpack"):
        fetch_run(store, "evil", cache)
    assert not (tmp_path / "escaped").exists()
    assert [p.name for p in (cache / "runs").iterdir()] == []
    with pytest.raises(StoreError, match="no run missing"):
        fetch_run(store, "missing", cache)


def test_a_store_is_read_in_bounded_bytes_and_never_through_a_link(
    store: DirectoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared directory store is written by other hosts: a record or blob that is a link to
    /dev/zero, or a FIFO, was copied until the reader's disk was full (or hung); a 900 MiB
    record was copied whole before its 1 MiB limit applied; a small gzip bomb unpacked without
    end. Each is refused within its bound, and nothing of it stays in the reader's cache."""
    import os

    from runner.artifacts import runs

    store.put_record("runs/fine", {"archive": "sha256:" + "0" * 64})
    record = store.root / "runs" / "fine.json"
    record.unlink()
    record.symlink_to("/dev/zero")
    with pytest.raises(StoreError, match=r"cannot read runs/fine\.json"):
        store.get_record("runs/fine")
    record.unlink()
    os.mkfifo(record)
    with pytest.raises(StoreError, match="not a regular file"):
        store.get_record("runs/fine")
    record.unlink()
    record.write_bytes(b" " * (2 << 20))  # a record over 1 MiB
    with pytest.raises(StoreError, match="over 1048576 bytes"):
        store.get_record("runs/fine")
    # A blob asked for as a small document: refused at its limit, not fetched whole first.
    big = store.put_bytes(b"x" * (3 << 20))
    reader = open_store(store.url, cache=tmp_path / "reader")
    with pytest.raises(StoreError, match="over 1048576 bytes"):
        reader.get_bytes(big, limit=1 << 20)
    assert not list((tmp_path / "reader" / "blobs").glob("*"))
    # A bomb: a member that inflates past the bound (lowered here to 1 MiB) is not written.
    monkeypatch.setattr(runs, "MAX_UNPACKED_BYTES", 1 << 20)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("run/report.json")
        info.size = 8 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert len(buffer.getvalue()) < 64 * 1024  # 8 MiB of zeros in a few KB
    store.put_record("runs/bomb", {"archive": store.put_bytes(buffer.getvalue())})
    with pytest.raises(StoreError, match="unpacks to over 1048576 bytes"):
        fetch_run(store, "bomb", tmp_path / "bomb-cache")
    assert [p.name for p in (tmp_path / "bomb-cache" / "runs").iterdir()] == []


def test_a_reference_resolves_to_its_task_and_a_bundle_in_the_cache(
    store: DirectoryStore, tmp_path: Path
) -> None:
    from temporalio.exceptions import ApplicationError

    from runner.worker.stored import resolve

    task = {"definition": {"taskId": "t"}, "instruction": "i", "testPatch": "", "goldPatch": ""}
    bundle = store.put_bytes(b"# v2 git bundle\n")
    reference: dict[str, Any] = {"id": "r1", "task": store.put_json(task), "repoBlob": bundle}
    request = resolve(store, reference)
    assert request["task"] == task and "repoBlob" not in request
    assert Path(request["repo"]).read_bytes() == b"# v2 git bundle\n"
    assert Path(request["repo"]).is_relative_to(tmp_path / "cache")
    for bad, words in (
        ({"id": "r", "task": {"inline": 1}}, "field `task`"),
        ({"id": "r", "task": reference["task"], "repoBlob": "md5:1"}, "field `repoBlob`"),
        ({**reference, "repo": "https://example.invalid/x.git"}, "not both"),
    ):
        with pytest.raises(ApplicationError, match=words) as caught:
            resolve(store, bad)
        assert caught.value.type == "InvalidRequest" and caught.value.non_retryable
    with pytest.raises(StoreError):
        resolve(store, {"id": "r", "task": digest_of(b"not there")})


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ([], "the input is not an object"),
        ({"manifest": "abc", "total": 1}, "manifest is not a digest"),
        ({"manifest": "sha256:" + "0" * 64}, "total"),
        ({"manifest": "sha256:" + "0" * 64, "total": 3, "segment": 0}, "segment must be"),
        ({"manifest": "sha256:" + "0" * 64, "total": 3, "pages": {}}, "malformed"),
    ],
)
def test_a_pool_input_that_cannot_run_says_why(raw: Any, words: str) -> None:
    from runner.worker.pool import pool_input

    pool, problem = pool_input(raw)
    assert pool is None and problem is not None and words in problem


def test_a_pool_input_carries_its_cursor_counts_and_pages() -> None:
    from runner.worker.pool import pool_input

    page = "sha256:" + "2" * 64
    raw = {"manifest": "sha256:" + "1" * 64, "total": 1000, "cursor": 250, "pages": [page]}
    pool, problem = pool_input({**raw, "counts": {"accepted": 250}, "concurrency": 8})
    assert problem is None and pool is not None
    assert (pool.cursor, pool.pages, pool.counts["accepted"], pool.concurrency) == (
        250,
        [page],
        250,
        8,
    )
    # What would fail only after every child ran (and be retried without end) is refused.
    for bad in (
        {"counts": {"accepted": "x"}},
        {"counts": {"accepted": True}},
        {"pages": [1, None]},
        {"pages": ["sha256:../../x"]},
        {"manifest": "sha256:../../x"},
    ):
        assert pool_input({**raw, **bad})[0] is None, bad


def test_a_worker_s_published_run_leaves_its_disk_and_a_retry_reads_the_store(
    store: DirectoryStore, tmp_path: Path
) -> None:
    from runner.sidecar.request import JobState, VerificationResponse
    from runner.sidecar.store import Store
    from runner.worker.stored import StoredActivities
    from tests.unit.test_sidecar import make_request

    jobs = Store(tmp_path / "jobs.sqlite3")
    archive = _archive(tmp_path / "worker-host", "/var/lib/worker/runs/p/run")
    jobs.add(make_request(id="pool-1-0001"), source="temporal", archive=archive)
    assert jobs.start("pool-1-0001", run_id="20261203T010203Z-1a2b3c")
    answer = VerificationResponse(id="pool-1-0001", status="done", report={"verdict": "accepted"})
    jobs.finish("pool-1-0001", answer, state=JobState.DONE, verdict="accepted")
    job = jobs.get("pool-1-0001")
    assert job is not None
    activities = StoredActivities(None, store)  # type: ignore[arg-type]
    record = activities._publish(job)
    # The store holds the run: the worker's copy is gone.
    assert not archive.exists() and record["runId"] == "20261203T010203Z-1a2b3c"
    # A retried activity (its answer lost) finds the finished job: the store's record is
    # answered again, never replaced by an empty archive.
    assert activities._publish(job) == record
    run = local_run_dir(record["run"], cache=tmp_path / "reader")
    assert (run / "oracle" / "verifier.log").is_file()
    # --keep-runs: the worker's copy stays.
    kept = _archive(tmp_path / "kept-host", "/var/lib/worker/runs/q/run")
    jobs.add(make_request(id="pool-1-0002"), source="temporal", archive=kept)
    jobs.start("pool-1-0002", run_id="20261203T010204Z-4d5e6f")
    jobs.finish("pool-1-0002", answer, state=JobState.DONE, verdict="accepted")
    second = jobs.get("pool-1-0002")
    assert second is not None
    StoredActivities(None, store, keep_runs=True)._publish(second)  # type: ignore[arg-type]
    assert (kept / "report.json").is_file()
    jobs.close()


def test_the_store_cache_keeps_its_budget_least_recently_used_first_never_in_use(
    store: DirectoryStore, tmp_path: Path
) -> None:
    import os

    from runner.artifacts.cachebound import BoundedBlobs

    reader = open_store(store.url, cache=tmp_path / "worker-cache")
    digests = [store.put_bytes(bytes([n]) * 100) for n in range(4)]
    for age, digest in zip((400, 300, 200, 100), digests, strict=True):
        path = reader.fetch(digest)
        os.utime(path, (path.stat().st_atime, path.stat().st_mtime - age))
    (tmp_path / "worker-cache" / "blobs" / ".fetch.partial").write_bytes(b"x" * 1000)
    # A cached fetch is a use: the oldest becomes the newest.
    reader.fetch(digests[0])
    blobs = BoundedBlobs(tmp_path / "worker-cache" / "blobs", 250)
    with blobs.using([digests[1]]):
        pruned = blobs.prune()
    names = {p.name for p in (tmp_path / "worker-cache" / "blobs").iterdir()}
    hexes = [d.removeprefix("sha256:") for d in digests]
    # 1 is in use and 0 was just used: 2 goes, then 3; the download being written stays.
    assert names == {hexes[0], hexes[1], ".fetch.partial"}
    assert (pruned.removed, pruned.freed_bytes, pruned.kept_bytes) == (2, 200, 200)
    # A removed blob is fetched again from the store, checked.
    assert reader.fetch(digests[2]).read_bytes() == bytes([2]) * 100
    assert BoundedBlobs(tmp_path / "no-cache-yet", 0).prune().removed == 0


def test_gc_keeps_a_host_s_fetched_runs_and_blobs_under_a_budget(
    store: DirectoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from tests.helpers import run_cli_captured

    cache = tmp_path / "host-cache"
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(cache))
    keys = ["pool-1-0001", "pool-1-0002"]
    for index, key in enumerate(keys):
        archive = _archive(tmp_path / f"w{index}", f"/var/lib/w/runs/{key}/run")
        (archive / "run" / "big.log").write_bytes(os.urandom(200_000))
        record = publish_run(store, key, archive, {"verdict": "accepted"})
        run = local_run_dir(record["run"], cache=cache)
        old = run.parent.stat().st_mtime - 1000 * (2 - index)
        os.utime(run.parent, (old, old))
    runs = sorted((cache / "runs").iterdir())
    code, _, err = run_cli_captured("gc")
    assert code == 2 and "--store-cache-budget" in err
    code, _, err = run_cli_captured("gc", "--store-cache-budget", "700KiB", "--dry-run")
    assert code == 0 and "would remove" in err and sorted((cache / "runs").iterdir()) == runs
    code, _, err = run_cli_captured("gc", "--store-cache-budget", "700KiB")
    assert code == 0, err
    # Two runs of about 200 KB unpacked and their archives fetched: the oldest run goes first.
    left = [p for p in (cache / "runs").iterdir() if not p.name.startswith(".")]
    assert len(left) == 1 and (left[0] / "run" / "big.log").is_file()
    # A removed run is fetched again when it is next read.
    again = local_run_dir(f"{store.url.run_address(keys[0])}", cache=cache)
    assert (again / "big.log").stat().st_size == 200_000


@pytest.mark.parametrize(
    ("total", "segment", "words"),
    [
        (1000, 501, "segment 501 is over 500"),
        (5_000_001, 500, "make 10001 pages, over 10000"),
        (20_000, 1, "give a larger segment"),
    ],
)
def test_a_new_pool_that_would_pass_temporal_s_limits_says_why(
    total: int, segment: int, words: str
) -> None:
    from runner.worker.pool import bounds_problem

    problem = bounds_problem(total, segment)
    assert problem is not None and words in problem


def test_a_new_pool_within_the_bounds_runs_and_so_does_an_old_continuation() -> None:
    from runner.worker.pool import DEFAULT_SEGMENT, bounds_problem, pool_input

    assert bounds_problem(1000, DEFAULT_SEGMENT) is None
    assert bounds_problem(5_000_000, 500) is None
    assert bounds_problem(0, 1) is None
    # A pool started before the bounds carries its segment of 5,000 through each continuation.
    raw = {"manifest": "sha256:" + "1" * 64, "total": 20_000, "segment": 5000, "cursor": 5000}
    pool, problem = pool_input(raw)
    assert problem is None and pool is not None and pool.segment == 5000


def test_a_batch_too_large_for_one_pool_is_refused_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    from runner.worker.fleet import run_pool

    store = open_store(f"file://{tmp_path}/store", cache=tmp_path / "cache")
    # The check comes first: nothing about the options, the view or the tasks is read.
    with pytest.raises(UsageError, match="make 10001 pages"):
        run_pool(None, store, [tmp_path] * 2_500_001, None)  # type: ignore[arg-type]
    assert not any((tmp_path / "store").rglob("*"))
