"""The test runners a task's test command starts, read from the command (pure).

The verifier loads its per-test reporters for every runner it knows whatever the command says;
this list only decides what a run with no evidence at all means: for a runner named here, that
the suite did not run (a failure); for a custom script, that the task is judged by exit codes
("exit-code evidence only"). A runner the command reaches through a package script (`npm test`)
is found by the evidence it leaves instead.
"""

from __future__ import annotations

import posixpath

from runner.model.shell import words
from runner.model.task import TESTS_PLACEHOLDER

KNOWN_RUNNERS = ("pytest", "unittest", "jest", "vitest", "mocha", "bun", "node-test", "go", "cargo")
_NODE_BINARIES = ("jest", "vitest", "mocha")

# The runners whose per-test evidence the project's hack corpus proves against every canned
# exploit, on every change to the verifier: tests/integration/test_verdicts.py grades each
# exploit's patch of every class through `grade` on a task of each (and keeps this list equal
# to the runners it covers). Where a task's fail-to-pass runs are judged by these alone, an
# exploit the patch policy leaves in the tree is proved for the runner, not run again.
PROVEN_RUNNERS = ("pytest", "jest", "go")


def expected_runners(command: str) -> list[str]:
    """The known runners the command starts, in the order of KNOWN_RUNNERS."""
    names = [posixpath.basename(w) for w in words(command) if TESTS_PLACEHOLDER not in w]
    found: set[str] = set()
    for index, name in enumerate(names):
        following = names[index + 1] if index + 1 < len(names) else ""
        if name in ("pytest", "py.test") or (name == "-m" and following == "pytest"):
            found.add("pytest")
        elif (name == "-m" and following == "unittest") or (
            name == "manage.py" and following == "test"
        ):
            found.add("unittest")
        elif name in _NODE_BINARIES:
            found.add(name)
        elif name in ("bun", "bunx") and following == "test":
            found.add("bun")
        elif name == "node" and "--test" in names[index + 1 :]:
            found.add("node-test")
        elif name == "go" and following == "test":
            found.add("go")
        elif name == "cargo" and following == "test":
            found.add("cargo")
    return [runner for runner in KNOWN_RUNNERS if runner in found]


_PATTERN_RUNNERS = ("jest", "vitest", "bun", "cargo", "unittest")


def selector_path(runner: str | None, selector: str) -> str | None:
    """The path a selector names, relative to the workdir, or None when it names none (a
    pattern, a test name, a module, an import path). `runner`: the known runner that takes it,
    None for a custom command. The verifier's helper reads selectors the same way
    (`selector_path` in verifier.pl)."""
    if not selector or selector.startswith("-"):
        return None
    if runner == "pytest":
        return selector.split("::", 1)[0] or None
    if runner == "go":
        if not (selector in (".", "..") or selector.startswith(("./", "../"))):
            return None
        directory = selector.removesuffix("...").rstrip("/")
        return directory or "."
    if runner in _PATTERN_RUNNERS or any(c in selector for c in "*?[{"):
        return None
    path = selector
    head, _, tail = path.rpartition(":")
    if head and tail.isdigit():  # file:line (mocha, node --test)
        path = head
        head, _, tail = path.rpartition(":")
        if head and tail.isdigit():
            path = head
    name = posixpath.basename(path)
    stem, dot, extension = name.rpartition(".")
    return path if stem and dot and extension.isalnum() else None


def selector_names(runner: str | None, selector: str) -> list[str]:
    """The names a pytest node id adds to its file (`file::Class::test[param]` gives `Class`
    and `test`): each must occur in that file."""
    if runner != "pytest" or "::" not in selector:
        return []
    return [part.split("[", 1)[0] for part in selector.split("::")[1:] if part.split("[", 1)[0]]


def selector_paths(
    command: str, workdir: str, selectors: list[str]
) -> list[tuple[int, str, list[str]]]:
    """(index, repository path, names in that file) of each path-like selector of one list."""
    runners: list[str | None] = list(expected_runners(command)) or [None]
    found: list[tuple[int, str, list[str]]] = []
    for index, selector in enumerate(selectors):
        for runner in runners:
            path = selector_path(runner, selector)
            if path is None or posixpath.isabs(path):
                continue
            joined = posixpath.normpath(posixpath.join(workdir or ".", path))
            if joined != ".." and not joined.startswith("../"):
                found.append((index, joined, selector_names(runner, selector)))
                break
    return found
