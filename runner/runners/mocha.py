"""mocha's room: the `mocha` binary; selectors are files (`file`, `file:line`); its spec
reporter's lines; init's proposal for a package that depends on mocha. Recorder:
dockerfiles/verifier/hooks/mocha/node-hook.cjs (mocha's Runner events, hooked as mocha loads
through the node kit's preload)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from runner.runners.canaries.core import Unit
from runner.runners.canaries.javascript import ScriptCanaries
from runner.runners.room import Proposal, Room
from runner.runners.setups import node_dependencies, npm_proposal


class Mocha(ScriptCanaries, Room):
    name = "mocha"
    init_order = 42
    proven = True

    def starts(self, names: Sequence[str], index: int) -> bool:
        return names[index] == self.name

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if self.name not in node_dependencies(files):
            return None
        return npm_proposal(files, "npx mocha {tests}", self.name)

    name_options = ("-g", "--grep", "-f", "--fgrep", "-i", "--invert")

    def canary_id(self, path: str, unit: Unit, name: str) -> str:
        """mocha's reporter names a test by its full title: its blocks and name, spaced."""
        title = " ".join((*unit.containers, name))
        return r"(?:^|/)" + re.escape(posixpath.basename(path)) + " > " + re.escape(title) + "$"


ROOM = Mocha()
