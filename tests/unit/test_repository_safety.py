"""Repositories are data, never code: a repository carrying every command-running git setting
runs none of them through `audit`, `compile` or `batch --changed-since`, and no repository can
put its content into a snapshot another repository's task gets (the cache poisoning case).

Real repositories, the real CLI in a child process; a naive git call on each armed repository
first proves the marker appears when git does read its configuration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from runner.compile.repository import changed_paths
from tests.helpers import GIT_ENV, bash_task, git
from tests.hostile_repos import arm, git_dir

ROOT = Path(__file__).resolve().parents[2]
ATTRIBUTES: dict[str, str | bytes | None] = {
    ".gitattributes": "* filter=evil diff=evil\n*.sh filter=evil2\n"
}


def cli(*args: str, cwd: Path | None = None, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SELFBENCH_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def markers_of(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def archive_members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle / "environment" / "repo.tar.gz") as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def naive_git_runs_the_repository_s_commands(repo: Path, markers: Path) -> None:
    """The arming works: plain git in the repository runs its settings."""
    subprocess.run(
        ["git", "status"], cwd=repo, capture_output=True, check=False, env={**os.environ, **GIT_ENV}
    )
    subprocess.run(
        ["git", "archive", "HEAD"],
        cwd=repo,
        capture_output=True,
        check=False,
        env={**os.environ, **GIT_ENV},
    )
    assert markers_of(markers), "the hostile settings did not run under plain git"
    shutil.rmtree(markers)
    markers.mkdir()


@pytest.mark.parametrize("shape", ["work tree", "linked worktree", "bare clone"])
def test_a_repository_s_own_configuration_never_runs(tmp_path: Path, shape: str) -> None:
    task = bash_task(tmp_path, extra_base=ATTRIBUTES)
    repo = task.repo
    if shape == "linked worktree":
        repo = tmp_path / "linked"
        git(task.repo, "worktree", "add", "-q", "--detach", str(repo), task.commit)
    elif shape == "bare clone":
        repo = tmp_path / "bare.git"
        git(tmp_path, "clone", "-q", "--bare", str(task.repo), str(repo))
    markers = tmp_path / "markers"
    names = arm(repo, markers)
    assert len(names) > 60
    if shape != "bare clone":
        naive_git_runs_the_repository_s_commands(repo, markers)
    cache = tmp_path / "cache"

    audited = cli("audit", str(task.directory), "--repo", str(repo), cache=cache)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    compiled = cli(
        "compile", str(task.directory), "--repo", str(repo), "--out", str(tmp_path / "b"),
        cache=cache,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert markers_of(markers) == []
    # The snapshot holds the committed bytes, no filter's output.
    members = archive_members(tmp_path / "b")
    assert members["lib.sh"] == (task.repo / "lib.sh").read_bytes()
    assert b"\n" in members["tests/run.sh"]
    # Nothing was written into the repository either.
    assert not (git_dir(repo) / "FETCH_HEAD").exists()


def test_changed_since_reads_the_checkout_without_running_its_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = bash_task(tmp_path, extra_base=ATTRIBUTES)
    (task.repo / "tests" / "test_more.sh").write_text("true\n")
    git(task.repo, "add", "-A")
    git(task.repo, "commit", "-qm", "more")
    markers = tmp_path / "markers"
    arm(task.repo, markers)
    naive_git_runs_the_repository_s_commands(task.repo, markers)
    monkeypatch.chdir(task.repo)
    root, changed = changed_paths("HEAD~1")
    assert root == task.repo.resolve()
    assert changed == [task.repo.resolve() / "tests" / "test_more.sh"]
    assert markers_of(markers) == []


def test_a_hostile_repository_cannot_change_what_a_clean_one_s_task_gets(tmp_path: Path) -> None:
    """Same commit, two repositories: one whose filters would rewrite every file, one whose
    object store holds other bytes under a blob's id. Compiled first, neither changes the
    snapshot of the clean repository compiled after, in the same cache."""
    task = bash_task(tmp_path, extra_base=ATTRIBUTES)
    cache = tmp_path / "cache"
    clean = tmp_path / "clean.git"
    git(tmp_path, "clone", "-q", "--bare", str(task.repo), str(clean))

    # 1. Objects that lie: a copy of the repository with other bytes under lib.sh's blob id.
    forged = tmp_path / "forged"
    shutil.copytree(task.repo, forged, symlinks=True)
    blob = git(forged, "rev-parse", f"{task.commit}:lib.sh")
    loose = git_dir(forged) / "objects" / blob[:2] / blob[2:]
    assert loose.is_file()  # a fresh commit's objects are loose
    loose.unlink()
    evil = b"shout() { echo FORGED; }\n"
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(evil) + evil))
    refused = cli(
        "compile", str(task.directory), "--repo", str(forged), "--out", str(tmp_path / "bf"),
        cache=cache,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "repository" in refused.stderr

    # 2. Filters that would rewrite every file.
    filtered = tmp_path / "filtered"
    git(tmp_path, "clone", "-q", str(task.repo), str(filtered))
    arm(filtered, tmp_path / "markers")
    first = cli(
        "compile", str(task.directory), "--repo", str(filtered), "--out", str(tmp_path / "b1"),
        cache=cache,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr

    second = cli(
        "compile", str(task.directory), "--repo", str(clean), "--out", str(tmp_path / "b2"),
        cache=cache,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    members = archive_members(tmp_path / "b2")
    assert members["lib.sh"] == (task.repo / "lib.sh").read_bytes()
    assert archive_members(tmp_path / "b1") == members
    assert markers_of(tmp_path / "markers") == []
