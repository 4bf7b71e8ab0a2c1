"""Compiling from real git repositories: byte-identical output, atomic writes, refresh."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from runner.base.errors import InvalidTaskError, RepositoryError
from runner.compile.compiler import refresh_bundle
from runner.compile.taskdir import load_authored_task
from runner.model.settings import CompileOptions
from tests.helpers import bash_task, compiled, git, git_daemon

OPTIONS = CompileOptions()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_compile_twice_is_byte_identical(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    loaded = load_authored_task(task.directory)
    first = compiled(loaded, repo=None, out=tmp_path / "b1", options=OPTIONS)
    second = compiled(loaded, repo=None, out=tmp_path / "b2", options=OPTIONS)
    assert tree(first) == tree(second)
    # Recompiling in place leaves it identical too.
    compiled(loaded, repo=None, out=first, options=OPTIONS)
    assert tree(first) == tree(second)


def test_repo_archive_is_the_base_commit(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    (task.repo / "later.txt").write_text("not in base\n")
    git(task.repo, "add", "-A")
    git(task.repo, "commit", "-qm", "later")
    out = compiled(
        load_authored_task(task.directory), repo=str(task.repo), out=tmp_path / "b", options=OPTIONS
    )
    with tarfile.open(out / "environment" / "repo.tar.gz") as archive:
        names = sorted(m.name for m in archive.getmembers() if m.isfile())
    assert names == ["lib.sh", "tests/run.sh", "tests/test_old.sh"]
    assert (out / "environment/repo.tar.gz").read_bytes() == (
        out / "tests/repo.tar.gz"
    ).read_bytes()
    assert (out / "tests/test.sh").stat().st_mode & 0o111


def test_missing_base_commit_is_named(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    doc = json.loads((task.directory / "definition.json").read_text())
    doc["baseCommit"] = "1" * 40
    (task.directory / "definition.json").write_text(json.dumps(doc))
    with pytest.raises(RepositoryError) as info:
        compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=OPTIONS)
    assert info.value.message == f"base commit {'1' * 40} not found in repository {task.repo}"
    assert not (tmp_path / "b").exists()


def test_label_repo_needs_repo_option(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    doc = json.loads((task.directory / "definition.json").read_text())
    doc["repo"] = "example/project"
    (task.directory / "definition.json").write_text(json.dumps(doc))
    loaded = load_authored_task(task.directory)
    with pytest.raises(RepositoryError, match="pass --repo PATH"):
        compiled(loaded, repo=None, out=tmp_path / "b", options=OPTIONS)
    assert compiled(loaded, repo=str(task.repo), out=tmp_path / "b", options=OPTIONS)


def test_a_remote_url_is_fetched_once_into_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real git server (git daemon on a loopback port): the commit is fetched by id into the
    runner's store once; the second compile finds it there and asks the server nothing."""
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(tmp_path / "cache"))
    task = bash_task(tmp_path)
    git(task.repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    with git_daemon(task.repo.parent) as base_url:
        url = f"{base_url}/{task.repo.name}"
        loaded = load_authored_task(task.directory)
        out = compiled(loaded, repo=url, out=tmp_path / "b", options=OPTIONS)
        assert (out / "environment/repo.tar.gz").is_file()
        store = tmp_path / "cache" / "git" / "store.git"
        pinned = git(store, "for-each-ref", "--format=%(refname)", "refs/selfbench/commits")
        assert pinned.strip() == f"refs/selfbench/commits/{task.commit}"
    # The server is gone: the store answers alone.
    compiled(loaded, repo=url, out=tmp_path / "b2", options=OPTIONS)
    assert tree(tmp_path / "b2") == tree(out)


def test_refuses_to_overwrite_foreign_directories(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    loaded = load_authored_task(task.directory)
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(InvalidTaskError, match="not a selfbench bundle"):
        compiled(loaded, repo=None, out=other, options=OPTIONS)
    assert (other / "precious.txt").read_text() == "keep me"


def test_refresh_rewrites_definition_derived_files(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=OPTIONS
    )
    before = tree(bundle)
    doc = json.loads((task.directory / "definition.json").read_text())
    doc["testCommand"] = "bash tests/run.sh -v {tests}"
    doc["timeouts"]["testsSeconds"] = 99
    doc["toolchains"] = ["uv", "go"]
    (task.directory / "definition.json").write_text(json.dumps(doc))
    changed = refresh_bundle(load_authored_task(task.directory), bundle, OPTIONS)
    after = tree(bundle)
    assert "tests/test.sh" in changed and "task.toml" in changed
    assert "tests/toolchains/go.sh" in changed
    assert b"run.sh -v" in after["tests/test.sh"]
    assert after["environment/repo.tar.gz"] == before["environment/repo.tar.gz"]
    # Same as a fresh compile of the repaired definition.
    fresh = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "c", options=OPTIONS
    )
    assert tree(fresh) == after


def test_refresh_removes_files_of_dropped_toolchains(tmp_path: Path) -> None:
    task = bash_task(tmp_path, toolchains=["uv", "go"])
    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=OPTIONS
    )
    doc = json.loads((task.directory / "definition.json").read_text())
    doc["toolchains"] = ["uv"]
    (task.directory / "definition.json").write_text(json.dumps(doc))
    changed = refresh_bundle(load_authored_task(task.directory), bundle, OPTIONS)
    assert "tests/toolchains/go.sh (removed)" in changed
    assert not (bundle / "tests/toolchains/go.sh").exists()


