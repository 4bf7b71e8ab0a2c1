"""`init`'s rules, pure: which changed files are tests, what the repository's files say about its
setup and test commands, the selectors a runner takes for the held-out tests, and the
difficulty the audit would give. runner.compile.init reads the repository and writes the task.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import posixpath
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from runner.compile.audit import PROFILES
from runner.model.task import Difficulty

# Where each ecosystem keeps its tests, as globs on repository paths (a `**/` prefix matches at
# any depth, the root included). A file of the change that matches one goes to test.patch.
TEST_GLOBS: tuple[str, ...] = (
    # Python
    "**/test_*.py",
    "**/*_test.py",
    "**/tests/**",
    "**/test/**",
    "**/conftest.py",
    # JavaScript and TypeScript
    "**/*.test.*",
    "**/*.spec.*",
    "**/__tests__/**",
    # Go (and its fixtures)
    "**/*_test.go",
    "**/testdata/**",
    # Rust's integration tests are tests/**; Ruby
    "**/spec/**",
    "**/*_spec.rb",
)
# The files a proposal reads at the head commit.
PROPOSAL_FILES = (
    "pyproject.toml",
    "uv.lock",
    "requirements.txt",
    "requirements-dev.txt",
    "setup.py",
    "package.json",
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "bun.lockb",
    "bun.lock",
    "go.mod",
    "Cargo.toml",
)
PR_NUMBER = re.compile(r"(?:Merge pull request #|\(#)(\d{1,9})\b")


def _glob_match(path: str, pattern: str) -> bool:
    if pattern.startswith("**/"):
        rest = pattern[3:]
        return fnmatch.fnmatchcase(path, rest) or fnmatch.fnmatchcase(path, pattern)
    return fnmatch.fnmatchcase(path, pattern)


def is_test_path(path: str, globs: Sequence[str] = TEST_GLOBS) -> bool:
    """Whether a changed file is a test (or a test fixture): it goes to test.patch."""
    return any(_glob_match(path, g) for g in globs)


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """What the repository's files suggest: its toolchains, its setup and test commands, and
    the runner that takes the selectors ("" when none is known)."""

    toolchains: list[str]
    setup_command: str
    test_command: str
    runner: str
    found: list[str] = field(default_factory=list)  # the files it read, for the author


def _json(data: bytes | None) -> dict[str, object]:
    try:
        parsed = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _node(files: Mapping[str, bytes]) -> Proposal:
    package = _json(files.get("package.json"))
    deps: dict[str, object] = {}
    for key in ("dependencies", "devDependencies"):
        value = package.get(key)
        if isinstance(value, dict):
            deps.update(value)
    if "bun.lockb" in files or "bun.lock" in files:
        return Proposal(
            toolchains=["bun"],
            setup_command="bun install --frozen-lockfile",
            test_command="bun test {tests}",
            runner="bun",
        )
    setup = "npm ci" if "package-lock.json" in files else "npm install --no-audit --no-fund"
    if "vitest" in deps:
        test, runner = "npx vitest run {tests}", "vitest"
    elif "jest" in deps:
        test, runner = "npx jest {tests}", "jest"
    else:
        test, runner = "npm test -- {tests}", ""
    return Proposal(toolchains=["node"], setup_command=setup, test_command=test, runner=runner)


def _python(files: Mapping[str, bytes]) -> Proposal:
    test = ".venv/bin/python -m pytest {tests}"
    if "uv.lock" in files:
        setup = "uv sync --frozen"
    elif "requirements.txt" in files or "requirements-dev.txt" in files:
        wanted = [n for n in ("requirements.txt", "requirements-dev.txt") if n in files]
        setup = "uv venv .venv && uv pip install --python .venv " + " ".join(
            f"-r {name}" for name in wanted
        )
    else:
        setup = "uv venv .venv && uv pip install --python .venv -e . pytest"
    try:
        project = tomllib.loads(files.get("pyproject.toml", b"").decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        project = {}
    uses_pytest = "pytest" in json.dumps(project) or b"pytest" in files.get(
        "requirements-dev.txt", b""
    ) + files.get("requirements.txt", b"")
    if not uses_pytest and "uv.lock" not in files:
        test = ".venv/bin/python -m unittest {tests}"
    # The python toolchain (CPython 3.11 to 3.13 installed by uv, which it implies): a base image
    # need not have any Python, and uv then finds these before downloading one of its own.
    return Proposal(
        toolchains=["python"],
        setup_command=setup,
        test_command=test,
        runner="pytest" if "pytest" in test else "unittest",
    )


def propose(files: Mapping[str, bytes]) -> Proposal | None:
    """Commands from the repository's own files at the head commit (those of PROPOSAL_FILES
    that exist), or None when none says anything."""
    found = sorted(name for name in files if name in PROPOSAL_FILES)
    proposal: Proposal | None = None
    if "go.mod" in files:
        proposal = Proposal(
            toolchains=["go"],
            setup_command="go mod download",
            test_command="go test {tests}",
            runner="go",
        )
    elif "Cargo.toml" in files:
        proposal = Proposal(
            toolchains=["rust"],
            setup_command="cargo fetch",
            test_command="cargo test {tests}",
            runner="cargo",
        )
    elif "package.json" in files:
        proposal = _node(files)
    elif any(n in files for n in ("pyproject.toml", "uv.lock", "requirements.txt", "setup.py")):
        proposal = _python(files)
    return None if proposal is None else dataclasses.replace(proposal, found=found)


def selectors(paths: Iterable[str], runner: str) -> list[str]:
    """The selectors naming `paths` (test files) for `runner`: Go takes packages (`./dir`),
    cargo an integration test's name, the others the files."""
    chosen: list[str] = []
    for path in paths:
        if runner == "go":
            if not path.endswith("_test.go"):
                continue
            directory = posixpath.dirname(path)
            selector = f"./{directory}" if directory else "."
        elif runner == "cargo":
            if not (path.startswith("tests/") and path.endswith(".rs")):
                continue
            selector = posixpath.splitext(posixpath.basename(path))[0]
        else:
            selector = path
        if selector not in chosen:
            chosen.append(selector)
    return chosen


def is_test_file(path: str, runner: str) -> bool:
    """Whether a path (held-out or at the base) is a file the runner runs as tests, not a
    fixture beside them."""
    name = posixpath.basename(path)
    if runner in ("pytest", "unittest"):
        return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    if runner == "go":
        return name.endswith("_test.go")
    if runner == "cargo":
        return path.startswith("tests/") and name.endswith(".rs")
    return bool(re.search(r"\.(test|spec)\.[cm]?[jt]sx?$", name))


def difficulty(implementation_files: int, changed_lines: int, pass_to_pass: int) -> Difficulty:
    """The highest difficulty whose minimums (runner.compile.audit.PROFILES) the change meets;
    easy when it meets none (the audit then says what is short)."""
    for level in (Difficulty.HARD, Difficulty.MEDIUM):
        profile = PROFILES[level]
        if (
            implementation_files >= profile.min_files
            and changed_lines >= profile.min_changed_lines
            and pass_to_pass >= profile.min_pass_to_pass
        ):
            return level
    return Difficulty.EASY


def pull_request_number(messages: str) -> int | None:
    """The pull request a change came from, as its merge or squash commit names it."""
    found = PR_NUMBER.search(messages)
    return int(found.group(1)) if found else None
