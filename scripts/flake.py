"""Flake check: run chosen tests N times each, as many at a time as CI runs them, and report each
test whose outcome was not the same passing one every time.

Each copy of a test is a separate pytest item (pytest-repeat's `--count`), handed out by
pytest-xdist to the workers CI's main pass has (`make flake` passes the Makefile's WORKERS),
so every run of a test shares the machine and the engine with others, as in that pass. A test
passes the check when all its runs passed; one that failed some runs is "unstable", one that
failed or skipped every run "failing" or "skipped". Exit 0 when every chosen test is stable
and passing, 1 otherwise, 2 on bad usage.

Usage: python scripts/flake.py [--count N] [--workers W] [pytest selection and options...]
  e.g. python scripts/flake.py --count 5 tests/integration/test_real_projects.py -k node
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# pytest-repeat appends "-<i>-<count>" to a test's parameters, or makes them "[<i>-<count>]".
_COPY = re.compile(r"(?:\[|-)(\d+)-(\d+)\]$")


@dataclass
class Runs:
    """One test's runs: each outcome and duration, in the order the report lists them."""

    outcomes: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    first_failure: str = ""

    @property
    def verdict(self) -> str:
        kinds = set(self.outcomes)
        if kinds == {"passed"}:
            return "stable"
        if "passed" in kinds:
            return "unstable"
        return "skipped" if kinds == {"skipped"} else "failing"


def test_id(case: ET.Element) -> str:
    """The chosen test's id without its copy number (`tests.x::test_y[param]`)."""
    name = case.get("name", "")
    match = _COPY.search(name)
    if match:
        name = name[: match.start()] + ("]" if name[match.start()] == "-" else "")
    return f"{case.get('classname', '')}::{name}"


def read_report(xml: Path) -> dict[str, Runs]:
    """Each test's runs from pytest's JUnit XML report."""
    runs: dict[str, Runs] = defaultdict(Runs)
    for case in ET.parse(xml).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", child.get("message", "") or (child.text or "")
                break
            if child.tag == "skipped":
                outcome, message = "skipped", child.get("message", "")
        test = runs[test_id(case)]
        test.outcomes.append(outcome)
        test.seconds.append(float(case.get("time", "0") or 0))
        if outcome == "failed" and not test.first_failure:
            test.first_failure = message.strip().splitlines()[0][:200] if message.strip() else ""
    return dict(runs)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5, help="runs of each test (default 5)")
    parser.add_argument("--workers", type=int, default=2, help="tests at a time (default 2)")
    options, selection = parser.parse_known_args(argv)
    if options.count < 2 or options.workers < 1:
        parser.error("--count must be at least 2 and --workers at least 1")
    if not selection:
        parser.error("choose the tests to check (paths, node ids or -k/-m options)")
    with tempfile.TemporaryDirectory(prefix="selfbench-flake-") as tmp:
        xml = Path(tmp) / "report.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            f"--count={options.count}",
            "--repeat-scope=function",
            f"-n{options.workers}",
            "--dist=load",
            f"--junitxml={xml}",
            "-q",
            "--no-header",
            *selection,
        ]
        started = time.monotonic()
        status = subprocess.run(command, cwd=ROOT, check=False).returncode
        elapsed = time.monotonic() - started
        if status not in (0, 1) or not xml.exists():
            print(f"flake: pytest exited {status} without a report to read", file=sys.stderr)
            return 2 if status in (4, 5) else 1
        runs = read_report(xml)
    print(
        f"\nflake: {len(runs)} test(s) x {options.count} runs, {options.workers} at a time, "
        f"in {elapsed:.0f} s"
    )
    bad = 0
    for name, test in sorted(runs.items()):
        passed = test.outcomes.count("passed")
        line = (
            f"  {test.verdict:<8} {passed}/{len(test.outcomes)} passed  "
            f"{min(test.seconds):6.1f}-{max(test.seconds):6.1f} s  {name}"
        )
        if test.verdict != "stable":
            bad += 1
            if test.first_failure:
                line += f"\n           first failure: {test.first_failure}"
        print(line)
    print(f"flake: {bad} of {len(runs)} not stable" if bad else "flake: every test stable")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
