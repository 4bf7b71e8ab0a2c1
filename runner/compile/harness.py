"""The test harness of a task (pure): the files its test command runs or that configure the test
runner. A reference solution that changes them is judged by a harness it rewrote (seen: a gold
patch that implemented nothing and rewrote the runner script to print PASS was accepted), so
the audit blocks it.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re

from runner.base import validation as v
from runner.compile.patches import FileChange, PatchInfo, repository_path
from runner.model.shell import words
from runner.model.task import TESTS_PLACEHOLDER, TaskDefinition

# Files that configure or hook into a test runner wherever they are.
HARNESS_NAMES = frozenset(
    {
        "conftest.py",
        "bunfig.toml",
        "pytest.ini",
        "tox.ini",
        "noxfile.py",
        "sitecustomize.py",
        "usercustomize.py",
        ".mocharc.js",
        ".mocharc.cjs",
        ".mocharc.json",
        ".mocharc.yml",
        ".mocharc.yaml",
        "karma.conf.js",
        ".busted",
        "phpunit.xml",
        "phpunit.xml.dist",
        ".rspec",
    }
)
HARNESS_GLOBS = (
    "jest.config.*",
    "jest.setup.*",
    "vitest.config.*",
    "vitest.workspace.*",
    "vitest.setup.*",
    "playwright.config.*",
    "cypress.config.*",
    "ava.config.*",
)
# Files with a test runner's section among other things: a change to those lines only.
HARNESS_KEYS: dict[str, tuple[str, ...]] = {
    "pyproject.toml": (
        "[tool.pytest",
        "addopts",
        "testpaths",
        "python_files",
        "python_classes",
        "python_functions",
        "norecursedirs",
    ),
    "setup.cfg": ("[tool:pytest]", "addopts", "testpaths", "python_files", "norecursedirs"),
    "package.json": ('"test"', '"jest"', '"mocha"', '"vitest"', '"ava"', '"pretest"', '"posttest"'),
    "go.mod": ("replace ",),
    "Cargo.toml": ("[[test]]", "harness"),
}
SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".php")
MAKE = ("make", "gmake")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def is_harness_name(path: str) -> bool:
    name = posixpath.basename(path)
    return name in HARNESS_NAMES or any(fnmatch.fnmatchcase(name, g) for g in HARNESS_GLOBS)


def command_files(test_command: str, workdir: str) -> list[str]:
    """Repository paths the test command runs: scripts it names, the Makefile of `make`."""
    found: list[tuple[str, str]] = []  # (path, the directory it is relative to)
    base = workdir
    tokens = [t for t in words(test_command) if TESTS_PLACEHOLDER not in t]
    skip = False
    for index, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        if not token or token.startswith("-") or _ASSIGNMENT.match(token) or "$" in token:
            continue
        starts_command = index == 0 or tokens[index - 1] in ("&&", "||", ";", "|", "(")
        if token == "cd" and starts_command and index + 1 < len(tokens):
            target = tokens[index + 1]
            if v.path_problem(target, base=base) is None:
                base = v.normalize_repo_path(target, base=base)
            skip = True
            continue
        if token in MAKE and starts_command:
            found += [(name, base) for name in ("Makefile", "makefile", "GNUmakefile")]
            continue
        looks_like_path = "/" in token or token.endswith(SCRIPT_SUFFIXES)
        if looks_like_path and not token.startswith(("/", "~")) and "://" not in token:
            found.append((token, base))
    out = []
    for path, relative_to in found:
        if v.path_problem(path, base=relative_to) is None:
            out.append(v.normalize_repo_path(path, base=relative_to))
    return list(dict.fromkeys(out))


def selector_files(selectors: list[str], workdir: str) -> list[str]:
    """Repository files the test selectors name (`tests/test_a.py::test_x` names
    tests/test_a.py): a pass-to-pass test the agent edits proves nothing."""
    out = []
    for selector in selectors:
        path = selector.split("::", 1)[0]
        name = posixpath.basename(path)
        if "." not in name.strip(".") or path.startswith(("/", "~", "-")) or "$" in path:
            continue  # a directory, a Go package pattern, an option or a test name
        if v.path_problem(path, base=workdir) is None:
            out.append(v.normalize_repo_path(path, base=workdir))
    return list(dict.fromkeys(out))


def matches(path: str, patterns: list[str]) -> bool:
    """A contract pattern against a repository path: `*` crosses `/` (bash's [[ == ]])."""
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def _changed_lines(change: FileChange) -> list[str]:
    lines = []
    for raw in change.raw.decode("utf-8", "replace").splitlines():
        if raw.startswith(("+++", "---")):
            continue
        if raw.startswith(("+", "-")):
            lines.append(raw[1:])
    return lines


def harness_changes(definition: TaskDefinition, gold: PatchInfo) -> list[str]:
    """Audit blockers: each gold file that the test command runs or that configures the test
    runner (for mixed files, only when the changed lines are the test runner's)."""
    named = set(command_files(definition.test_command, definition.workdir))
    held_out = [repository_path(definition.workdir, p) for p in definition.test_paths]
    selected = {
        path
        for path in selector_files(
            [*definition.fail_to_pass, *definition.pass_to_pass], definition.workdir
        )
        if not any(v.covers(held, path) for held in held_out)
    }
    contract = definition.environment
    allow = list(contract.harness_allow) if contract else []
    protect = list(contract.harness_protect) if contract else []
    blockers = []
    for change in gold.changes:
        for path in change.paths:
            normalized = v.normalize_repo_path(path)
            name = posixpath.basename(normalized)
            why = None
            if matches(normalized, allow):
                continue
            if normalized in named:
                why = "which the test command runs"
            elif normalized in selected:
                why = "which a test selector names"
            elif matches(normalized, protect):
                why = "which the environment contract's harnessProtect lists"
            elif is_harness_name(normalized):
                why = "which configures the test runner"
            elif name in HARNESS_KEYS:
                keys = HARNESS_KEYS[name]
                if any(k in line for line in _changed_lines(change) for k in keys):
                    why = "in the lines that configure the test runner"
            if why is not None:
                blockers.append(
                    f"gold.patch changes {path}, {why}: a reference solution must not change "
                    "the test harness"
                )
                break
    return blockers
