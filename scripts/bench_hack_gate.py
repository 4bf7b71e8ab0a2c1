"""Benchmark: what the default gates cost over nop + oracle + determinism alone, in one run.

Alternates warm verifications of one task (its images cached after a first, unmeasured one)
with `--no-hack-gate --repeat 0` (like for like), with the defaults, and with
`--hack-gate full`, and the defaults with nothing remembered from an earlier run (`cold`), and
prints each one's median wall time and the ratios. Targets (issue 38):
the defaults at most 1.25x like for like on a CPU-bound task; the hack stage at most one
fail-to-pass test run plus 5 s on a test-bound one (its figure: the hack stage's seconds against
nop's fail-to-pass run).

Usage: python scripts/bench_hack_gate.py [--task DIR | --runner pytest|go] [--seconds S]
       [--runs N] [--modes like-for-like,defaults,cold,full] [verify options...]
Without --task it makes a CPU-bound task (scripts/make_bench_task.py: every test command
burns about S/2 seconds of CPU) and verifies it with `--build-network host`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_warm_verify import default_options, verify_once  # noqa: E402

from runner.model.settings import cache_root  # noqa: E402
from runner.run.remembered import REMEMBERED_DIR  # noqa: E402

TARGET_RATIO = 1.25
TARGET_HACK_MARGIN = 5.0
MODES = {
    "like-for-like": ["--no-hack-gate", "--repeat", "0"],
    "defaults": [],
    # The defaults with nothing remembered (runner.run.remembered): the store is emptied before
    # each such run, as on a task's first verify with its images built.
    "cold": [],
    "full": ["--hack-gate", "full"],
}


def stage_seconds(report: dict[str, object], name: str) -> float:
    stages = report["stages"]
    assert isinstance(stages, dict)
    return float(stages[name]["seconds"])


def fail_to_pass_seconds(report: dict[str, object]) -> float:
    stages = report["stages"]
    assert isinstance(stages, dict)
    return float(stages["nop"]["data"]["details"]["fail_to_pass_ms"]) / 1000


def outcomes(report: dict[str, object]) -> str:
    stages = report["stages"]
    assert isinstance(stages, dict)
    counts: dict[str, int] = {}
    for exploit in stages["hack"]["data"]["exploits"]:
        counts[exploit["outcome"]] = counts.get(exploit["outcome"], 0) + 1
    return ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path)
    parser.add_argument("--runner", choices=["pytest", "go"], default="pytest")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="which of the modes to time, comma-separated (like-for-like and defaults always)",
    )
    args, extra = parser.parse_known_args()
    chosen = {"like-for-like", "defaults", *args.modes.split(",")}
    modes = {mode: words for mode, words in MODES.items() if mode in chosen}
    options = [*default_options(), *extra]
    with tempfile.TemporaryDirectory(prefix="bench-hack.") as tmp:
        task = args.task
        if task is None:
            made = subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "make_bench_task.py"), tmp + "/made",
                 "--runner", args.runner, "--seconds", str(args.seconds)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            task = Path(made.stdout.strip().splitlines()[-1])
            options += ["--build-network", "host"]
            if args.runner == "go":
                options += ["--toolchain-source", "go=registry"]
        verify_once(task, [*options, *modes.get("full", [])], Path(tmp) / "warmup")
        walls: dict[str, list[float]] = {mode: [] for mode in modes}
        hack: dict[str, list[float]] = {mode: [] for mode in modes if mode != "like-for-like"}
        f2p: list[float] = []
        said: dict[str, str] = {}
        for index in range(args.runs):
            for mode, words in modes.items():
                if mode == "cold":
                    shutil.rmtree(cache_root() / REMEMBERED_DIR, ignore_errors=True)
                wall, report = verify_once(task, [*options, *words], Path(tmp) / f"{mode}{index}")
                walls[mode].append(wall)
                f2p.append(fail_to_pass_seconds(report))
                if mode in hack:
                    hack[mode].append(stage_seconds(report, "hack"))
                    said[mode] = outcomes(report)
    median = statistics.median
    base = median(walls["like-for-like"])
    print(f"task: {task}  runs: {args.runs} of each, alternated")
    for mode in modes:
        line = f"{mode:>14}: wall median {median(walls[mode]):6.2f} s"
        line += f"  ({median(walls[mode]) / base:.2f}x like for like)"
        if mode in hack:
            line += f"; hack stage {median(hack[mode]):.2f} s ({said[mode]})"
        print(line)
    one_run = median(f2p)
    ratio = median(walls["defaults"]) / base
    print(
        f"defaults / like-for-like: {ratio:.2f}  (target <= {TARGET_RATIO}); hack stage "
        f"{median(hack['defaults']):.2f} s against one fail-to-pass run {one_run:.2f} s + "
        f"{TARGET_HACK_MARGIN:g} s"
    )
    met = ratio <= TARGET_RATIO and median(hack["defaults"]) <= one_run + TARGET_HACK_MARGIN
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