def test_refresh_refuses_another_task(tmp_path: Path) -> None:
    first = bash_task(tmp_path, name="first")
    second = bash_task(tmp_path, name="second")
    bundle = compiled(
        load_authored_task(first.directory), repo=None, out=tmp_path / "b", options=OPTIONS
    )
    before = tree(bundle)
    with pytest.raises(InvalidTaskError, match="bundle is task 'first', not 'second'"):
        refresh_bundle(load_authored_task(second.directory), bundle, OPTIONS)
    assert tree(bundle) == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("difficulty", "medium"),
        ("workdir", "sub"),
        ("sourcePr", 8),
        ("sourceUrl", "https://example.invalid/other"),
    ],
)
def test_refresh_refuses_immutable_changes(tmp_path: Path, field: str, value: object) -> None:
    task = bash_task(tmp_path)
    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=OPTIONS
    )
    doc = json.loads((task.directory / "definition.json").read_text())
    doc[field] = value
    if field == "difficulty":
        doc["passToPass"] = ["tests/test_old.sh"]
    (task.directory / "definition.json").write_text(json.dumps(doc))
    with pytest.raises(InvalidTaskError) as info:
        refresh_bundle(load_authored_task(task.directory), bundle, OPTIONS)
    assert info.value.message == f"validation repair changed immutable definition field {field}"


def test_refresh_refuses_a_changed_prompt(tmp_path: Path) -> None:
    task = bash_task(tmp_path)
    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=OPTIONS
    )
    (task.directory / "instruction.md").write_text("Something else entirely.\n")
    with pytest.raises(
        InvalidTaskError, match="validation repair changed immutable definition field prompt"
    ):
        refresh_bundle(load_authored_task(task.directory), bundle, OPTIONS)


def test_archive_is_made_once_per_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(cache))
    task = bash_task(tmp_path)
    loaded = load_authored_task(task.directory)
    out = compiled(loaded, repo=None, out=tmp_path / "b1", options=OPTIONS)
    (cached,) = (cache / "archives").iterdir()
    assert cached.read_bytes() == (out / "environment" / "repo.tar.gz").read_bytes()
    made = cached.stat().st_mtime_ns
    compiled(loaded, repo=None, out=tmp_path / "b2", options=OPTIONS)
    assert cached.stat().st_mtime_ns == made


def test_refresh_takes_a_changed_environment_contract(tmp_path: Path) -> None:
    """The seed: a verification-round fix may change the environment contract (only the
    immutable fields above may not change)."""
    task = bash_task(tmp_path)
    bundle = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=OPTIONS
    )
    doc = json.loads((task.directory / "definition.json").read_text())
    doc["environment"] = {
        "rootSetupCommand": "apt-get install -y jq",
        "smokeCommand": "jq --version",
        "environmentVariables": {"CALC_MODE": "strict"},
    }
    (task.directory / "definition.json").write_text(json.dumps(doc))
    changed = refresh_bundle(load_authored_task(task.directory), bundle, OPTIONS)
    after = tree(bundle)
    assert {"environment/Dockerfile", "tests/Dockerfile", "tests/smoke.sh"} <= set(changed)
    assert b"jq --version" in after["tests/smoke.sh"]
    assert b"apt-get install -y jq" in after["environment/root-setup.sh"]
    assert b'ENV CALC_MODE="strict"' in after["environment/Dockerfile"]
    manifest = json.loads(after[".selfbench-manifest.json"])
    assert manifest["environment"]["smokeCommand"] == "jq --version"
    fresh = compiled(
        load_authored_task(task.directory), repo=None, out=tmp_path / "c", options=OPTIONS
    )
    assert tree(fresh) == after
