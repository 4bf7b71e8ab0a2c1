"""Git side effects: find the task's repository, check the base commit, archive it.

Remote repositories are cloned once into a cache (bare) and only the needed commit is fetched.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.errors import InfrastructureError, RepositoryError
from runner.safeio import file_kind
from runner.settings import cache_root

_REMOTE = re.compile(r"^(?:https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")
GIT_TIMEOUT_SECONDS = 600


def _git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    check: bool = True,
    capture: bool = True,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=capture,
            check=False,
            input=stdin,
            timeout=GIT_TIMEOUT_SECONDS,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})},
        )
    except FileNotFoundError:
        raise InfrastructureError("git is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise InfrastructureError(
            f"git {' '.join(args[:2])} took longer than {GIT_TIMEOUT_SECONDS}s"
        ) from None
    if check and result.returncode != 0:
        message = (result.stderr or b"").decode(errors="replace").strip().splitlines()
        raise RepositoryError(
            f"git {' '.join(args[:2])} failed: {message[-1] if message else result.returncode}"
        )
    return result


def is_remote(spec: str) -> bool:
    return bool(_REMOTE.match(spec))


def resolve_repository(
    repo_option: str | None, definition_repo: str, commit: str, *, task_dir: Path | None = None
) -> Path:
    """A local git directory that contains `commit`.

    A relative definition.repo is looked up beside the task first (examples ship their
    repository as a git bundle there), then from the current directory.
    """
    spec = repo_option or definition_repo
    source = "--repo" if repo_option else "definition.repo"
    if not repo_option and task_dir is not None and not is_remote(spec):
        beside = task_dir / spec
        try:
            if os.path.lexists(beside):
                spec = str(beside)
        except (OSError, ValueError):  # a name too long for the filesystem is no repository
            pass
    if is_remote(spec):
        path = _cached_clone(spec, commit)
    else:
        path = Path(spec).expanduser()
        try:
            info = os.stat(path)
        except OSError:
            hint = "" if repo_option else "; pass --repo PATH|URL"
            raise RepositoryError(
                f"repository {spec!r} ({source}) is neither a local path nor a git URL{hint}"
            ) from None
        if stat.S_ISREG(info.st_mode):
            # A git bundle file: fetched into the cache like a remote.
            with path.open("rb") as handle:
                header = handle.read(16)
            if not header.startswith((b"# v2 git bundle", b"# v3 git bundle")):
                raise RepositoryError(
                    f"repository {spec!r} ({source}) is a file but not a git bundle"
                )
            path = _cached_clone(str(path.resolve()), commit)
        elif not stat.S_ISDIR(info.st_mode):
            raise RepositoryError(
                f"repository {spec!r} ({source}) is {file_kind(info.st_mode)}, not a git "
                "repository or bundle"
            )
        elif _git(["rev-parse", "--git-dir"], cwd=path, check=False).returncode != 0:
            raise RepositoryError(f"{path} ({source}) is not a git repository")
    check_commit(path, commit, label=spec)
    return path


def tree_of(repo: Path, commit: str) -> str:
    """The id of the commit's tree: what the commit holds, whatever repository it came from."""
    result = _git(["rev-parse", "--verify", "-q", f"{commit}^{{tree}}"], cwd=repo)
    return result.stdout.decode().strip()


def check_commit(repo: Path, commit: str, *, label: str) -> None:
    result = _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=repo, check=False)
    if result.returncode != 0:
        raise RepositoryError(f"base commit {commit} not found in repository {label}")


