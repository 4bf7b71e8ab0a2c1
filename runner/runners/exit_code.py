"""The fallback for a test command no room starts (a custom script, `make test`, `npm test`
whose script the verifier meets only through the evidence it leaves): judged by exit codes, said
so. Its selectors are files when they look like files; its output's TAP lines (bats, tap) count
for the progress display; init proposes `npm test` for a package none of the node rooms takes.
Its exploits are the generic family's (the runner script, the held-out tests, the harness
shell's memory), and the hack gate runs them on the task: nothing proves them for every task."""

from __future__ import annotations

from collections.abc import Mapping

from runner.runners.node_test import tap_outcome
from runner.runners.room import Proposal, Room, file_selector_path
from runner.runners.setups import npm_proposal
from runner.runners.vocabulary import RunnerSignals


class ExitCode(Room):
    name = "exit-code"
    init_order = 1000

    @property
    def signals(self) -> RunnerSignals:
        raise LookupError("the exit-code fallback is no runner of the vocabulary")

    def selector_path(self, selector: str) -> str | None:
        if not selector or selector.startswith("-"):
            return None
        return file_selector_path(selector)

    def outcome(self, line: str) -> str | None:
        return tap_outcome(line)

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if "package.json" not in files:
            return None
        return npm_proposal(files, "npm test -- {tests}", "")


FALLBACK = ExitCode()
