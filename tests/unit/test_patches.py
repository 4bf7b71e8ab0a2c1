"""Patch analysis through unidiff: touched paths, changed lines, manifests, path safety."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.patches import (
    escapes_repository,
    is_manifest,
    parse_patch,
    repository_path,
    touches_git_dir,
)
from tests.helpers import diff_of, git, make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path, _ = make_repo(
        tmp_path / "repo",
        {
            "a.txt": "a\n",
            "b.sh": "echo b\n",
            "bin.dat": b"x\x00y",
            "del.txt": "gone\n",
            "keep.txt": "1\n2\n3\n",
        },
    )
    return path


def test_every_kind_of_change_is_a_touched_file(repo: Path) -> None:
    git(repo, "mv", "a.txt", "c.txt")
    (repo / "b.sh").chmod(0o644)
    (repo / "bin.dat").write_bytes(b"x\x00z")
    (repo / "del.txt").unlink()
    (repo / "sp ace.txt").write_text("new\n")
    (repo / "caf\u00e9.txt").write_text("accent\n")
    (repo / "keep.txt").write_text("1\nTWO\n3\n")
    raw = diff_of(repo, {})
    info = parse_patch(raw)
    assert set(info.files) == {
        "a.txt",
        "c.txt",
        "b.sh",
        "bin.dat",
        "del.txt",
        "sp ace.txt",
        "caf\u00e9.txt",
        "keep.txt",
    }
    by_path = {c.path: c for c in info.changes}
    assert by_path["bin.dat"].binary
    assert by_path["del.txt"].new_path is None and by_path["del.txt"].removed_lines == 1
    assert by_path["c.txt"].old_path == "a.txt"
    assert by_path["b.sh"].changed_lines == 0
    assert by_path["keep.txt"].added_lines == 1 and by_path["keep.txt"].removed_lines == 1
    # +new, +accent, -gone, +TWO/-2
    assert info.changed_lines == 5
    assert info.subpatch(info.changes) == raw


def test_header_lines_are_not_counted() -> None:
    raw = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-+++ x\n+--- y\n keep\n"
    assert parse_patch(raw).changed_lines == 2


def test_manifest_subpatch_is_exact(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "r", {"package.json": "{}\n", "src/a.ts": "a\n"})
    raw = diff_of(
        repo,
        {"package.json": '{"x": 1}\n', "src/a.ts": "b\n", "sub/requirements-dev.txt": "pytest\n"},
    )
    info = parse_patch(raw)
    manifests = info.manifest_changes()
    assert sorted(c.path for c in manifests) == ["package.json", "sub/requirements-dev.txt"]
    sub = info.subpatch(manifests)
    assert b"src/a.ts" not in sub
    assert parse_patch(sub).files == ("package.json", "sub/requirements-dev.txt")


@pytest.mark.parametrize(
    "name",
    [
        "package.json",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "bun.lock",
        "bun.lockb",
        "pnpm-lock.yaml",
        "yarn.lock",
        "deno.lock",
        "pyproject.toml",
        "uv.lock",
        "poetry.lock",
        "Pipfile",
        "Pipfile.lock",
        "go.mod",
        "go.sum",
        "Cargo.toml",
        "Cargo.lock",
        "requirements.txt",
        "requirements-dev.txt",
        "a/b/requirements_test.txt",
    ],
)
def test_manifest_names(name: str) -> None:
    assert is_manifest(name)


@pytest.mark.parametrize("name", ["package.jsonx", "src/main.go", "requirements.in", "README"])
def test_not_manifests(name: str) -> None:
    assert not is_manifest(name)


@pytest.mark.parametrize(
    ("path", "base", "escapes"),
    [
        ("a/b", ".", False),
        (".", ".", False),
        ("a/../b", ".", False),
        ("..", ".", True),
        ("a/../../b", ".", True),
        ("/etc", ".", True),
        ("x", "/abs", True),
        ("../x", "sub", False),
        ("../../x", "sub", True),
    ],
)
def test_escapes_repository(path: str, base: str, escapes: bool) -> None:
    assert escapes_repository(path, base=base) is escapes


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        (".git", True),
        (".git/config", True),
        ("a/.git/x", True),
        (".github/x", False),
        ("a/.gitignore", False),
    ],
)
def test_git_dir(path: str, inside: bool) -> None:
    assert touches_git_dir(path) is inside


def test_repository_path() -> None:
    assert repository_path(".", "tests/a.py") == "tests/a.py"
    assert repository_path("pkg", "tests/a.py") == "pkg/tests/a.py"
    assert repository_path("pkg", "../other/t.py") == "other/t.py"
