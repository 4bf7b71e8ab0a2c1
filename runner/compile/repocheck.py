"""What the task's files are checked against in its repository: the base commit exists, the
patches apply there (and the held-out tests are new or changed), the paths they name exist at
the base."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.errors import printable
from runner.compile.git import run_git
from runner.compile.patches import HUNK_HEADER, PatchParseError, parse_patch


@dataclass(frozen=True, kw_only=True)
class RepositoryFacts:
    """What compile learned from the repository at the base commit, for the audit."""

    workdir_problem: str | None = None
    apply_problems: list[str] = field(default_factory=list)
    evidence_problems: list[str] = field(default_factory=list)
    selector_problems: list[str] = field(default_factory=list)
    # Of the coupling candidates asked about, those the base tree already holds.
    present_at_base: frozenset[str] = frozenset()

    @property
    def problems(self) -> list[str]:
        return [
            *([self.workdir_problem] if self.workdir_problem else []),
            *self.apply_problems,
            *self.evidence_problems,
            *self.selector_problems,
        ]


@dataclass(frozen=True, kw_only=True)
class SelectorCheck:
    """A path-like selector: the path it names (from the repository root) and the names it adds
    inside that file (a pytest node id's class and test), each of which must be there."""

    label: str
    path: str
    names: tuple[str, ...] = ()


def object_type(repo: Path, commit: str, path: str) -> str | None:
    """`tree`, `blob`, `commit` (a gitlink) or None for `commit:path`."""
    if path in ("", "."):
        return "tree"
    result = run_git(["cat-file", "-t", f"{commit}:{path}"], git_dir=repo, check=False)
    return result.stdout.decode().strip() or None if result.returncode == 0 else None


_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$")


def apply_failure(stderr: str, raw: bytes) -> str:
    """What `git apply` refused, for a person: the file and the hunk (its number and header)
    that did not match, and the lines git looked for, from git's own error and the patch. Falls
    back to git's first two lines when it names no hunk (a missing file, a mode)."""
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not line.startswith(("Checking patch ", "Applied patch ", "Hunk #"))
    ]
    failed = next((m for line in lines if (m := _FAILED_AT.match(line))), None)
    if failed is None:
        return "; ".join(lines[:2]) or "git apply failed"
    path, start = failed.group(1), int(failed.group(2))
    searched: list[str] = []
    if "error: while searching for:" in stderr:
        after = stderr.split("error: while searching for:", 1)[1].split("\nerror:", 1)[0]
        searched = [line for line in after.strip("\n").splitlines() if line.strip()][:3]
    where = f"{path}:{start}"
    try:
        section = next(c.raw for c in parse_patch(raw).changes if path in (c.old_path, c.new_path))
    except (PatchParseError, StopIteration):
        section = b""
    headers = [
        (int(m.group(1)), line)
        for line in section.decode(errors="replace").splitlines()
        if (m := HUNK_HEADER.match(line))
    ]
    for number, (old_start, header) in enumerate(headers, 1):
        if old_start == start:
            where = f"hunk {number} of {len(headers)} in {path} ({header.strip()})"
            break
    looked = f"; git looked for: {' / '.join(printable(s.strip())[:80] for s in searched)}"
    return printable(f"{where} does not match the file{looked if searched else ''}")


@dataclass(frozen=True)
class _Index:
    """A temporary index of `commit`: patches are applied to it (`git apply --cached`), never
    to a work tree."""

    repo: Path
    commit: str
    path: Path

    @property
    def env(self) -> dict[str, str]:
        return {"GIT_INDEX_FILE": str(self.path)}

    def reset(self) -> None:
        run_git(["read-tree", self.commit], git_dir=self.repo, env=self.env)

    def apply(self, patch: bytes, *, check: bool) -> subprocess.CompletedProcess[bytes]:
        # -v: git then says what a refused hunk looked for (apply_failure).
        args = ["apply", "--cached", "--binary", "--whitespace=nowarn", "-v"]
        return run_git(
            [*args, *(["--check"] if check else []), "-"],
            git_dir=self.repo,
            env=self.env,
            check=False,
            stdin=patch,
        )


def _refused(
    index: _Index, patch: bytes, *, what: str, command: str, on: bytes | None = None
) -> str | None:
    """Whether `patch` applies at the base commit (on top of `on` when given): None, or the
    problem naming the hunk that did not match and the command that shows every one."""
    index.reset()
    if on is not None:
        index.apply(on, check=False)
    result = index.apply(patch, check=True)
    if result.returncode == 0:
        return None
    stderr = (result.stderr or b"").decode(errors="replace")
    return (
        f"{what}: {apply_failure(stderr, patch)}; to see each hunk, in a checkout of "
        f"baseCommit ({index.commit[:12]}): {command}"
    )


