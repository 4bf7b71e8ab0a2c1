"""Benchmark: what a verification costs its supervisor (serve, batch) to start, forked from the
pre-imported server (runner.supervise) against a fresh interpreter (`SELFBENCH_FORK_SERVER=0`).

Two measures, each mode's runs interleaved so the machine's load falls on both alike:
- launch: `verify TASK --plan` through the supervisor's launcher (compile, audit and plan; no
  Docker), launch to exit. What is left besides the plan's own work is the start-up overhead.
- warm: a whole warm verification of the task (its images cached) through the launcher.

Usage: python scripts/bench_supervise.py [--task DIR] [--runs N] [--no-warm] [verify options...]
Defaults: examples/bash-calc, 7 runs; the verify options scripts/verify.sh would choose.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_warm_verify import default_options  # noqa: E402

from runner.supervise.job import VerifyJob  # noqa: E402
from runner.supervise.launcher import Launcher  # noqa: E402


@dataclass(frozen=True, kw_only=True)
class _BenchJob(VerifyJob):
    """verify with options given as words (the bench's own, --plan among them)."""

    options: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        return [*super().argv(), *self.options]


def run_once(launcher: Launcher, task: Path, options: list[str], work: Path, name: str) -> float:
    job = _BenchJob(
        target=task,
        run_dir=work / name / "run",
        run_id=f"bench-{name}",
        events=work / name / "events.jsonl",
        stdout=work / name / "stdout.json",
        stderr=work / name / "stderr.log",
        options=tuple(options),
        env=dict(os.environ),
    )
    started = time.perf_counter()
    result = launcher.start(job).result()
    seconds = time.perf_counter() - started
    if result.exit_code not in (0,) or (result.report is None and "--plan" not in options):
        raise SystemExit(f"{name}: exit {result.exit_code}: {result.failure()}")
    return seconds


def measure(task: Path, options: list[str], runs: int, label: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"fork": [], "exec": []}
    launchers = {"fork": Launcher(fork=True), "exec": Launcher(fork=False)}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-supervise.") as tmp:
            work = Path(tmp)
            # One unmeasured run each: the fork server's own start, the page cache.
            for mode, launcher in launchers.items():
                run_once(launcher, task, options, work, f"{label}-{mode}-warmup")
            for index in range(runs):
                for mode, launcher in launchers.items():
                    name = f"{label}-{mode}-{index}"
                    times[mode].append(run_once(launcher, task, options, work, name))
    finally:
        for launcher in launchers.values():
            launcher.close()
    return times


def report(label: str, times: dict[str, list[float]]) -> None:
    fork, fresh = statistics.median(times["fork"]), statistics.median(times["exec"])
    print(
        f"{label}: median {fresh:.3f} s with a fresh interpreter, {fork:.3f} s forked; "
        f"{fresh - fork:.3f} s saved per verification "
        f"(fork {min(times['fork']):.3f}..{max(times['fork']):.3f}, "
        f"exec {min(times['exec']):.3f}..{max(times['exec']):.3f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", type=Path, default=ROOT / "examples" / "bash-calc")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-warm", action="store_true", help="Only the --plan launches.")
    args, extra = parser.parse_known_args()
    options = [*default_options(), *extra]
    report("launch (verify --plan)", measure(args.task, [*options, "--plan"], args.runs, "plan"))
    if not args.no_warm:
        report("warm verification", measure(args.task, options, args.runs, "warm"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
