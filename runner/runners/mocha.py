"""mocha's room: the `mocha` binary; selectors are files (`file`, `file:line`); its spec
reporter's lines; init's proposal for a package that depends on mocha. Recorder:
dockerfiles/verifier/hooks/mocha/ (mocha's Runner events, hooked by the node preload)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from runner.runners.canaries.core import FileTests, Scope, Unit
from runner.runners.canaries.javascript import is_script, script_tests
from runner.runners.room import Proposal, Room, selects_by_name
from runner.runners.setups import node_dependencies, npm_proposal


class Mocha(Room):
    name = "mocha"
    init_order = 42

    def starts(self, names: Sequence[str], index: int) -> bool:
        return names[index] == self.name

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if self.name not in node_dependencies(files):
            return None
        return npm_proposal(files, "npx mocha {tests}", self.name)

    canaries_supported = True

    def canary_file(self, path: str) -> bool:
        return is_script(path)

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        return script_tests(path, text, added)

    def canary_scope(self, path: str, command: str, selectors: Sequence[str]) -> Scope:
        if option := selects_by_name(command, ("-g", "--grep", "-f", "--fgrep", "-i", "--invert")):
            return Scope(selected=False, why=f"the test command selects tests by name ({option})")
        return super().canary_scope(path, command, selectors)

    def canary_id(self, path: str, unit: Unit, name: str) -> str:
        """mocha's reporter names a test by its full title: its blocks and name, spaced."""
        title = " ".join((*unit.containers, name))
        return r"(?:^|/)" + re.escape(posixpath.basename(path)) + " > " + re.escape(title) + "$"


ROOM = Mocha()
