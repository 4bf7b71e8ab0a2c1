"""unittest's room: `python -m unittest` and Django's `manage.py test`; dotted module names (or
files) as selectors; its verbose lines; init's proposal for a Python project that does not test
with pytest. Recorder: dockerfiles/verifier/hooks/unittest/ (the evidence boot hooks
`unittest.result` when unittest loads)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from runner.runners.room import Proposal, Room
from runner.runners.setups import is_python, python_proposal, uses_pytest

_VERBOSE = re.compile(r"\.\.\. (ok|FAIL|ERROR|skipped|expected failure)\b")
_WORDS = {"ok": "passed", "FAIL": "failed", "ERROR": "failed", "skipped": "skipped",
          "expected failure": "skipped"}  # fmt: skip


class Unittest(Room):
    name = "unittest"
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


ROOM = Unittest()
