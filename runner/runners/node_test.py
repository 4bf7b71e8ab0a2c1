"""node --test's room: `node [options] --test`; selectors are files; its spec and TAP reporters'
lines; init's proposal for a package whose test script runs `node --test`. Recorder:
dockerfiles/verifier/hooks/node-test/: reporter.mjs, which node-args.bash (sourced by the node
kit's `node`) adds first, writing only evidence, to stderr (Node 22.14 cannot flush a reporter
destination of /dev/null)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from runner.runners.canaries.javascript import ScriptCanaries
from runner.runners.room import Proposal, Room, spec_outcome
from runner.runners.setups import json_object, npm_proposal

_TAP = re.compile(r"^\s*(ok|not ok) \d+\b")
_TAP_SKIP = re.compile(r"#\s*(SKIP|TODO)\b", re.IGNORECASE)
# node --test's default file patterns: **/*.test.*, **/*-test.*, **/*_test.*, **/test-*.*,
# **/test.*, and every file under a test directory.
_TEST_FILE = re.compile(r"(^|[._-])test([._-][^/]*)?\.[cm]?[jt]s$|^test-[^/]*\.[cm]?[jt]s$")
_NODE_SCRIPT = re.compile(r"^\s*node\b(?:\s+--?[\w-]+(?:=\S+)?)*\s+--test\b[^&|;]*$")


def tap_outcome(line: str) -> str | None:
    found = _TAP.match(line)
    if found is None:
        return None
    if _TAP_SKIP.search(line):
        return "skipped"
    return "passed" if found.group(1) == "ok" else "failed"


class NodeTest(ScriptCanaries, Room):
    name = "node-test"
    init_order = 43
    proven = True

    def starts(self, names: Sequence[str], index: int) -> bool:
        return names[index] == "node" and "--test" in names[index + 1 :]

    def outcome(self, line: str) -> str | None:
        return spec_outcome(line) or tap_outcome(line)

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        scripts = json_object(files.get("package.json")).get("scripts")
        test = scripts.get("test") if isinstance(scripts, dict) else None
        if not isinstance(test, str) or not _NODE_SCRIPT.match(test):
            return None
        # The script's own options (--experimental-strip-types, --import ...) stay.
        return npm_proposal(files, test.strip() + " {tests}", self.name)

    def is_test_file(self, path: str) -> bool:
        return bool(_TEST_FILE.search(path.rsplit("/", 1)[-1])) or super().is_test_file(path)

    name_options = ("--test-name-pattern", "--test-skip-pattern", "--test-only")


ROOM = NodeTest()
