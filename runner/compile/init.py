"""`init`: a task directory from a repository and a change (a pull request's base and head
commits). The change is split into test.patch (the files its ecosystem keeps tests in, or the
author's globs) and gold.patch (the rest); definition.json gets every field, filled from the
repository (its lockfiles and manifests propose the toolchains and commands, the held-out tests
the selectors, the change the difficulty) or marked for the author; then the task is audited,
and what the audit still misses is said.

Both commits are taken into the runner's own repository store (as verify takes a base commit):
git never runs in the author's repository, whose configuration is not the runner's to trust.
"""

from __future__ import annotations

import json
import posixpath
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base import validation as v
from runner.base.errors import RepositoryError, RunnerError, UsageError
from runner.base.safeio import read_regular, size_words, staged_directory
from runner.compile.git import OutputTooLargeError, git_output_bounded, run_git
from runner.compile.initrules import (
    PROPOSAL_FOLDERS,
    difficulty,
    is_test_file,
    is_test_path,
    proposal_files,
    propose,
    pull_request_number,
    selectors,
)
from runner.compile.patches import PatchParseError, parse_patch
from runner.compile.repository import (
    is_remote,
    local_path,
    resolve_repository,
    revision_commit,
)
from runner.compile.taskaudit import TaskAudit, audit_task
from runner.compile.taskdir import DEFINITION, GOLD_PATCH, TEST_PATCH, load_authored_task
from runner.runners import Proposal

_SHA = re.compile(r"[0-9a-f]{40}")
_SHORT = re.compile(r"[0-9a-f]{4,39}")
# A revision init reads: a name or an id, then parents and ancestors (`main~2`, `1a2b3c4^`).
_REVISION = re.compile(r"(?P<base>[A-Za-z0-9][A-Za-z0-9._/-]*)(?P<walk>(?:[~^][0-9]{0,4})*)")
MAX_PROPOSAL_FILE = 1 << 20
MAX_PASS_TO_PASS = 5
TODO = "TODO"


@dataclass(frozen=True, kw_only=True)
class InitResult:
    directory: Path
    definition: dict[str, Any]
    test_files: list[str]
    gold_files: list[str]
    proposal: Proposal | None
    # What the author must look at: each a field and why (filled by a guess, or marked TODO).
    notes: list[str] = field(default_factory=list)
    # The fields still marked TODO: the task is not ready until they are written.
    todo: list[str] = field(default_factory=list)
    audit: TaskAudit | None = None


def resolve_ref(spec: str, ref: str) -> str:
    """A commit id for `ref` in the repository `spec`: a full id as it is; a branch, tag or HEAD
    the repository advertises (`git ls-remote`, which reads its refs only); else what git makes
    of it as a revision, in a local repository: a short id, `REV^`, `REV~N` (runner.compile.
    repository.revision_commit, which lends its objects to a repository of the runner's own)."""
    if _SHA.fullmatch(ref.lower()):
        return ref.lower()
    if ref.startswith("-") or not ref:
        raise UsageError(f"{ref!r} is not a commit id or a ref name", field="--base/--head")
    refs = _advertised(spec)
    named = _named(refs, ref)
    if named is not None:
        return named
    parsed = _REVISION.fullmatch(ref)
    if parsed is None:
        raise UsageError(
            f"{ref!r} is neither a commit id nor a branch or tag of {spec!r}",
            field="--base/--head",
        )
    base, walk = parsed["base"], parsed["walk"]
    start = base.lower() if _SHA.fullmatch(base.lower()) else None
    if start is None and walk:
        start = _named(refs, base)
    if start is None and not _SHORT.fullmatch(base.lower()):
        raise UsageError(
            f"{base!r} is neither a commit id nor a branch or tag of {spec!r}",
            field="--base/--head",
        )
    return revision_commit(spec, f"{start or base.lower()}{walk}")


def _advertised(spec: str) -> dict[str, str]:
    """The refs the repository lists (`git ls-remote`, which reads its refs only), by name."""
    source = spec if is_remote(spec) else str(local_path(spec).resolve())
    listed = run_git(["ls-remote", "--", source], check=False)
    if listed.returncode != 0:
        raise RepositoryError(f"cannot list the refs of {spec!r}: {listed.stderr.decode()[-300:]}")
    refs: dict[str, str] = {}
    for line in listed.stdout.decode(errors="replace").splitlines():
        sha, _, name = line.partition("\t")
        refs[name] = sha
    return refs


