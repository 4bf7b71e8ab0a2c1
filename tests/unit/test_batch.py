"""The many-task commands without Docker: engine specs, JUnit XML, the Markdown summary's
limit, exit codes, the matrix (with a real git history), the cache budget's choice, and an
export's determinism and check."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.base.errors import ExitCode, InvalidTaskError, UsageError
from runner.batch.model import BatchResult, EngineSpec, TaskOutcome, junit_xml, markdown
from runner.compile.taskdir import load_authored_task
from runner.engine.cachebudget import (
    choose_removals,
    collect,
    footprint,
    load_use,
    record_use,
)
from runner.present.export import Accepted, export
from runner.present.exportcheck import check
from tests.helpers import bash_task, compiled, git

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "name", "url", "capacity"),
    [
        (
            "unix:///var/run/docker.sock",
            "unix:///var/run/docker.sock",
            "unix:///var/run/docker.sock",
            3,
        ),
        ("tcp://10.0.0.2:2376=4", "tcp://10.0.0.2:2376", "tcp://10.0.0.2:2376", 4),
        ("ssh://ci@build-host=2", "ssh://ci@build-host", "ssh://ci@build-host", 2),
        ("remote-ctx", "remote-ctx", None, 3),
    ],
)
def test_engine_specs(text: str, name: str, url: str | None, capacity: int) -> None:
    spec = EngineSpec.parse(text, default_capacity=3)
    assert (spec.name, spec.url, spec.capacity) == (name, url, capacity)


@pytest.mark.parametrize("bad", ["x=0", "x=65", "x=two", "bad name", "ftp://x", "=3"])
def test_bad_engine_specs_name_the_option(bad: str) -> None:
    with pytest.raises(UsageError) as caught:
        EngineSpec.parse(bad, default_capacity=1)
    assert caught.value.field == "--engine"


def outcome(task_id: str, verdict: str, **stages: str) -> TaskOutcome:
    report = {
        "stages": {
            n: {"status": s, "detail": f"{n} {s}", "seconds": 1.0} for n, s in stages.items()
        }
    }
    return TaskOutcome(
        target=f"/t/{task_id}",
        task_id=task_id,
        verdict=verdict,
        reason=f"why {task_id} & <more>",
        seconds=2.0,
        report=report,
    )


def test_exit_codes() -> None:
    assert BatchResult(tasks=[outcome("a", "accepted")]).exit_code is ExitCode.ACCEPTED
    infra = BatchResult(tasks=[outcome("a", "accepted"), outcome("b", "infrastructure_failed")])
    assert infra.exit_code is ExitCode.INFRASTRUCTURE
    red = BatchResult(tasks=[outcome("b", "infrastructure_failed"), outcome("c", "rejected")])
    assert red.exit_code is ExitCode.REJECTED
    assert BatchResult(tasks=[outcome("d", "invalid")]).exit_code is ExitCode.REJECTED


def test_junit_has_a_case_per_task_and_per_gate() -> None:
    result = BatchResult(
        tasks=[
            outcome("good", "accepted", build="passed", nop="passed"),
            outcome("red", "rejected", build="passed", nop="failed", oracle="skipped"),
            outcome("down", "infrastructure_failed", build="error"),
        ],
        seconds=9.0,
    )
    root = ET.fromstring(junit_xml(result))
    tasks = root.find("testsuite[@name='selfbench.tasks']")
    assert tasks is not None
    assert (tasks.get("tests"), tasks.get("failures"), tasks.get("errors")) == ("3", "1", "1")
    failure = root.find("testsuite[@name='selfbench.red']/testcase[@name='nop']/failure")
    assert failure is not None and failure.get("message") == "nop failed"
    assert (
        root.find("testsuite[@name='selfbench.red']/testcase[@name='oracle']/skipped") is not None
    )
    assert root.find("testsuite[@name='selfbench.down']/testcase[@name='build']/error") is not None
    case = tasks.find("testcase[@name='red']/failure")
    assert case is not None and case.get("message") == "why red & <more>"


def test_the_summary_stays_under_its_limit_with_a_note() -> None:
    result = BatchResult(tasks=[outcome(f"t{i:04d}", "rejected") for i in range(2000)])
    text = markdown(result, limit=20_000)
    assert len(text.encode()) <= 20_000
    assert "more task(s) not shown" in text
    full = markdown(BatchResult(tasks=[outcome("a|b", "accepted")]))
    assert "a\\|b" in full and "not shown" not in full


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def test_matrix_finds_tasks_shards_and_follows_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for index in range(5):
        task = repo / "tasks" / f"group-{index % 2}" / f"t{index}"
        task.mkdir(parents=True)
        (task / "definition.json").write_text(json.dumps({"taskId": f"task-{index}"}))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "tasks" / "group-1" / "t3" / "gold.patch").write_text("x")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change t3")
    listed = json.loads(run_cli("matrix", "tasks", cwd=repo).stdout)
    assert [e["name"] for e in listed["include"]] == [f"task-{i}" for i in (0, 2, 4, 1, 3)]
    sharded = json.loads(run_cli("matrix", "tasks", "--shard-size", "2", cwd=repo).stdout)
    assert sharded["count"] == 5 and [len(s["include"]) for s in sharded["shards"]] == [2, 2, 1]
    # --legs: one matrix whatever the count, legs sharing tasks in order past the limit.
    legs = json.loads(run_cli("matrix", "tasks", "--legs", "2", cwd=repo).stdout)
    assert legs["count"] == 5
    assert [(leg["name"], leg["tasks"].splitlines()) for leg in legs["include"]] == [
        ("task-0 (+2 more)", ["tasks/group-0/t0", "tasks/group-0/t2", "tasks/group-0/t4"]),
        ("task-1 (+1 more)", ["tasks/group-1/t1", "tasks/group-1/t3"]),
    ]
    one_each = json.loads(run_cli("matrix", "tasks", "--legs", "256", cwd=repo).stdout)
    assert [leg["tasks"] for leg in one_each["include"]] == [e["task"] for e in listed["include"]]
    changed = json.loads(run_cli("matrix", "tasks", "--changed-since", base, cwd=repo).stdout)
    assert changed == {"include": [{"task": "tasks/group-1/t3", "name": "task-3"}]}
    bad = run_cli("matrix", "tasks", "--changed-since", "--output=x", cwd=repo)
    assert bad.returncode == 2
    # A fixed task keeps its id: the two legs are still named apart, by their directories.
    fixed = repo / "tasks" / "group-1" / "t3-r2"
    fixed.mkdir()
    (fixed / "definition.json").write_text(json.dumps({"taskId": "task-3"}))
    both = json.loads(run_cli("matrix", "tasks/group-1", cwd=repo).stdout)["include"]
    assert [e["name"] for e in both] == [
        "task-1",
        "task-3 (tasks/group-1/t3)",
        "task-3 (tasks/group-1/t3-r2)",
    ]


@dataclass(frozen=True)
class Img:
    id: str
    tags: tuple[str, ...]
    layers: tuple[tuple[str, int], ...]
    created: float
    in_use: bool = False


def test_the_budget_removes_the_least_recently_used_and_spares_images_in_use(
    tmp_path: Path,
) -> None:
    shared = ("setup", 100)
    images = [
        Img("a", ("t/a:agent",), (shared, ("a1", 10)), created=1),
        Img("v", ("t/a:verifier",), (shared, ("v1", 10)), created=1),
        Img("b", ("t/b:agent",), (("b0", 50), ("b1", 5)), created=2, in_use=True),
        Img("c", ("t/c:agent",), (("c0", 40),), created=3),
    ]
    assert footprint(images) == 100 + 10 + 10 + 55 + 40
    record_use(["t/a:agent", "t/a:verifier"], root=tmp_path)
    records = load_use(tmp_path)
    chosen, freed, kept = choose_removals(images, 100, records)
    # a's images were used just now: c goes first, b is in use, then a's pair.
    assert [i.id for i in chosen] == ["c", "a", "v"]
    assert (freed, kept) == (160, 55)
    chosen, freed, _ = choose_removals(images, 1000, records)
    assert chosen == [] and freed == 0


def test_the_budget_keeps_what_a_running_verification_used_since_it_started(
    tmp_path: Path,
) -> None:
    images = [
        Img("old", ("t/old:agent",), (("o", 100),), created=1),
        Img("run", ("t/run:agent",), (("r", 100),), created=1),
    ]
    record_use(["t/old:agent"], root=tmp_path)
    started = time.time()
    time.sleep(0.01)
    record_use(["t/run:agent"], root=tmp_path)  # a verification running beside the pass
    chosen, _, kept = choose_removals(images, 0, load_use(tmp_path), protect_since=started)
    assert [i.id for i in chosen] == ["old"] and kept == 100


class _Engine:
    """An engine whose removal of one image lets a verification record another meanwhile."""

    def __init__(self, images: list[Img], root: Path) -> None:
        self.images, self.root = images, root
        self.removed: list[str] = []

    def task_images(self) -> list[Img]:
        return list(self.images)

    def remove_task_image(self, image: Img) -> bool:
        self.removed.append(image.id)
        if image.id == "a":
            # A verification (another process) started after the pass began records "b": it
            # waits for the lock this removal holds, then records before the pass looks at
            # "b". Written here directly: this process holds the lock.
            records = load_use(self.root)
            records["t/b:agent"] = time.time()
            (self.root / "image-use.json").write_text(json.dumps(records))
        return True


def test_an_image_recorded_while_the_budget_runs_is_not_removed(tmp_path: Path) -> None:
    images = [
        Img("a", ("t/a:agent",), (("a", 100),), created=1),
        Img("b", ("t/b:agent",), (("b", 100),), created=2),
        Img("c", ("t/c:agent",), (("c", 100),), created=3),
    ]
    since = time.time()
    engine = _Engine(images, tmp_path)
    result = collect(engine, 0, protect_since=since, root=tmp_path)
    assert engine.removed == ["a", "c"]
    assert result.removed == ["t/a:agent", "t/c:agent"] and result.kept_bytes == 100
    dry = _Engine(images, tmp_path)
    assert collect(dry, 0, dry_run=True, root=tmp_path).removed and dry.removed == []


def test_a_running_verification_s_hold_keeps_its_images_from_any_collection(
    tmp_path: Path,
) -> None:
    """A verification of another process (a second worker on the engine, a verify by hand)
    holds its images from its first build to its end: gc or another service's budget leaves
    them, and a hold of a process that is gone holds nothing."""
    import json

    from runner.engine.cachebudget import held_since, release

    images = [
        Img("idle", ("t/idle:agent",), (("i", 100),), created=1),
        Img("held", ("t/held:agent",), (("h", 100),), created=1),
    ]
    record_use(["t/idle:agent"], root=tmp_path)
    time.sleep(0.01)
    record_use(["t/held:agent"], root=tmp_path, hold="run-1")
    assert held_since(tmp_path) is not None
    engine = _Engine(images, tmp_path)
    assert collect(engine, 0, root=tmp_path).removed == ["t/idle:agent"]
    # A hold whose process is gone (a pid with another start, a SIGKILLed verify) is ignored.
    holds = json.loads((tmp_path / "image-holds.json").read_text())
    holds["run-1"]["start"] = -1
    (tmp_path / "image-holds.json").write_text(json.dumps(holds))
    assert held_since(tmp_path) is None
    record_use(["t/held:agent"], root=tmp_path, hold="run-2")
    release("run-2", root=tmp_path)
    assert held_since(tmp_path) is None
    assert json.loads((tmp_path / "image-holds.json").read_text()) == {}
    assert collect(_Engine(images, tmp_path), 0, root=tmp_path, protect_since=None).removed


class _Api:
    """docker's API client as task_images uses it: one image removed after the listing."""

    def __init__(self) -> None:
        self.histories: list[str] = []

    def images(self, filters: Any) -> list[dict[str, Any]]:
        labels = {"org.selfbench.kind": "agent", "org.selfbench.from-id": "sha256:base"}
        return [
            {"Id": f"sha256:{n}", "RepoTags": [f"t/{n}:agent-1"], "Labels": labels, "Created": 1}
            for n in ("kept", "gone")
        ]

    def containers(self, all: bool) -> list[dict[str, Any]]:
        return []

    def history(self, image_id: str) -> list[dict[str, Any]]:
        from docker.errors import NotFound

        self.histories.append(image_id)
        if image_id.endswith("gone"):
            raise NotFound("No such image")
        return [{"Id": image_id, "Size": 7}, {"Id": "sha256:base", "Size": 100}]


