"""A reviewer's work tree as a fix (a side effect: git): its held-out test edits become the
fixed test patch, and any other edit is a boundary problem.

The work tree is hostile, and git never runs in it as in a repository: a scratch repository of
the runner's own (runner.compile.repository.scratch_repository) holds the index, and git reads
the tree only as `--work-tree`, with the runner's fixed configuration (so neither the tree's
`.git` nor its configuration can name a command). Its `.gitignore` files are data, and they
decide what is untracked: a virtualenv, `node_modules` or a build directory the repository
ignores is never taken for an edit.

What the tree is compared with: the base commit with the gold patch applied (the tree a
reviewer checks the tests against), and a path of the gold patch may also stand as at the
base (the gold patch not applied). Everything else that differs is either a held-out test
(a path of the green test patch or of testPaths, or a new file beside them: runner.compile.
fixrules) or a problem naming its path."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from runner.base import validation as v
from runner.base.errors import Problem, RepositoryError
from runner.base.safeio import read_regular
from runner.compile.fixrules import is_beside, is_held_out
from runner.compile.git import last_error, run_git
from runner.compile.repository import scratch_repository

ZERO_ID = "0" * 40


@dataclass(frozen=True, kw_only=True)
class TreeFix:
    test_patch: bytes  # the base commit against the base with the tree's held-out tests
    problems: list[Problem]


def _paths(output: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in output.split(b"\0") if p]


def _changed(git_dir: Path, tree: Path, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(tracked paths that differ from the index, untracked paths not ignored)."""
    wt = ["--work-tree", str(tree)]
    # Exit 1 when some entries need updating: that is the point (it refreshes the stat data).
    run_git([*wt, "update-index", "-q", "--refresh"], git_dir=git_dir, env=env, check=False)
    diff = run_git(
        [*wt, "diff-files", "--name-only", "-z", "--no-renames"], git_dir=git_dir, env=env
    )
    others = run_git(
        [*wt, "ls-files", "-z", "--others", "--exclude-standard"], git_dir=git_dir, env=env
    )
    return _paths(diff.stdout), _paths(others.stdout)


def _blob_of(git_dir: Path, tree: Path, path: str) -> tuple[str, str] | None:
    """(mode, blob id) of the tree's file at `path`, written into the scratch repository; None
    when there is none. A symbolic link is stored as git stores one (its target), never
    followed."""
    full = tree / path
    try:
        info = os.lstat(full)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        data, mode = os.fsencode(os.readlink(full)), "120000"
    elif stat.S_ISREG(info.st_mode):
        data = read_regular(full, limit=v.MAX_PATCH_BYTES)
        mode = "100755" if info.st_mode & 0o111 else "100644"
    else:
        raise RepositoryError(f"{full} is neither a file nor a symbolic link")
    written = run_git(
        ["--work-tree", str(tree), "hash-object", "-w", "--path", path, "--stdin"],
        git_dir=git_dir,
        stdin=data,
    )
    return mode, written.stdout.decode().strip()


def _base_blob(git_dir: Path, commit: str, path: str) -> str | None:
    found = run_git(
        ["rev-parse", "-q", "--verify", f"{commit}:{path}"], git_dir=git_dir, check=False
    )
    return found.stdout.decode().strip() if found.returncode == 0 else None


def test_patch_from_tree(
    tree: Path,
    *,
    base_commit: str,
    gold_patch: bytes,
    gold_paths: frozenset[str],
    held: list[str],
) -> TreeFix:
    """The fixed test patch the tree's held-out tests make, and the tree's other edits as
    problems (each naming its path)."""
    if not tree.is_dir():
        raise RepositoryError(f"--tree {tree} is not a directory")
    # git runs in the runner's scratch repository: a relative --work-tree would be read there.
    tree = tree.absolute()
    problems: list[Problem] = []
    chosen: set[str] = set()
    with scratch_repository() as git_dir:
        gold_index = {"GIT_INDEX_FILE": str(git_dir / "gold.index")}
        run_git(["read-tree", base_commit], git_dir=git_dir, env=gold_index)
        applied = run_git(
            ["apply", "--cached", "--whitespace=nowarn", "-"],
            git_dir=git_dir,
            env=gold_index,
            stdin=gold_patch,
            check=False,
        )
        if applied.returncode != 0:
            raise RepositoryError(
                f"the green task's gold patch does not apply at its base commit: "
                f"{last_error(applied)}"
            )
        tracked, untracked = _changed(git_dir, tree, gold_index)
        for path in tracked:
            if is_held_out(path, held):
                chosen.add(path)
            elif path in gold_paths:
                if not _at_base(git_dir, tree, base_commit, path):
                    problems.append(
                        Problem(
                            file=str(tree),
                            field=path,
                            message="a path of the gold patch, neither as at the base nor as "
                            "the gold patch leaves it: a fix never changes the gold patch",
                        )
                    )
            else:
                problems.append(_outside(tree, path, "an edit outside the held-out tests"))
        for path in untracked:
            if is_held_out(path, held) or is_beside(path, held):
                chosen.add(path)
            else:
                problems.append(_outside(tree, path, "a new file outside the held-out tests"))
        patch = _diff(git_dir, tree, base_commit, sorted(chosen))
    return TreeFix(test_patch=patch, problems=problems)


def _at_base(git_dir: Path, tree: Path, commit: str, path: str) -> bool:
    blob = _blob_of(git_dir, tree, path)
    base = _base_blob(git_dir, commit, path)
    return (blob is None and base is None) or (blob is not None and blob[1] == base)


def _outside(tree: Path, path: str, what: str) -> Problem:
    return Problem(
        file=str(tree),
        field=path,
        message=f"{what} (a fix edits only the held-out tests: the test patch's paths, "
        "testPaths, and new files beside them)",
    )


def _diff(git_dir: Path, tree: Path, commit: str, chosen: list[str]) -> bytes:
    """The base commit against the base with the tree's version of each chosen path."""
    index = {"GIT_INDEX_FILE": str(git_dir / "tests.index")}
    run_git(["read-tree", commit], git_dir=git_dir, env=index)
    lines = []
    for path in chosen:
        blob = _blob_of(git_dir, tree, path)
        mode, blob_id = blob if blob is not None else ("0", ZERO_ID)
        lines.append(f"{mode} {blob_id}\t{path}\0")
    if lines:
        run_git(
            ["update-index", "-z", "--index-info"],
            git_dir=git_dir,
            env=index,
            stdin="".join(lines).encode("utf-8", "surrogateescape"),
        )
    new_tree = run_git(["write-tree"], git_dir=git_dir, env=index).stdout.decode().strip()
    diff = run_git(
        [
            "diff",
            "--binary",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            f"{commit}^{{tree}}",
            new_tree,
        ],
        git_dir=git_dir,
    )
    return diff.stdout
