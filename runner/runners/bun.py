"""bun's room: `bun test` and `bunx test`; selectors are patterns over test file paths; its
`(pass) name` lines off a terminal and its marks on one; init's proposal for a repository that
locks with bun. Its tests are read from its output: dockerfiles/verifier/hooks/bun/output.pl."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from runner.runners.canaries.javascript import ScriptCanaries
from runner.runners.room import Proposal, Room, spec_outcome

_PLAIN = re.compile(r"^\s*\((pass|fail|skip|todo)\) ")
_WORDS = {"pass": "passed", "fail": "failed", "skip": "skipped", "todo": "skipped"}
_TEST_FILE = re.compile(r"[._](test|spec)\.[cm]?[jt]sx?$")


class Bun(ScriptCanaries, Room):
    name = "bun"
    init_order = 30
    proven = True

    def starts(self, names: Sequence[str], index: int) -> bool:
        following = names[index + 1] if index + 1 < len(names) else ""
        return names[index] in ("bun", "bunx") and following == "test"

    def outcome(self, line: str) -> str | None:
        found = _PLAIN.match(line)
        return _WORDS[found.group(1)] if found else spec_outcome(line)

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if "bun.lockb" not in files and "bun.lock" not in files:
            return None
        return Proposal(
            toolchains=["bun"],
            setup_command="bun install --frozen-lockfile",
            test_command="bun test {tests}",
            runner=self.name,
        )

    def is_test_file(self, path: str) -> bool:
        return bool(_TEST_FILE.search(path.rsplit("/", 1)[-1]))

    name_options = ("-t", "--test-name-pattern", "--only")


ROOM = Bun()