def test_an_image_removed_after_the_listing_is_skipped_and_histories_are_read_once() -> None:
    from runner.engine.images import task_images

    api = _Api()
    first = task_images(api)  # type: ignore[arg-type]
    assert [(i.id, i.layers) for i in first] == [("sha256:kept", (("sha256:kept", 7),))]
    task_images(api)  # type: ignore[arg-type]
    # An image id names its history: read once; a gone one is asked again (it may be back).
    assert api.histories == ["sha256:kept", "sha256:gone", "sha256:gone"]


def sealed_bundle(task: Path, out: Path) -> Path:
    """The task compiled and sealed at `out`, as an accepted verification leaves its bundle."""
    from runner.compile.seal import seal
    from tests.unit.test_census import exit_code_census

    bundle = compiled(load_authored_task(task), repo=None, out=out.parent / f".{out.name}-compiled")
    return seal(bundle, exit_code_census(), out)


def test_export_is_deterministic_and_checked(tmp_path: Path) -> None:
    task = bash_task(tmp_path, name="exp-task")
    bundle = sealed_bundle(task.directory, tmp_path / "bundle")
    run = Accepted(run_dir=tmp_path, bundle=bundle, task_id="exp-task", run_id="r1")
    one, two = tmp_path / "one.tar.gz", tmp_path / "two.tar.gz"
    manifest = export([run], one)
    export([run], two)
    assert one.read_bytes() == two.read_bytes()
    assert manifest["tasks"][0]["difficulty"] == "easy"
    assert check(one)["digest"] == manifest["digest"]
    # Tampering with a task archive is caught.
    tampered = tmp_path / "tampered.tar.gz"
    with tarfile.open(one) as source, tarfile.open(tampered, "w:gz") as target:
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name.startswith("tasks/") and data is not None:
                data = data[:-1] + bytes([data[-1] ^ 1])
            if data is None:
                target.addfile(member)
            else:
                member.size = len(data)
                import io

                target.addfile(member, io.BytesIO(data))
    with pytest.raises(InvalidTaskError, match="digest mismatch"):
        check(tampered)
    with pytest.raises(UsageError, match="given twice"):
        export([run, run], tmp_path / "twice.tar.gz")


