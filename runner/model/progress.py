"""What a running stage's output says about where it is: the selection the verifier runs, the
tests its runner reported so far, the exploit the hack gate's driver is on.

For the progress display only. Nothing judges by it: the output is the task's and the agent's
(either can print anything), while the verdicts rest on the verifier's evidence files. So the
patterns are the common ones of each runner's default and verbose output, and a line nobody
recognises counts for nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# test.sh's own lines (dockerfiles/test.sh.j2) and the hack driver's (runner.plan.inimage).
_RUNNING = re.compile(r"^selfbench: running ([a-z_]+): ")
_EXPLOIT = re.compile(r"^selfbench: exploit (\d+) of (\d+): (\S+)")
# One test's outcome in the verbose or default output of a known runner.
_GO = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ")  # go test -v (subtests indented)
_GO_WORDS = {"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}
# pytest -v ("t.py::test_a PASSED"), unittest -v and cargo test ("test_a ... ok").
_VERBOSE = re.compile(
    r"(?:::\S+ |\.\.\. )(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS|ok|FAIL|skipped|ignored)\b"
)
_VERBOSE_WORDS = {"PASSED": "passed", "XPASS": "passed", "ok": "passed", "FAILED": "failed",
                  "ERROR": "failed", "FAIL": "failed", "SKIPPED": "skipped", "XFAIL": "skipped",
                  "skipped": "skipped", "ignored": "skipped"}  # fmt: skip
# jest, vitest and node --test's spec reporter (vitest marks a failure with U+00D7).
_SYMBOLS = {"✓": "passed", "✔": "passed", "√": "passed", "✕": "failed", "✖": "failed",
            "\u00d7": "failed", "○": "skipped", "↓": "skipped", "﹣": "skipped"}  # fmt: skip
_SYMBOL = re.compile(r"^\s*([" + "".join(_SYMBOLS) + r"]) ")
# TAP (node --test's tap reporter, bats).
_TAP = re.compile(r"^\s*(ok|not ok) \d+\b")
_TAP_SKIP = re.compile(r"#\s*(SKIP|TODO)\b", re.IGNORECASE)
# pytest's default progress line: a file, then one character per test as each ends.
_PYTEST_DOTS = re.compile(r"^(\S+\.py) ([.FEsxX]+)(?:\s+\[\s*\d+%\])?\s*$")
_PYTEST_CHARS = {".": "passed", "X": "passed", "F": "failed", "E": "failed", "s": "skipped",
                 "x": "skipped"}  # fmt: skip


def outcome_of(line: str) -> str | None:
    """The outcome a line reports for one test ("passed", "failed", "skipped"), or None."""
    if (go := _GO.match(line)) is not None:
        return _GO_WORDS[go.group(1)]
    if (verbose := _VERBOSE.search(line)) is not None:
        return _VERBOSE_WORDS[verbose.group(1)]
    if (symbol := _SYMBOL.match(line)) is not None:
        return _SYMBOLS[symbol.group(1)]
    if (tap := _TAP.match(line)) is not None:
        if _TAP_SKIP.search(line):
            return "skipped"
        return "passed" if tap.group(1) == "ok" else "failed"
    return None


@dataclass
class Tally:
    """What one stage's current log said so far. `feed` takes its text as it grows (a last
    line without its newline is read again once it is whole)."""

    selection: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    exploit: tuple[int, int, str] | None = None
    _partial: str = ""

    def feed(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line.rstrip("\r"))

    def _line(self, line: str) -> None:
        if (running := _RUNNING.match(line)) is not None:
            self.selection, self.counts = running.group(1), {}
            return
        if (exploit := _EXPLOIT.match(line)) is not None:
            self.exploit = (int(exploit.group(1)), int(exploit.group(2)), exploit.group(3))
            return
        if (dots := _PYTEST_DOTS.match(line)) is not None:
            for char in dots.group(2):
                self._count(_PYTEST_CHARS[char])
            return
        if (outcome := outcome_of(line)) is not None:
            self._count(outcome)

    def _count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def pending_counts(self) -> dict[str, int]:
        """The counts with pytest's unfinished progress line included (its characters grow
        as each test ends, before the line does)."""
        counts = dict(self.counts)
        if (dots := _PYTEST_DOTS.match(self._partial)) is not None:
            for char in dots.group(2):
                outcome = _PYTEST_CHARS[char]
                counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    def describe(self) -> str:
        """One short phrase: "fail_to_pass: 12 passed, 1 failed", "exploit 3 of 9: name", or
        "" when the output said nothing recognisable yet."""
        parts: list[str] = []
        if self.exploit is not None:
            index, total, name = self.exploit
            parts.append(f"exploit {index} of {total}: {name}")
        counts = self.pending_counts()
        seen = ", ".join(
            f"{counts[o]} {o}" for o in ("passed", "failed", "skipped") if counts.get(o)
        )
        if self.selection:
            parts.append(f"{self.selection}: {seen or 'running'}")
        elif seen:
            parts.append(seen)
        return "; ".join(parts)