def _named(refs: dict[str, str], ref: str) -> str | None:
    """The commit a branch, tag or HEAD named `ref` points at (an annotated tag's commit)."""
    for name in (f"refs/tags/{ref}^{{}}", ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
        if name in refs:
            return refs[name]
    return None


def _show(store: Path, commit: str, path: str) -> bytes | None:
    result = run_git(["cat-file", "blob", f"{commit}:{path}"], git_dir=store, check=False)
    if result.returncode != 0 or len(result.stdout) > MAX_PROPOSAL_FILE:
        return None
    return result.stdout


def _split(diff: bytes, globs: tuple[str, ...]) -> tuple[bytes, bytes, list[str], list[str]]:
    """(test.patch, gold.patch, test paths, gold paths) of the change."""
    try:
        info = parse_patch(diff)
    except PatchParseError as exc:
        raise RepositoryError(f"the change's diff could not be read: {exc}") from None
    tests, gold, test_paths, gold_paths = [], [], [], []
    for change in info.changes:
        path = change.new_path or change.old_path or ""
        if is_test_path(path, globs):
            tests.append(change.raw)
            test_paths.append(path)
        else:
            gold.append(change.raw)
            gold_paths.append(path)
    return b"".join(tests), b"".join(gold), test_paths, gold_paths


def init_task(
    spec: str,
    base: str,
    head: str,
    out: Path,
    *,
    test_globs: tuple[str, ...] = (),
    task_id: str | None = None,
    source_url: str | None = None,
    source_pr: int | None = None,
    prompt: str | None = None,
) -> InitResult:
    """Write the task for the change base..head of the repository `spec` to `out` (a new or
    empty directory, written whole or not at all), then audit it."""
    base_sha, head_sha = resolve_ref(spec, base), resolve_ref(spec, head)
    store = resolve_repository(spec, spec, base_sha)
    resolve_repository(spec, spec, head_sha)
    # A task's test and gold patches are each at most MAX_PATCH_BYTES: a diff over twice that
    # cannot make one, and is refused before it is read whole.
    limit = 2 * v.MAX_PATCH_BYTES
    try:
        diff = git_output_bounded(
            ["diff", "--binary", "--full-index", "--no-renames", "--no-ext-diff",
             "--no-textconv", base_sha, head_sha],
            git_dir=store,
            limit=limit,
        )  # fmt: skip
    except OutputTooLargeError:
        raise UsageError(
            f"the change {base}..{head} is over {size_words(limit)} as a patch: a task's test "
            f"and gold patches are each at most {size_words(v.MAX_PATCH_BYTES)}",
            field="--head",
        ) from None
    if not diff.strip():
        raise UsageError(f"no change between {base} and {head}", field="--head")

    test_patch, gold_patch, test_paths, gold_paths = _split(diff, test_globs)
    if not test_paths:
        raise UsageError(
            "no changed file is a test by the default rules: name them with --test-glob "
            f"(changed: {', '.join(gold_paths[:10])})",
            field="--test-glob",
        )
    if not gold_paths:
        raise UsageError(
            "every changed file is a test: the change has no implementation (narrow the tests "
            "with --test-glob)",
            field="--test-glob",
        )
    # The root's files, and those of the folders where CI files and test requirements live.
    names = run_git(["ls-tree", "--name-only", "-z", head_sha], git_dir=store).stdout
    names += run_git(
        ["ls-tree", "-r", "--name-only", "-z", head_sha, "--", *PROPOSAL_FOLDERS], git_dir=store
    ).stdout
    wanted = proposal_files(n.decode("utf-8", "replace") for n in names.split(b"\0") if n)
    files = {n: data for n in wanted if (data := _show(store, head_sha, n)) is not None}
    proposal = propose(files)
    document, notes = _definition(
        store, spec, base_sha, head_sha, proposal, test_paths, gold_patch, task_id=task_id,
        source_url=source_url, source_pr=source_pr, prompt=prompt,
    )  # fmt: skip
    with staged_directory(out) as staged:
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        (staged / DEFINITION).write_text(text, encoding="utf-8")
        (staged / TEST_PATCH).write_bytes(test_patch)
        (staged / GOLD_PATCH).write_bytes(gold_patch)
        load_authored_task(staged)  # an invalid field (a --task-id) leaves nothing written
    audited = audit_task(load_authored_task(out), spec)
    return InitResult(
        directory=out,
        definition=document,
        test_files=test_paths,
        gold_files=gold_paths,
        proposal=proposal,
        notes=notes,
        todo=[key for key, value in document.items() if isinstance(value, str) and TODO in value],
        audit=audited,
    )


def _definition(
    store: Path,
    spec: str,
    base: str,
    head: str,
    proposal: Proposal | None,
    test_paths: list[str],
    gold_patch: bytes,
    *,
    task_id: str | None,
    source_url: str | None,
    source_pr: int | None,
    prompt: str | None,
) -> tuple[dict[str, Any], list[str]]:
    notes: list[str] = []
    runner = proposal.runner if proposal else ""
    held_out = [p for p in test_paths if is_test_file(p, runner)] or test_paths
    fail_to_pass = selectors(held_out, runner) or held_out
    pass_to_pass = _beside(store, base, held_out, runner, fail_to_pass)
    messages = run_git(
        ["log", "--format=%B", f"{base}..{head}"], git_dir=store, check=False
    ).stdout.decode(errors="replace")
    pr = source_pr or pull_request_number(messages)
    info = parse_patch(gold_patch)
    # As the audit counts them (runner.compile.audit): every file of the gold patch.
    level = difficulty(len(info.changes), info.changed_lines, len(pass_to_pass))
    repo, origin = portable_repo(spec)
    name = task_id or _task_id(repo, head)
    document: dict[str, Any] = {
        "schemaVersion": 1,
        "difficulty": level.value,
        "taskId": name,
        "repo": repo,
        "baseCommit": base,
        "workdir": ".",
        "setupCommand": proposal.setup_command if proposal else "true",
        "testCommand": proposal.test_command if proposal else "bash run-tests.sh {tests}",
        "failToPass": fail_to_pass,
        "passToPass": pass_to_pass,
        "testPaths": test_paths,
        "toolchains": proposal.toolchains if proposal else ["uv"],
        "sourcePr": pr or 1,
        "sourceUrl": source_url or _source_url(repo, pr),
        "prompt": prompt
        or f"{TODO}: what the agent is asked to do (the behaviour, not the fix). The "
        f"change's commit messages:\n\n{messages.strip()[:4000] or '(none)'}",
        "timeouts": {"setupSeconds": 600, "agentSeconds": 1800, "testsSeconds": 600},
        "resources": {"cpus": 1, "memoryMb": 2048, "storageMb": 4096},
    }
    notes.extend(_repo_note(repo, origin))
    if prompt is None:
        notes.append("prompt: marked TODO; write what the agent is asked to do (--prompt)")
    if proposal is None:
        notes.append(
            "setupCommand, testCommand, toolchains: no lockfile or manifest said how the "
            "project builds and tests; the values are placeholders"
        )
    else:
        notes.append(
            f"setupCommand, testCommand, toolchains: proposed from {', '.join(proposal.found)}; "
            "check them against the project's CI"
        )
    notes.append(
        "passToPass: tests beside the held-out ones at the base; check they pass"
        if pass_to_pass
        else "passToPass: no test beside the held-out ones at the base; name some"
    )
    if pr is None and source_pr is None:
        notes.append("sourcePr: not named by the commit messages; set it (--source-pr)")
    if source_url is None:
        notes.append("sourceUrl: guessed from the repository; set it (--source-url)")
    notes.append(f"difficulty: {level.value}, from the change's size (the audit's minimums)")
    return document, notes


_ORIGIN = re.compile(r'^\s*\[remote\s+"origin"\]\s*$((?:\n(?!\s*\[).*)*)', re.MULTILINE)
_URL = re.compile(r"^\s*url\s*=\s*(\S+)\s*$", re.MULTILINE)


def portable_repo(spec: str) -> tuple[str, bool]:
    """What definition.repo says of the repository `spec`: a URL as it is; a local repository's
    `origin` URL when its config names one (read as text, never by running git there; any
    credentials in it dropped), so the task means the same on another machine; else the path.
    The flag: the origin was taken."""
    if is_remote(spec):
        return spec, False
    path = local_path(spec)
    for config in (path / ".git" / "config", path / "config"):
        try:
            text = read_regular(config, limit=1 << 20).decode("utf-8", "replace")
        except RunnerError:
            continue
        section = _ORIGIN.search(text)
        url = _URL.search(section.group(1)) if section else None
        if url and is_remote(url.group(1)):
            parts = urllib.parse.urlsplit(url.group(1))
            if parts.scheme and "@" in parts.netloc:
                parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
            return urllib.parse.urlunsplit(parts) if parts.scheme else url.group(1), True
    return spec, False


def _beside(
    store: Path, base: str, held_out: list[str], runner: str, fail_to_pass: list[str]
) -> list[str]:
    """passToPass: up to MAX_PASS_TO_PASS selectors of the tests beside the held-out ones at the
    base (their directories)."""
    listed = run_git(["ls-tree", "-r", "--name-only", "-z", base], git_dir=store).stdout
    at_base = [p.decode(errors="replace") for p in listed.split(b"\0") if p]
    directories = {posixpath.dirname(p) for p in held_out}
    beside = [
        p
        for p in at_base
        if posixpath.dirname(p) in directories and is_test_file(p, runner) and p not in held_out
    ]
    return [s for s in selectors(beside, runner) if s not in fail_to_pass][:MAX_PASS_TO_PASS]


def _repo_note(repo: str, origin: bool) -> list[str]:
    if origin:
        return [f"repo: the local repository's origin, {repo} (its commits are in the store)"]
    if not is_remote(repo):
        return [f"repo: a path on this machine ({repo}); name its URL to share the task"]
    return []


def _task_id(spec: str, head: str) -> str:
    stem = re.sub(r"\.git$", "", spec.rstrip("/").rsplit("/", 1)[-1]) or "task"
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")[:40] or "task"
    return f"{stem}-{head[:8]}"


def _source_url(spec: str, pr: int | None) -> str:
    if spec.startswith("https://"):
        base = re.sub(r"\.git$", "", spec.rstrip("/"))
        return f"{base}/pull/{pr}" if pr else base
    return f"https://example.invalid/{TODO}/pull/{pr or 1}"
