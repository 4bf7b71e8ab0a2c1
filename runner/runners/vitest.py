"""vitest's room: the `vitest` binary; selectors are patterns over test file paths; its
reporter's lines (a failure marked with U+00D7); init's proposal for a package that depends on
vitest (asked before jest: a project that has both runs vitest). Recorder:
dockerfiles/verifier/hooks/vitest/ (node-hook.cjs, which the node kit's preload loads, adds
reporter.mjs to vitest's argv; the reporter adds guard.mjs to each project's setup files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.runners.canaries.javascript import ScriptCanaries
from runner.runners.room import Proposal, Room
from runner.runners.setups import node_dependencies, npm_proposal


class Vitest(ScriptCanaries, Room):
    name = "vitest"
    proven = True
    init_order = 40

    def starts(self, names: Sequence[str], index: int) -> bool:
        return names[index] == self.name

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if self.name not in node_dependencies(files):
            return None
        return npm_proposal(files, "npx vitest run {tests}", self.name)

    name_options = ("-t", "--testNamePattern")


ROOM = Vitest()
