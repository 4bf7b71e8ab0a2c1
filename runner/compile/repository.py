"""Git side effects: find the task's repository, take the base commit into the runner's own
store, check the patches there, archive it.

A repository is data, never code. Git reads a repository's own configuration (`core.fsmonitor`,
`core.hooksPath`, filter and textconv drivers, `include.path`, ...) whenever it runs inside it,
and some of those settings name commands. So git never runs inside a user's repository: the
runner locates its object directory itself, lends those objects to a throw-away repository of
its own (`objects/info/alternates`) and fetches the one commit it needs from there into its
store. `index-pack` hashes every object it receives and `transfer.fsckObjects` checks their
shape (no `.git` entries in a tree), so what the store holds under a commit id is exactly that
commit, whichever repository it came from. Remote URLs and bundles are fetched into the same
store. Every git call runs with a fixed configuration: no system or global file, every
command-running setting switched off on the command line, no inherited `GIT_*` variable.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from filelock import FileLock

from runner.base.errors import RepositoryError, UsageError
from runner.base.safeio import file_kind, read_regular
from runner.compile.git import (
    ARCHIVE_SETTINGS,
    REPOSITORY_CONFIG,
    git_command,
    git_environment,
    git_root,
    git_version,
    last_error,
    run_git,
)
from runner.model.settings import cache_root

_REMOTE = re.compile(r"^(?:https?|ssh|git)://|^[\w.-]+@[\w.-]+:")
_SHA = re.compile(r"^[0-9a-f]{40}$")


def is_remote(spec: str) -> bool:
    return bool(_REMOTE.match(spec))


# ---- the store ------------------------------------------------------------------------------


@contextlib.contextmanager
def _store_lock() -> Iterator[None]:
    """One writer of the store at a time (fetches update its shallow file and refs)."""
    with FileLock(git_root() / "store.lock", mode=0o600):
        yield


def _new_repository(path: Path, *, alternate: Path | None = None) -> None:
    """A bare repository with the runner's configuration, no template (no sample hooks)."""
    run_git(["init", "--bare", "-q", "--template=", str(path)])
    (path / "config").write_text(REPOSITORY_CONFIG, encoding="utf-8")
    if alternate is not None:
        info = path / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_text(f"{alternate}\n", encoding="utf-8")