def _batch_dir(tmp_path: Path) -> tuple[Path, Path]:
    """A batch directory as `batch` leaves it: one accepted task's run (its report and bundle
    under runs/<n>-<name>/attempt-1) and a rejected one; batch.json lists both."""
    task = bash_task(tmp_path, name="exp-task")
    out = tmp_path / "logs" / "batch-20261202T000000Z"
    run_dir = out / "runs" / "0000-exp-task" / "attempt-1"
    bundle = sealed_bundle(task.directory, run_dir / "bundle")
    (run_dir / "report.json").write_text(
        json.dumps({"verdict": "accepted", "taskId": "exp-task", "runId": "r1", "bundle": ""})
    )
    assert bundle == run_dir / "bundle"
    result = BatchResult(
        tasks=[
            TaskOutcome(
                target=str(task.directory),
                task_id="exp-task",
                verdict="accepted",
                run_dir=str(run_dir),
            ),
            TaskOutcome(
                target="elsewhere",
                task_id="red-task",
                verdict="rejected",
                run_dir=str(out / "runs" / "0001-red" / "attempt-1"),
            ),
        ]
    )
    (out / "batch.json").write_text(result.to_json())
    return task.directory, out


def test_export_streams_a_large_bundle_in_bounded_memory(tmp_path: Path) -> None:
    """A bundle's repository snapshot can be gigabytes: export held each bundle's archive,
    and the whole export, in memory (a MemoryError near 2 GB). Now each file streams from
    disk to the archive; Python's heap stays far below the file (a 64 MiB one here)."""
    import tracemalloc

    from runner.compile.seal import seal
    from tests.unit.test_census import exit_code_census

    task = bash_task(tmp_path, name="big-task")
    compiled_bundle = compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "c")
    with (compiled_bundle / "environment" / "big.bin").open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: no disk is spent on it
    bundle = seal(compiled_bundle, exit_code_census(), tmp_path / "bundle")
    run = Accepted(run_dir=tmp_path, bundle=bundle, task_id="big-task", run_id="r1")
    tracemalloc.start()
    try:
        manifest = export([run], tmp_path / "big.tar.gz")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, peak
    assert check(tmp_path / "big.tar.gz")["digest"] == manifest["digest"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".big.tar.gz")] == []


