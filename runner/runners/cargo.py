"""cargo's room: `cargo test`; selectors are test names or integration targets (not paths);
its `test name ... ok` lines; init's proposal for a Cargo project. Its tests are read from its
output: dockerfiles/verifier/hooks/cargo/output.pl. No registry here serves a Rust toolchain, so
its recorder is proved by the helper's table tests (tests/unit/test_verifier_evidence.py), not
by a task."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from runner.runners.canaries.core import ALL, FileTests, Scope, Unit
from runner.runners.canaries.rust import rust_tests
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

    canaries_supported = True

    def canary_file(self, path: str) -> bool:
        return path.endswith(".rs")

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        return rust_tests(path, text, added)

    def canary_scope(self, path: str, command: str, selectors: Sequence[str]) -> Scope:
        """An integration target (its file's stem) runs the whole file; any other selector is a
        filter a copy's name must contain (cargo matches it against `module::name`)."""
        filters = [s for s in selectors if not s.startswith("-")]
        stem = posixpath.splitext(posixpath.basename(path))[0]
        if not filters or (path.startswith("tests/") and stem in filters):
            return ALL
        if any(f.startswith("^") or f.endswith("$") or "--exact" in command for f in filters):
            return Scope(selected=False, why="the selection names exact tests (--exact)")
        return Scope(selected=True, name_ok=lambda name: any(f in name for f in filters))

    def canary_id(self, path: str, unit: Unit, name: str) -> str:
        """`module::name`, as cargo's `test ... ok` lines print it."""
        return (
            r"(?:^|::)"
            + "".join(re.escape(c) + "::" for c in unit.containers)
            + re.escape(name)
            + "$"
        )


ROOM = Cargo()