def _apply_problems(index: _Index, gold_patch: bytes, test_patch: bytes) -> tuple[list[str], bool]:
    """Each patch alone at the base commit, then the tests on top of the gold patch (as the
    oracle applies them): the problems, and whether test.patch applies alone."""
    gold = _refused(
        index,
        gold_patch,
        what="gold.patch does not apply to baseCommit",
        command="git apply --check -v gold.patch",
    )
    tests = _refused(
        index,
        test_patch,
        what="test.patch does not apply to baseCommit",
        command="git apply --check -v test.patch",
    )
    both = None
    if gold is None and tests is None:
        both = _refused(
            index,
            test_patch,
            on=gold_patch,
            what="test.patch does not apply on top of gold.patch",
            command="git apply gold.patch && git apply --check -v test.patch",
        )
    return [p for p in (gold, tests, both) if p is not None], tests is None


def check_repository(
    repo: Path,
    commit: str,
    *,
    workdir: str,
    test_patch: bytes,
    gold_patch: bytes,
    evidence: Sequence[str] = (),
    coupling_needles: Sequence[str] = (),
    selectors: Sequence[SelectorCheck] = (),
) -> RepositoryFacts:
    """The workdir is a directory at `commit`, and both patches apply there: each alone, and
    the held-out tests on top of the gold patch (as the oracle applies them). `git apply
    --check` runs against a temporary index, so no checkout is needed. `selectors`: the
    path-like selectors, each of which must name a file or directory of the base commit with
    test.patch applied (and the names it adds must occur in that file)."""
    kind = object_type(repo, commit, workdir)
    workdir_problem = None
    if kind is None:
        workdir_problem = f"workdir {workdir!r} does not exist at baseCommit"
    elif kind != "tree":
        what = "a submodule" if kind == "commit" else "a file"
        workdir_problem = f"workdir {workdir!r} is {what} at baseCommit, not a directory"
    with tempfile.TemporaryDirectory(prefix="selfbench-apply.") as tmp:
        index = _Index(repo, commit, Path(tmp) / "index")
        problems, tests_apply = _apply_problems(index, gold_patch, test_patch)
        selector_problems: list[str] = []
        if selectors:
            index.reset()
            if tests_apply:
                index.apply(test_patch, check=False)
            selector_problems = _selector_problems(repo, index.env, selectors)
    evidence_problems = [
        f"evidence path {path!r} does not exist at baseCommit"
        for path in dict.fromkeys(evidence)
        if object_type(repo, commit, path) is None
    ]
    return RepositoryFacts(
        workdir_problem=workdir_problem,
        apply_problems=problems,
        evidence_problems=evidence_problems,
        selector_problems=selector_problems,
        present_at_base=present_in_tree(repo, commit, coupling_needles),
    )


def _selector_problems(
    repo: Path, env: dict[str, str], selectors: Sequence[SelectorCheck]
) -> list[str]:
    """What each selector names that the index (the base commit and test.patch) does not hold."""
    listed = run_git(
        ["ls-files", "-z", "--cached", "--", *{c.path for c in selectors}],
        git_dir=repo,
        env={**env, "GIT_LITERAL_PATHSPECS": "1"},
        check=False,
    )
    present = set(listed.stdout.decode(errors="replace").split("\0"))
    problems: list[str] = []
    for check in selectors:
        if check.path != "." and not any(
            p == check.path or p.startswith(check.path + "/") for p in present
        ):
            problems.append(
                f"{check.label} names {check.path}, which is neither in baseCommit nor added "
                "by test.patch (a typo would select no test)"
            )
            continue
        if not check.names or check.path not in present:
            continue
        blob = run_git(["show", f":{check.path}"], git_dir=repo, env=env, check=False)
        text = blob.stdout.decode(errors="replace")
        missing = [n for n in check.names if not re.search(rf"\b{re.escape(n)}\b", text)]
        if missing:
            problems.append(
                f"{check.label}: {', '.join(missing)} does not occur in {check.path} "
                "(a typo would select no test)"
            )
    return problems


def present_in_tree(repo: Path, commit: str, needles: Sequence[str]) -> frozenset[str]:
    """Which of these fixed strings occur anywhere in the commit's tree (one `git grep`)."""
    wanted = {n for n in needles if n and "\n" not in n}
    if not wanted:
        return frozenset()
    args = ["grep", "-F", "-o", "-h", "-I", "--no-color"]
    for needle in sorted(wanted):
        args += ["-e", needle]
    result = run_git([*args, commit, "--"], git_dir=repo, check=False)
    found = {line for line in result.stdout.decode(errors="replace").splitlines()}
    return frozenset(wanted & found)
