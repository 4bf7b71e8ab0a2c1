"""jest's room: the `jest` binary (npx, npm scripts reach it through the evidence it leaves);
selectors are patterns over test file paths; its spec reporter's lines; init's proposal for a
package that depends on jest. Recorder: dockerfiles/verifier/hooks/jest/ (node-hook.cjs,
which the node kit's preload loads, adds reporter.cjs beside the project's reporters and wraps
jest-circus's adapter in guard.cjs, a guard of jest's test API)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.runners.canaries.javascript import ScriptCanaries
from runner.runners.room import Proposal, Room
from runner.runners.setups import node_dependencies, npm_proposal


class Jest(ScriptCanaries, Room):
    name = "jest"
    proven = True
    init_order = 41

    def starts(self, names: Sequence[str], index: int) -> bool:
        return names[index] == self.name

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if self.name not in node_dependencies(files):
            return None
        return npm_proposal(files, "npx jest {tests}", self.name)

    name_options = ("-t", "--testNamePattern", "--testPathIgnorePatterns")


ROOM = Jest()
