"""What a running stage's output says about where it is: the selection the verifier runs, the
tests its runner reported so far, the exploit the hack gate's driver is on.

For the progress display only. Nothing judges by it: the output is the task's and the agent's
(either can print anything), while the verdicts rest on the verifier's evidence files. So each
room reads the common lines of its runner's default and verbose output, and a line no room
recognises counts for nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from runner.runners import line_outcomes

# test.sh's own lines (dockerfiles/test.sh.j2) and the hack driver's (runner.plan.inimage).
_RUNNING = re.compile(r"^selfbench: running ([a-z_]+): ")
_EXPLOIT = re.compile(r"^selfbench: exploit (\d+) of (\d+): (\S+)")


def outcome_of(line: str) -> str | None:
    """The outcome a line reports for one test ("passed", "failed", "skipped"), or None: by the
    first room whose runner's output it reads as one."""
    found = line_outcomes(line)
    return found[0] if len(found) == 1 else None


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
        for outcome in line_outcomes(line):
            self._count(outcome)

    def _count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def pending_counts(self) -> dict[str, int]:
        """The counts with pytest's unfinished progress line included (its characters grow
        as each test ends, before the line does)."""
        counts = dict(self.counts)
        for outcome in line_outcomes(self._partial, partial=True):
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