def test_export_takes_every_accepted_task_of_a_batch_json(tmp_path: Path) -> None:
    from runner.present.export import batch_runs

    _, out = _batch_dir(tmp_path)
    runs = batch_runs(out / "batch.json")
    assert [r.task_id for r in runs.accepted] == ["exp-task"]
    assert runs.left == ["red-task: rejected"]
    manifest = export(runs.accepted, tmp_path / "a.tar.gz")
    assert [t["taskId"] for t in manifest["tasks"]] == ["exp-task"]
    # The batch directory moved (a CI artifact unpacked elsewhere): its runs are still found.
    moved = tmp_path / "moved"
    out.rename(moved)
    assert batch_runs(moved / "batch.json").accepted[0].run_dir == (
        moved / "runs" / "0000-exp-task" / "attempt-1"
    )


def test_export_of_run_directories_skips_the_red_ones_as_a_batch_does(tmp_path: Path) -> None:
    """One green and one red run directory: the green one is exported, the red one named (as
    `export batch.json` does); only red ones: nothing written, exit 2."""
    _, out = _batch_dir(tmp_path)
    green = out / "runs" / "0000-exp-task" / "attempt-1"
    red = tmp_path / "red-run"
    red.mkdir()
    (red / "report.json").write_text(
        json.dumps({"verdict": "rejected", "taskId": "red-task", "reason": "nop:\n red"})
    )
    archive = tmp_path / "both.tar.gz"
    done = run_cli("export", str(green), str(red), "-o", str(archive))
    assert done.returncode == 0, done.stderr
    assert f"{red}: not exported, red-task: rejected (nop: red)" in done.stderr
    assert done.stdout.startswith(f"{archive}: 1 task(s)")
    assert [t["taskId"] for t in check(archive)["tasks"]] == ["exp-task"]
    alone = run_cli("export", str(red), "-o", str(tmp_path / "none.tar.gz"))
    assert alone.returncode == 2
    assert "no accepted run among the inputs (1 not accepted" in alone.stderr
    assert not (tmp_path / "none.tar.gz").exists()


