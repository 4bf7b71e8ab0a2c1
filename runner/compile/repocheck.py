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

from runner.compile.git import run_git
from runner.compile.patches import apply_failure


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


def _not_applied(
    what: str,
    result: subprocess.CompletedProcess[bytes],
    patch: bytes,
    commit: str,
    command: str,
) -> str:
    """A refused patch: which hunk did not match, and the command that shows every one."""
    stderr = (result.stderr or b"").decode(errors="replace")
    return (
        f"{what}: {apply_failure(stderr, patch)}; to see each hunk, in a checkout of "
        f"baseCommit ({commit[:12]}): {command}"
    )


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
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="selfbench-apply.") as tmp:
        index = Path(tmp) / "index"
        env = {"GIT_INDEX_FILE": str(index)}

        def reset() -> None:
            run_git(["read-tree", commit], git_dir=repo, env=env)

        def apply(patch: bytes, *, check: bool) -> subprocess.CompletedProcess[bytes]:
            # -v: git then says what a refused hunk looked for (runner.compile.patches).
            args = ["apply", "--cached", "--binary", "--whitespace=nowarn", "-v"]
            return run_git(
                [*args, *(["--check"] if check else []), "-"],
                git_dir=repo,
                env=env,
                check=False,
                stdin=patch,
            )

        reset()
        gold = apply(gold_patch, check=False)
        if gold.returncode != 0:
            problems.append(
                _not_applied(
                    "gold.patch does not apply to baseCommit",
                    gold,
                    gold_patch,
                    commit,
                    "git apply --check -v gold.patch",
                )
            )
        reset()
        tests = apply(test_patch, check=True)
        if tests.returncode != 0:
            problems.append(
                _not_applied(
                    "test.patch does not apply to baseCommit",
                    tests,
                    test_patch,
                    commit,
                    "git apply --check -v test.patch",
                )
            )
        if gold.returncode == 0 and tests.returncode == 0:
            reset()
            apply(gold_patch, check=False)
            both = apply(test_patch, check=True)
            if both.returncode != 0:
                problems.append(
                    _not_applied(
                        "test.patch does not apply on top of gold.patch",
                        both,
                        test_patch,
                        commit,
                        "git apply gold.patch && git apply --check -v test.patch",
                    )
                )
        selector_problems: list[str] = []
        if selectors:
            reset()
            if tests.returncode == 0:
                apply(test_patch, check=False)
            selector_problems = _selector_problems(repo, env, selectors)
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
