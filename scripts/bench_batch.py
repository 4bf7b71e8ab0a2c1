"""Benchmark: batch throughput. Two test-bound tasks verified one after the other
(`batch --jobs 1`) and at once (`batch --jobs 2`), warm (images built by a first run); the
ratio of the wall times is the figure (target: at most 0.6).

Two kinds of test-bound task are measured, because they scale differently on a 2-core machine:
tests that wait (sleep, I/O, a server's answer; most suites spend time this way) and tests that
burn a core for their whole duration.

Usage: python scripts/bench_batch.py [--runs N] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_warm_verify import default_options  # noqa: E402

from tests.helpers import bash_task  # noqa: E402

TARGET = 0.6
KINDS = {
    "waiting": "sleep {seconds}",
    "cpu-bound": "timeout {seconds} sh -c 'while :; do :; done'; true",
}


def make_tasks(root: Path, kind: str, seconds: float) -> list[Path]:
    work = KINDS[kind].format(seconds=seconds)
    tasks = []
    for index in range(2):
        task = bash_task(
            root,
            name=f"bench-{kind}-{index}",
            new_test=f'. ./lib.sh\n{work}\n[ "$(shout x)" = "HELLO X" ]\n',
            extra_base={"tests/test_old.sh": f'. ./lib.sh\n{work}\n[ "$(greet x)" = "hello x" ]\n'},
        )
        tasks.append(task.directory)
    return tasks


def run_batch(tasks: list[Path], jobs: int, out: Path, options: list[str]) -> float:
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "batch",
            *map(str, tasks),
            "--jobs",
            str(jobs),
            "--out",
            str(out),
            "-q",
            *options,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"batch failed ({result.returncode}): {result.stderr[-2000:]}")
    totals = json.loads((out / "batch.json").read_text())["totals"]
    if totals["accepted"] != len(tasks):
        raise SystemExit(f"not all accepted: {totals}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="each test command's work")
    args = parser.parse_args()
    options = default_options()
    met = True
    with tempfile.TemporaryDirectory(prefix="selfbench-bench-batch.") as tmp:
        root = Path(tmp)
        for kind in KINDS:
            tasks = make_tasks(root / kind, kind, args.seconds)
            run_batch(tasks, 2, root / f"{kind}-warmup", options)  # builds the images
            serial, parallel = [], []
            for run in range(args.runs):
                serial.append(run_batch(tasks, 1, root / f"{kind}-s{run}", options))
                parallel.append(run_batch(tasks, 2, root / f"{kind}-p{run}", options))
            ratio = statistics.median(parallel) / statistics.median(serial)
            print(
                f"{kind:9} tests ({args.seconds:g} s per command): one after the other "
                f"{statistics.median(serial):.1f} s, --jobs 2 {statistics.median(parallel):.1f} s"
                f", ratio {ratio:.2f} (target <= {TARGET})"
            )
            met = met and (kind != "waiting" or ratio <= TARGET)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
