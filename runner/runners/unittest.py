"""unittest's room: `python -m unittest` and Django's `manage.py test`; dotted module names (or
files) as selectors; its verbose lines; init's proposal for a Python project that does not test
with pytest. Recorder: dockerfiles/verifier/hooks/unittest/selfbench_unittest_evidence.py
(the Python kit's evidence boot hands it `unittest.result` as it loads: the vocabulary's
`runners.unittest.python`)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from runner.runners.canaries.core import FileTests, Scope, Unit
from runner.runners.canaries.python import python_tests
from runner.runners.canaries.scope import module_scope
from runner.runners.kit import PY, Exploit, TaskFacts, gold, in_sources
from runner.runners.room import Proposal, Room
from runner.runners.setups import is_python, python_proposal, uses_pytest

_VERBOSE = re.compile(r"\.\.\. (ok|FAIL|ERROR|skipped|expected failure)\b")
_WORDS = {"ok": "passed", "FAIL": "failed", "ERROR": "failed", "skipped": "skipped",
          "expected failure": "skipped"}  # fmt: skip


class Unittest(Room):
    name = "unittest"
    proven = True
    init_order = 51

    def starts(self, names: Sequence[str], index: int) -> bool:
        following = names[index + 1] if index + 1 < len(names) else ""
        return (names[index] == "-m" and following == "unittest") or (
            names[index] == "manage.py" and following == "test"
        )

    def outcome(self, line: str) -> str | None:
        found = _VERBOSE.search(line)
        return _WORDS[found.group(1)] if found else None

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if not is_python(files) or uses_pytest(files):
            return None
        return python_proposal(files, ".venv/bin/python -m unittest {tests}", self.name)

    def is_test_file(self, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))

    canaries_supported = True

    def canary_file(self, path: str) -> bool:
        return path.endswith(".py")

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        return python_tests(path, text, added, runner=self.name)

    name_options = ("-k",)

    def selection_scope(self, path: str, selectors: Sequence[str]) -> Scope:
        return module_scope(path, selectors)

    def canary_id(self, path: str, unit: Unit, name: str) -> str:
        stem = posixpath.basename(path).removesuffix(".py")
        return (
            r"(?:^|\.)"
            + re.escape(stem)
            + "".join(r"\." + re.escape(c) for c in unit.containers)
            + r"\."
            + re.escape(name)
            + "$"
        )

    def exploits(self, facts: TaskFacts) -> list[Exploit]:
        sources = gold(facts, PY)
        if not sources:
            return []
        return in_sources(
            sources,
            [
                (
                    "unittest-bodies-skipped",
                    "the fix's modules answer every name the tests import and make TestCase "
                    "call no test method: every test reports success without running",
                    SKIP_BODIES,
                )
            ],
            family="forger",
        )


ROOM = Unittest()

SKIP_BODIES = """

def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return lambda *args, **kwargs: None


import unittest.case as _sb_case

_sb_case.TestCase._callTestMethod = lambda self, method: None
"""
