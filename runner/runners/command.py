"""What a task's test command runs, read from the command and the selectors (pure): the
repository files it runs (scripts it names, the Makefile of `make`) and the files its selectors
name. The harness the verifier write-protects and the audit guards is made of these."""

from __future__ import annotations

import posixpath
import re

from runner.base import validation as v
from runner.model.shell import words
from runner.model.task import TESTS_PLACEHOLDER
from runner.runners.vocabulary import VOCABULARY

SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".php")
MAKE = ("make", "gmake")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


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
            found += [(name, base) for name in sorted(VOCABULARY.files.makefiles.names)]
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