def store() -> Path:
    """The runner's own bare repository: every commit a task names, fetched once."""
    path = git_root() / "store.git"
    if (path / "HEAD").is_file():
        return path
    with _store_lock():
        if not (path / "HEAD").is_file():
            tmp = path.with_name(f".store.{os.getpid()}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            _new_repository(tmp)
            os.replace(tmp, path)
    return path


@contextlib.contextmanager
def scratch_repository() -> Iterator[Path]:
    """A throw-away bare repository that reads the store's objects and writes its own (an
    index, the blobs and trees made from a work tree), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="scratch.", dir=git_root()) as tmp:
        path = Path(tmp) / "scratch.git"
        _new_repository(path, alternate=store() / "objects")
        yield path


def has_commit(git_dir: Path, commit: str) -> bool:
    result = run_git(["cat-file", "-e", f"{commit}^{{commit}}"], git_dir=git_dir, check=False)
    return result.returncode == 0


def _pin(commit: str) -> str:
    return f"refs/selfbench/commits/{commit}"


def _fetch(
    source: str, refspecs: Sequence[str], *, depth: bool
) -> subprocess.CompletedProcess[bytes]:
    args = ["fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-auto-gc"]
    return run_git(
        [*args, *(["--depth", "1"] if depth else []), "--", source, *refspecs],
        git_dir=store(),
        check=False,
    )


def _take(source: str, commit: str, *, label: str, key: str, bundle: bool = False) -> None:
    """Fetch `commit` from `source` into the store (unless it is there already)."""
    target = store()
    if has_commit(target, commit):
        return
    with _store_lock():
        if has_commit(target, commit):
            return
        fetched = None
        if not bundle:
            fetched = _fetch(source, [f"+{commit}:{_pin(commit)}"], depth=True)
        if fetched is None or fetched.returncode != 0:
            # Bundles, and servers that refuse a fetch by id: every branch and tag.
            prefix = f"refs/selfbench/sources/{key}"
            fetched = _fetch(
                source,
                [f"+refs/heads/*:{prefix}/heads/*", f"+refs/tags/*:{prefix}/tags/*"],
                depth=False,
            )
            if fetched.returncode != 0:
                raise RepositoryError(
                    f"cannot fetch from repository {label}: {last_error(fetched)}"
                )
        if not has_commit(target, commit):
            raise RepositoryError(f"base commit {commit} not found in repository {label}")
        run_git(["update-ref", _pin(commit), commit], git_dir=target)


def _git_dir_of(path: Path, *, label: str) -> Path:
    """The git directory `git rev-parse --git-dir` would find from `path`, found without git
    (which would read the repository's configuration)."""
    start = path.resolve()
    for directory in (start, *start.parents):
        dotgit = directory / ".git"
        if dotgit.is_dir():
            return dotgit
        if dotgit.is_file():
            text = read_regular(dotgit, limit=4096).decode("utf-8", "replace").strip()
            if not text.startswith("gitdir:"):
                raise RepositoryError(f"{dotgit} ({label}) is not a gitdir file")
            return (directory / text[len("gitdir:") :].strip()).resolve()
        if (directory / "HEAD").is_file() and (directory / "objects").is_dir():
            return directory
    raise RepositoryError(f"{path} ({label}) is not a git repository")


def _objects_of(path: Path, *, label: str) -> Path:
    git_dir = _git_dir_of(path, label=label)
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.is_file():
        text = read_regular(commondir, limit=4096).decode("utf-8", "replace").strip()
        common = (git_dir / text).resolve()
    objects = common / "objects"
    if not objects.is_dir() or "\n" in str(objects):
        raise RepositoryError(f"{path} ({label}) is not a git repository (no object directory)")
    return objects


def _take_local(path: Path, commit: str, *, label: str) -> None:
    """Fetch from a local repository without running git in it: its objects are lent to a
    repository of the runner's own, and the store fetches from that."""
    if has_commit(store(), commit):
        return
    with _lent(path, commit, label=label) as lend:
        _take(str(lend), commit, label=label, key="local")


@contextlib.contextmanager
def _lent(path: Path, commit: str, *, label: str) -> Iterator[Path]:
    """A throw-away repository of the runner's own that reads the objects of the local
    repository at `path` and holds `commit` (a repository error when it does not)."""
    objects = _objects_of(path, label=label)
    with tempfile.TemporaryDirectory(prefix="lend.", dir=git_root()) as tmp:
        lend = Path(tmp) / "lend.git"
        _new_repository(lend, alternate=objects)
        if not has_commit(lend, commit):
            raise RepositoryError(f"base commit {commit} not found in repository {label}")
        yield lend


def local_path(spec: str) -> Path:  # `file://` taken off, `~` expanded
    return Path(spec.removeprefix("file://")).expanduser()


def revision_commit(spec: str, expression: str) -> str:
    """The commit git gives `expression` (a short id, `REV^`, `REV~N`) in the local repository
    `spec`, without running git there: its objects are lent to a repository of the runner's."""
    path = local_path(spec)
    if is_remote(spec) or not path.is_dir():
        raise UsageError(
            f"{expression!r}: a short commit id or a revision expression is read in a "
            "repository on this disk; for this one name a full commit id, a branch or a tag",
            field="--base/--head",
        )
    objects = _objects_of(path, label=spec)
    with tempfile.TemporaryDirectory(prefix="lend.", dir=git_root()) as tmp:
        lend = Path(tmp) / "lend.git"
        _new_repository(lend, alternate=objects)
        done = run_git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{expression}^{{commit}}"],
            git_dir=lend,
            check=False,
        )
    commit = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0 or not _SHA.fullmatch(commit):
        raise UsageError(
            f"{expression!r} names no commit of {spec!r} (unknown, or an ambiguous short id)",
            field="--base/--head",
        )
    return commit


def _take_bundle(path: Path, commit: str, *, label: str) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    _take(str(path), commit, label=label, key=digest.hexdigest()[:24], bundle=True)


def bundle_local(path: Path, commit: str, destination: Path, *, label: str) -> None:
    """A git bundle at `destination` of `commit` and its history in the local repository at
    `path` (what a fleet's store carries instead of a path on this host), made without running
    git in that repository: its objects are lent to a repository of the runner's own."""
    commit = commit.lower()
    if not _SHA.fullmatch(commit):
        raise RepositoryError(f"base commit {commit!r} is not a full 40-character commit id")
    with _lent(path, commit, label=label) as lend:
        run_git(["update-ref", "refs/heads/selfbench-base", commit], git_dir=lend)
        made = run_git(
            ["bundle", "create", "-q", str(destination), "refs/heads/selfbench-base"],
            git_dir=lend,
            check=False,
        )
        if made.returncode != 0:
            raise RepositoryError(f"cannot bundle repository {label}: {last_error(made)}")


def repository_spec(repo_option: str | None, definition_repo: str, task_dir: Path | None) -> str:
    """Where the task's repository is named: --repo when given; else definition.repo, a relative
    one looked up beside the task first (examples ship their repository as a git bundle there),
    then from the current directory."""
    if repo_option:
        return repo_option
    if task_dir is not None and not is_remote(definition_repo):
        beside = task_dir / definition_repo
        try:
            if os.path.lexists(beside):
                return str(beside)
        except (OSError, ValueError):  # a name too long for the filesystem is no repository
            pass
    return definition_repo


def resolve_repository(
    repo_option: str | None, definition_repo: str, commit: str, *, task_dir: Path | None = None
) -> Path:
    """The runner's store, holding `commit` taken from the task's repository.

    A relative definition.repo is looked up beside the task first (examples ship their
    repository as a git bundle there), then from the current directory.
    """
    source = "--repo" if repo_option else "definition.repo"
    commit = commit.lower()
    if not _SHA.fullmatch(commit):
        raise RepositoryError(f"base commit {commit!r} is not a full 40-character commit id")
    spec = repository_spec(repo_option, definition_repo, task_dir)
    spec = spec.removeprefix("file://")
    if is_remote(spec):
        key = hashlib.sha256(spec.encode()).hexdigest()[:24]
        _take(spec, commit, label=spec, key=key)
        return store()
    path = local_path(spec)
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        hint = "" if repo_option else "; pass --repo PATH|URL"
        raise RepositoryError(
            f"repository {spec!r} ({source}) is neither a local path nor a git URL{hint}"
        ) from None
    if stat.S_ISREG(info.st_mode):
        with path.open("rb") as handle:
            header = handle.read(16)
        if not header.startswith((b"# v2 git bundle", b"# v3 git bundle")):
            raise RepositoryError(f"repository {spec!r} ({source}) is a file but not a git bundle")
        _take_bundle(path.resolve(), commit, label=spec)
    elif stat.S_ISDIR(info.st_mode):
        _take_local(path, commit, label=spec)
    else:
        raise RepositoryError(
            f"repository {spec!r} ({source}) is {file_kind(info.st_mode)}, not a git "
            "repository or bundle"
        )
    return store()


def tree_of(repo: Path, commit: str) -> str:
    """The id of the commit's tree: what the commit holds, whatever repository it came from."""
    result = run_git(["rev-parse", "--verify", "-q", f"{commit}^{{tree}}"], git_dir=repo)
    return result.stdout.decode().strip()


def check_commit(repo: Path, commit: str, *, label: str) -> None:
    if not has_commit(repo, commit):
        raise RepositoryError(f"base commit {commit} not found in repository {label}")


def archive_key(repo: Path, commit: str) -> str:
    """What makes an archive's bytes: the commit (its tree, its time), the archive settings and
    the git that writes it. Objects in the store are checked against their ids when fetched,
    so no repository can put other content under another's key."""
    material = "\0".join((commit.lower(), tree_of(repo, commit), ARCHIVE_SETTINGS, git_version()))
    return hashlib.sha256(material.encode()).hexdigest()


def cached_archive(repo: Path, commit: str) -> Path:
    """The commit's archive, made once and copied by every later compile."""
    path = cache_root() / "archives" / f"{archive_key(repo, commit)}.tar.gz"
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
        git_command(["archive", "--format=tar", commit], git_dir=repo),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=git_environment(),
    )
    assert process.stdout is not None and process.stderr is not None
    with (
        destination.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as out,
    ):
        shutil.copyfileobj(process.stdout, out, 1 << 20)
    error = process.stderr.read().decode(errors="replace").strip()
    if process.wait() != 0:
        raise RepositoryError(f"git archive {commit} failed: {error}")


def changed_paths(ref: str) -> tuple[Path, list[Path]]:
    """The checkout around the current directory and the files changed in `ref...HEAD` (for
    `batch --changed-since`). This runs in the user's own checkout, so it reads that
    checkout's configuration; the fixed command line still keeps any command from running,
    and neither call touches the work tree or the index."""
    if ref.startswith("-"):
        raise UsageError("a git ref cannot start with '-'", field="--changed-since")
    here = Path.cwd()
    top = run_git(["rev-parse", "--show-toplevel"], cwd=here, check=False)
    if top.returncode != 0:
        raise UsageError("--changed-since needs a git checkout", field="--changed-since")
    diff = run_git(
        [
            "diff",
            "--name-only",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            f"{ref}...HEAD",
            "--",
        ],
        cwd=here,
        check=False,
    )
    if diff.returncode != 0:
        raise UsageError(
            f"git diff {ref}...HEAD failed: {last_error(diff)[:300]}", field="--changed-since"
        )
    root = Path(top.stdout.decode().strip()).resolve()
    return root, [root / line for line in diff.stdout.decode().splitlines() if line]