@pytest.mark.parametrize(
    ("text", "words", "field"),
    [
        ("not json", "not a readable batch.json", None),
        ('{"runs": []}', "no tasks list", "tasks"),
        ('{"tasks": [1]}', "is not an object", "tasks[0]"),
        ('{"tasks": [{"verdict": "accepted"}]}', "no runDir", "tasks[0]"),
        ('{"tasks": [{"verdict": "rejected", "taskId": "t"}]}', "no accepted task", None),
    ],
)
def test_a_bad_batch_json_names_the_file_and_field(
    tmp_path: Path, text: str, words: str, field: str | None
) -> None:
    from runner.present.export import batch_runs

    path = tmp_path / "batch.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=words) as caught:
        batch_runs(path)
    assert caught.value.exit_code == ExitCode.INVALID
    line = caught.value.one_line()
    assert line.startswith(str(path)) and (field is None or f"field `{field}`" in line), line


def test_export_finds_a_task_s_run_inside_a_batch_under_logs(tmp_path: Path) -> None:
    """`batch --logs X` then `export TASK --logs X`: the task's run is the batch's."""
    task, out = _batch_dir(tmp_path)
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "export",
            str(task),
            "--logs",
            str(out.parent),
            "-o",
            str(tmp_path / "t.tar.gz"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    assert "1 task(s)" in exported.stdout
    by_batch = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "export",
            str(out / "batch.json"),
            "-o",
            str(tmp_path / "b.tar.gz"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert by_batch.returncode == 0, by_batch.stderr
    assert "not exported, red-task: rejected" in by_batch.stderr
    assert (tmp_path / "t.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _signed_manifest(tasks: list[dict[str, str]]) -> bytes:
    from runner.compile.signing import sign_document
    from runner.present.export import manifest_digest

    manifest: dict[str, object] = {"schemaVersion": 1, "runnerVersion": "x", "tasks": tasks}
    manifest["digest"] = manifest_digest(manifest)
    sign_document(manifest)
    return json.dumps(manifest).encode()


def _sealed_inner(task_id: str, files: dict[str, bytes]) -> bytes:
    """A task archive whose bundle's manifest seals `files` with this host's key."""
    from runner.compile.signing import SIGNATURE, payload, signer

    seal: dict[str, object] = {
        "taskId": task_id,
        "seal": {"files": {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}},
    }
    seal[SIGNATURE] = signer().sign(payload(seal))
    members: list[tuple[tarfile.TarInfo, bytes | None]] = [
        (tarfile.TarInfo(f"{task_id}/{n}"), d) for n, d in files.items()
    ]
    members.append(
        (tarfile.TarInfo(f"{task_id}/.selfbench-manifest.json"), json.dumps(seal).encode())
    )
    return _inner(members)


def _inner(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.mark.parametrize(
    ("inner_member", "words"),
    [
        ((tarfile.TarInfo("t/../../etc/cron.d/x"), b"x"), "escaping path"),
        ((tarfile.TarInfo("/etc/passwd"), b"x"), "escaping path"),
        ((_link("t/link", "/etc/shadow"), None), "a link or a special file"),
        ((_link("t/hard", "/etc/shadow", tarfile.LNKTYPE), None), "a link or a special file"),
        ((tarfile.TarInfo("other/file"), b"x"), "is outside t/"),
    ],
)
def test_check_opens_the_inner_archives_and_refuses_what_escapes(
    tmp_path: Path, inner_member: tuple[tarfile.TarInfo, bytes | None], words: str
) -> None:
    """--check said "every digest matches" for a task archive holding a `../`, absolute, link
    or hard-link member: it never opened the inner archives."""
    inner = _inner([inner_member])
    manifest = _signed_manifest(
        [{"taskId": "t", "file": "tasks/t.tar.gz", "sha256": hashlib.sha256(inner).hexdigest()}]
    )
    archive = _archive(
        tmp_path / "a.tar.gz",
        [(tarfile.TarInfo("manifest.json"), manifest), (tarfile.TarInfo("tasks/t.tar.gz"), inner)],
    )
    with pytest.raises(InvalidTaskError, match=words):
        check(archive)


def test_check_refuses_bad_outer_names_truncation_and_malformed_manifests(tmp_path: Path) -> None:
    good = _sealed_inner("t", {"task.toml": b"x"})
    entry = {"taskId": "t", "file": "tasks/t.tar.gz", "sha256": hashlib.sha256(good).hexdigest()}
    escaping = _archive(
        tmp_path / "esc.tar.gz",
        [
            (tarfile.TarInfo("manifest.json"), _signed_manifest([entry])),
            (tarfile.TarInfo("tasks/../../../../tmp/x.tar.gz"), good),
        ],
    )
    with pytest.raises(InvalidTaskError, match="escaping path"):
        check(escaping)
    whole = _archive(
        tmp_path / "whole.tar.gz",
        [
            (tarfile.TarInfo("manifest.json"), _signed_manifest([entry])),
            (tarfile.TarInfo("tasks/t.tar.gz"), good),
        ],
    )
    assert check(whole)["tasks"][0]["taskId"] == "t"
    truncated = tmp_path / "cut.tar.gz"
    truncated.write_bytes(whole.read_bytes()[: len(whole.read_bytes()) // 2])
    with pytest.raises(InvalidTaskError, match="not a readable export archive"):
        check(truncated)
    for bad in (b"[1, 2]", b"{nope", json.dumps({"tasks": [{"taskId": 3}]}).encode()):
        archive = _archive(tmp_path / "m.tar.gz", [(tarfile.TarInfo("manifest.json"), bad)])
        with pytest.raises(InvalidTaskError, match=r"manifest\.json"):
            check(archive)


def test_export_refuses_an_id_that_is_a_path_and_a_bundle_outside_the_run(tmp_path: Path) -> None:
    from runner.present.export import accepted_run

    run_dir = tmp_path / "run"
    (run_dir / "bundle").mkdir(parents=True)
    (run_dir / "bundle" / "task.toml").write_text("x")
    report = {"verdict": "accepted", "taskId": "../../../../tmp/evil", "runId": "r1"}
    (run_dir / "report.json").write_text(json.dumps(report))
    with pytest.raises(UsageError, match="taskId"):
        accepted_run(run_dir)
    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "task.toml").write_text("secret")
    report = {"verdict": "accepted", "taskId": "ok", "runId": "r1", "bundle": str(host)}
    (run_dir / "report.json").write_text(json.dumps(report))
    with pytest.raises(UsageError, match="outside its run directory"):
        accepted_run(run_dir)


def test_check_hashes_what_follows_an_inner_archive_s_end(tmp_path: Path) -> None:
    """The bytes after the tar's end (here a second gzip member) are part of the file and of
    its digest: a digest over what the tar reader consumed alone would differ."""
    inner = _sealed_inner("t", {"task.toml": b"x"})
    trailing = io.BytesIO()
    with gzip.GzipFile(fileobj=trailing, mode="wb", mtime=0) as extra:
        extra.write(os.urandom(3 * 1024 * 1024))
    inner += trailing.getvalue()
    entry = {"taskId": "t", "file": "tasks/t.tar.gz", "sha256": hashlib.sha256(inner).hexdigest()}
    archive = _archive(
        tmp_path / "a.tar.gz",
        [
            (tarfile.TarInfo("manifest.json"), _signed_manifest([entry])),
            (tarfile.TarInfo("tasks/t.tar.gz"), inner),
        ],
    )
    assert check(archive)["tasks"][0]["taskId"] == "t"


def test_the_live_view_follows_each_running_tasks_stages_and_progress_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running task's line in the batch's live view: the stage it started last, then what
    its stages say they do (verify's progress events, as the events file carries them)."""
    from runner.batch.engines import Engine
    from runner.batch.run import Batch, BatchOptions, Progress, Running, _State

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    said: list[str] = []
    batch = Batch(
        BatchOptions(
            targets=[tmp_path],
            out=tmp_path / "out",
            engines=[EngineSpec.from_environment(1)],
            jobs=1,
            retries=0,
        ),
        Progress(stage=lambda outcome, line: said.append(line)),
    )

    class StillRunning:
        def poll(self) -> None:
            return None

    run_dir = tmp_path / "attempt" / "run"
    run_dir.mkdir(parents=True)
    events = run_dir.parent / "attempt-1.events.jsonl"
    lines = [
        {"stage": "nop", "status": "running"},
        {"stage": "nop", "status": "progress", "detail": "fail_to_pass: 2 failed"},
        {"stage": "oracle", "status": "running"},
    ]
    events.write_text(
        "".join(
            json.dumps({"seq": n, "at": "", "detail": "", "seconds": None, **line}) + "\n"
            for n, line in enumerate(lines, 1)
        )
    )
    outcome = TaskOutcome(target=str(tmp_path), task_id="t", attempts=1)
    entry = Running(
        index=0,
        outcome=outcome,
        engine=Engine(spec=EngineSpec.from_environment(1), env={}),
        child=StillRunning(),  # type: ignore[arg-type]
        run_dir=run_dir,
        started=0.0,
    )
    batch._reap(_State(running=[entry]))
    assert said == ["nop", "nop: fail_to_pass: 2 failed", "oracle"]


def test_piped_the_batch_says_each_change_of_a_task_on_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli.batchview import BatchView

    view = BatchView(1, quiet=False)
    outcome = TaskOutcome(target=str(tmp_path / "calc-task"), task_id="calc")
    view.stage(outcome, "nop: fail_to_pass: 2 failed")
    quiet = BatchView(1, quiet=True)
    quiet.stage(outcome, "oracle")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith("] calc-task: nop: fail_to_pass: 2 failed")


def test_a_seal_counts_only_with_a_trusted_key_s_signature(tmp_path: Path) -> None:
    """A bundle edited after its seal, its manifest's digests computed again, was graded and
    exported as the runner's own (an empty patch earned reward 1): the digests vouch for
    nothing without a signature, and a key this host does not trust vouches for nothing."""
    from runner.compile.seal import bundle_digests, seal_problem
    from runner.compile.signing import SIGNATURE, payload, public_text, signer
    from runner.present.export import accepted_run

    task = bash_task(tmp_path, name="exp-task")
    run_dir = tmp_path / "run"
    bundle = sealed_bundle(task.directory, run_dir / "bundle")
    (run_dir / "report.json").write_text(
        json.dumps({"verdict": "accepted", "taskId": "exp-task", "runId": "r1", "bundle": ""})
    )
    assert seal_problem(bundle) is None and accepted_run(run_dir).bundle == bundle
    # The forger's way: test.sh writes reward 1, the digests recomputed.
    test_sh = bundle / "tests" / "test.sh"
    test_sh.write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    manifest_path = bundle / ".selfbench-manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["seal"]["files"] = bundle_digests(bundle)
    manifest_path.write_text(json.dumps(manifest))
    assert seal_problem(bundle) == "its seal: its signature does not match its content"
    with pytest.raises(UsageError, match="does not match its seal"):
        accepted_run(run_dir)
    del manifest[SIGNATURE]
    manifest_path.write_text(json.dumps(manifest))
    assert seal_problem(bundle) == "its seal: it is not signed"
    # Signed by another host's key: not trusted, until this host is told to trust it.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from runner.compile.signing import Signer

    other = Signer(private=Ed25519PrivateKey.generate(), path=tmp_path / "other-key")
    manifest[SIGNATURE] = other.sign(payload(manifest))
    manifest_path.write_text(json.dumps(manifest))
    problem = seal_problem(bundle)
    assert problem is not None and other.key_id in problem and "does not trust" in problem
    assert seal_problem(bundle, (public_text(other.public),)) is None
    assert signer().key_id != other.key_id


def test_export_check_verifies_each_seal_and_the_manifest_with_the_keys_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive made on another host checks only with that host's key (`--key`); a bundle
    inside it whose files no longer match its seal is refused by name."""
    from runner.compile import signing

    task = bash_task(tmp_path, name="exp-task")
    bundle = sealed_bundle(task.directory, tmp_path / "bundle")
    run = Accepted(run_dir=tmp_path, bundle=bundle, task_id="exp-task", run_id="r1")
    archive = tmp_path / "a.tar.gz"
    export([run], archive)
    theirs = signing.public_text(signing.signer().public)
    # Another host: a key of its own, which trusts nothing else.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(InvalidTaskError, match="does not trust"):
        check(archive)
    assert check(archive, (theirs,))["tasks"][0]["taskId"] == "exp-task"
    key_file = tmp_path / "their.pub"
    key_file.write_text(theirs + "\n")
    assert check(archive, (str(key_file),))["tasks"][0]["taskId"] == "exp-task"
    with pytest.raises(UsageError, match="not an Ed25519 public key"):
        check(archive, ("ed25519:nothex",))


def test_export_check_refuses_a_bundle_sealed_for_another_task_or_run(tmp_path: Path) -> None:
    """A publisher's archive listing task exp-a whose bundle is another task's sealed bundle,
    or an older run's (each seal intact and signed), passed export --check: the inner
    manifest's task and census run are now held to what the listing names."""
    from runner.base.safeio import file_sha256
    from runner.compile import signing
    from runner.compile.seal import sealed_files
    from runner.present.export import MANIFEST, _add, _tar_gz, _write_tar_gz, manifest_digest

    other = sealed_bundle(bash_task(tmp_path, name="exp-b").directory, tmp_path / "b")
    cases = {
        ("exp-a", "r1"): r"its seal is task exp-b's, not exp-a's",
        ("exp-b", "r2"): r"its seal is run r1's, not this run's \(r2\)",
    }
    for (listed, said), refused in cases.items():
        inner = tmp_path / f"{listed}.tar.gz"
        with inner.open("wb") as out, _tar_gz(out) as tar:
            for entry in sealed_files(other):
                assert entry.file is not None
                _add(tar, f"{listed}/{entry.relative}", entry.file, entry.size)
        manifest: dict[str, object] = {
            "schemaVersion": 1,
            "runnerVersion": "x",
            "tasks": [
                {
                    "taskId": listed,
                    "difficulty": "easy",
                    "sourcePr": 1,
                    "sourceUrl": "https://example.invalid/pull/1",
                    "file": f"tasks/{listed}.tar.gz",
                    "sha256": file_sha256(inner),
                    "runId": said,
                }
            ],
        }
        manifest["digest"] = manifest_digest(manifest)
        signing.sign_document(manifest)
        archive = tmp_path / f"forged-{listed}.tar.gz"
        with archive.open("wb") as out:
            members = [("tasks", None), (f"tasks/{listed}.tar.gz", inner)]
            _write_tar_gz(out, [*members, (MANIFEST, json.dumps(manifest).encode())])
        with pytest.raises(InvalidTaskError, match=refused):
            check(archive)
