"""Git side effects: find the task's repository, check the base commit, archive it.

Remote repositories are cloned once into a cache (bare) and only the needed commit is fetched.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from runner.errors import InfrastructureError, RepositoryError

_REMOTE = re.compile(r"^(?:https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


def cache_root() -> Path:
    base = os.environ.get("SELFBENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "selfbench-runner"
    )
    return Path(base)


def _git(
    args: Sequence[str], *, cwd: Path | None = None, check: bool = True, capture: bool = True
) -> subprocess.CompletedProcess[bytes]:
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=capture,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except FileNotFoundError:
        raise InfrastructureError("git is not installed on this machine") from None
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
        if beside.exists():
            spec = str(beside)
    if is_remote(spec):
        path = _cached_clone(spec, commit)
    elif Path(spec).is_file():
        # A git bundle file: fetched into the cache like a remote.
        path = _cached_clone(str(Path(spec).resolve()), commit)
    else:
        path = Path(spec).expanduser()
        if not path.exists():
            hint = "" if repo_option else "; pass --repo PATH|URL"
            raise RepositoryError(
                f"repository {spec!r} ({source}) is neither a local path nor a git URL{hint}"
            )
        if _git(["rev-parse", "--git-dir"], cwd=path, check=False).returncode != 0:
            raise RepositoryError(f"{path} ({source}) is not a git repository")
    check_commit(path, commit, label=spec)
    return path


def check_commit(repo: Path, commit: str, *, label: str) -> None:
    result = _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=repo, check=False)
    if result.returncode != 0:
        raise RepositoryError(f"base commit {commit} not found in repository {label}")


def _cached_clone(url: str, commit: str) -> Path:
    key = url
    if Path(url).is_file():
        # A bundle's content, not its path, decides what it holds.
        key = hashlib.sha256(Path(url).read_bytes()).hexdigest()
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
