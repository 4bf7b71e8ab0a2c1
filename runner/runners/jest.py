"""jest's room: the `jest` binary (npx, npm scripts reach it through the evidence it leaves);
selectors are patterns over test file paths; its spec reporter's lines; init's proposal for a
package that depends on jest. Recorder: dockerfiles/verifier/hooks/jest/ (a reporter beside the
project's and a guard of jest-circus's state, loaded by the node preload)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.runners.canaries.core import FileTests, Scope
from runner.runners.canaries.javascript import is_script, script_tests
from runner.runners.room import Proposal, Room, selects_by_name
from runner.runners.setups import node_dependencies, npm_proposal


class Jest(Room):
    name = "jest"
    proven = True
    init_order = 41

    def starts(self, names: Sequence[str], index: int) -> bool:
        return names[index] == self.name

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if self.name not in node_dependencies(files):
            return None
        return npm_proposal(files, "npx jest {tests}", self.name)

    canaries_supported = True

    def canary_file(self, path: str) -> bool:
        return is_script(path)

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        return script_tests(path, text, added)

    def canary_scope(self, path: str, command: str, selectors: Sequence[str]) -> Scope:
        if option := selects_by_name(
            command, ("-t", "--testNamePattern", "--testPathIgnorePatterns")
        ):
            return Scope(selected=False, why=f"the test command selects tests by name ({option})")
        return super().canary_scope(path, command, selectors)


ROOM = Jest()