def _cached_clone(url: str, commit: str) -> Path:
    key = url
    if Path(url).is_file():
        # A bundle's content, not its path, decides what it holds.
        digest = hashlib.sha256()
        with Path(url).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        key = digest.hexdigest()
    path = cache_root() / "repos" / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".git")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        _git(["init", "--bare", "-q", str(tmp)])
        _git(["remote", "add", "origin", url], cwd=tmp)
        try:
            os.replace(tmp, path)
        except OSError:
            # Another process made the same cache entry first: use theirs.
            shutil.rmtree(tmp, ignore_errors=True)
            if not path.exists():
                raise
    if _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=path, check=False).returncode != 0:
        fetched = _git(["fetch", "-q", "--depth", "1", "origin", commit], cwd=path, check=False)
        if fetched.returncode != 0:
            # Servers that refuse fetching by SHA: fall back to all refs.
            _git(
                ["fetch", "-q", "origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                cwd=path,
            )
    return path


def cached_archive(repo: Path, commit: str) -> Path:
    """The commit's archive, made once: a commit names its content, so the archive of a
    commit never changes and every later compile copies it instead of running git again."""
    path = cache_root() / "archives" / f"{commit.lower()}.tar.gz"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_archive(repo, commit, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_archive(repo: Path, commit: str, destination: Path) -> None:
    """`git archive` of the commit, gzipped with a fixed mtime: byte-identical every time."""
    process = subprocess.Popen(
        ["git", "-c", "tar.umask=0022", "archive", "--format=tar", commit],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    with (
        destination.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as out,
    ):
        shutil.copyfileobj(process.stdout, out, 1 << 20)
    error = process.stderr.read().decode(errors="replace").strip()
    if process.wait() != 0:
        raise RepositoryError(f"git archive {commit} failed in {repo}: {error}")


@dataclass(frozen=True, kw_only=True)
class RepositoryFacts:
    """What compile learned from the repository at the base commit, for the audit."""

    workdir_problem: str | None = None
    apply_problems: list[str] = field(default_factory=list)
    evidence_problems: list[str] = field(default_factory=list)
    # Of the coupling candidates asked about, those the base tree already holds.
    present_at_base: frozenset[str] = frozenset()

    @property
    def problems(self) -> list[str]:
        return [
            *([self.workdir_problem] if self.workdir_problem else []),
            *self.apply_problems,
            *self.evidence_problems,
        ]


def object_type(repo: Path, commit: str, path: str) -> str | None:
    """`tree`, `blob`, `commit` (a gitlink) or None for `commit:path`."""
    if path in ("", "."):
        return "tree"
    result = _git(["cat-file", "-t", f"{commit}:{path}"], cwd=repo, check=False)
    return result.stdout.decode().strip() or None if result.returncode == 0 else None


def _first_error(result: subprocess.CompletedProcess[bytes]) -> str:
    lines = [ln.strip() for ln in (result.stderr or b"").decode(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    return "; ".join(lines[:2]) or f"exit {result.returncode}"


def check_repository(
    repo: Path,
    commit: str,
    *,
    workdir: str,
    test_patch: bytes,
    gold_patch: bytes,
    evidence: Sequence[str] = (),
    coupling_needles: Sequence[str] = (),
) -> RepositoryFacts:
    """The workdir is a directory at `commit`, and both patches apply there: each alone, and
    the held-out tests on top of the gold patch (as the oracle applies them). `git apply
    --check` runs against a temporary index, so no checkout is needed."""
    kind = object_type(repo, commit, workdir)
    workdir_problem = None
    if kind is None:
        workdir_problem = f"workdir {workdir!r} does not exist at baseCommit"
    elif kind != "tree":
        what = "a submodule" if kind == "commit" else "a file"
        workdir_problem = f"workdir {workdir!r} is {what} at baseCommit, not a directory"
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="selfbench-apply.") as tmp:
        index = Path(tmp) / "index"
        env = {"GIT_INDEX_FILE": str(index)}

        def reset() -> None:
            _git(["read-tree", commit], cwd=repo, env=env)

        def apply(patch: bytes, *, check: bool) -> subprocess.CompletedProcess[bytes]:
            args = ["apply", "--cached", "--binary", "--whitespace=nowarn"]
            return _git(
                [*args, *(["--check"] if check else []), "-"],
                cwd=repo,
                env=env,
                check=False,
                stdin=patch,
            )

        reset()
        gold = apply(gold_patch, check=False)
        if gold.returncode != 0:
            problems.append(f"gold.patch does not apply to baseCommit: {_first_error(gold)}")
        reset()
        tests = apply(test_patch, check=True)
        if tests.returncode != 0:
            problems.append(f"test.patch does not apply to baseCommit: {_first_error(tests)}")
        if gold.returncode == 0 and tests.returncode == 0:
            reset()
            apply(gold_patch, check=False)
            both = apply(test_patch, check=True)
            if both.returncode != 0:
                problems.append(
                    "test.patch does not apply on top of gold.patch: " + _first_error(both)
                )
    evidence_problems = [
        f"evidence path {path!r} does not exist at baseCommit"
        for path in dict.fromkeys(evidence)
        if object_type(repo, commit, path) is None
    ]
    return RepositoryFacts(
        workdir_problem=workdir_problem,
        apply_problems=problems,
        evidence_problems=evidence_problems,
        present_at_base=present_in_tree(repo, commit, coupling_needles),
    )


def present_in_tree(repo: Path, commit: str, needles: Sequence[str]) -> frozenset[str]:
    """Which of these fixed strings occur anywhere in the commit's tree (one `git grep`)."""
    wanted = {n for n in needles if n and "\n" not in n}
    if not wanted:
        return frozenset()
    args = ["grep", "-F", "-o", "-h", "-I", "--no-color"]
    for needle in sorted(wanted):
        args += ["-e", needle]
    result = _git([*args, commit, "--"], cwd=repo, check=False)
    found = {line for line in result.stdout.decode(errors="replace").splitlines()}
    return frozenset(wanted & found)
