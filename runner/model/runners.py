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
