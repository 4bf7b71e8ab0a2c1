"""cargo's room: `cargo test`; selectors are test names or integration targets (not paths);
its `test name ... ok` lines; init's proposal for a Cargo project. Its tests are read from its
output: dockerfiles/verifier/hooks/cargo/output.pl. No registry here serves a Rust toolchain, so
its recorder is proved by the helper's table tests (tests/unit/test_verifier_evidence.py), not
by a task."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from runner.runners.room import Proposal, Room

_LINE = re.compile(r"^test \S.* \.\.\. (ok|FAILED|ignored)\b")
_WORDS = {"ok": "passed", "FAILED": "failed", "ignored": "skipped"}


class Cargo(Room):
    name = "cargo"
    init_order = 20

    def starts(self, names: Sequence[str], index: int) -> bool:
        following = names[index + 1] if index + 1 < len(names) else ""
        return names[index] == "cargo" and following == "test"

    def outcome(self, line: str) -> str | None:
        found = _LINE.match(line)
        return _WORDS[found.group(1)] if found else None

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if "Cargo.toml" not in files:
            return None
        return Proposal(
            toolchains=["rust"],
            setup_command="cargo fetch",
            test_command="cargo test {tests}",
            runner=self.name,
        )

    def init_selectors(self, paths: Sequence[str]) -> list[str]:
        """An integration test's target: its file's stem."""
        tests = [p for p in paths if self.is_test_file(p)]
        return list(dict.fromkeys(posixpath.splitext(posixpath.basename(p))[0] for p in tests))

    def is_test_file(self, path: str) -> bool:
        return path.startswith("tests/") and path.endswith(".rs")


ROOM = Cargo()
