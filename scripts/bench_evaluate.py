"""Benchmark: `evaluate` against the shell loop over `grade` it replaces, in one run.

Five accepted tasks (given as run directories, or made from tests/realistic's real-shaped
projects and verified first), ten predictions each (ten "models", each the task's real fix,
so every prediction is graded in full): 50 predictions. Each is graded

- by 50 separate `grade` calls, one after another (what a user's loop does);
- by `evaluate --jobs 1`, and by `evaluate --jobs J` (a fresh output directory each: nothing
  is resumed);

and the script prints the seconds per prediction of each, and checks that every way gave the
same rewards. The task images are built before anything is timed (the tasks were verified).

Usage: python scripts/bench_evaluate.py [RUN_DIR ...] [--per-task N] [--jobs J]
       [grade options...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_warm_verify import default_options  # noqa: E402

from runner.model.layout import RunLayout  # noqa: E402

# Five real shapes, on three runners and the exit-code fallback, verified with these options.
SHAPES = ("UV_MONOREPO", "PIP_UNITTEST", "GO_VENDORED", "GO_MULTI", "BASH_RUNNER")
SHAPE_OPTIONS = ["--toolchain-source", "go=registry", "--build-network", "host"]


def runner(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=timeout,
    )


def made_runs(work: Path, options: list[str]) -> list[Path]:
    """The five shapes built and verified (two at a time): their run directories."""
    from tests import realistic
    from tests.realistic import build

    built = [build(work, getattr(realistic, name)) for name in SHAPES]

    def verify(task: Path) -> Path:
        run_dir = work / f"run-{task.name}"
        done = runner(
            "verify", str(task), "--json", "-q", "--run-dir", str(run_dir),
            "--repeat", "0", "--no-hack-gate", *options,
        )  # fmt: skip
        report = json.loads(done.stdout)
        if report["verdict"] != "accepted":
            raise SystemExit(f"{task.name}: {report['verdict']}: {report['reason']}")
        return run_dir

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(verify, (b.task for b in built)))


def predictions(runs: list[Path], per_task: int, out: Path) -> list[tuple[Path, Path, str]]:
    """A predictions file (per_task models, each the real fix of every task), and each
    prediction as (run dir, patch file, model) for the grade loop."""
    lines = []
    each = []
    for run in runs:
        task_id = json.loads(RunLayout(run).report.read_text())["taskId"]
        gold = RunLayout(run).authored / "gold.patch"
        for index in range(per_task):
            model = f"model-{index:02d}"
            lines.append({"instance_id": task_id, "model_name_or_path": model,
                          "model_patch": gold.read_text()})  # fmt: skip
            each.append((run, gold, model))
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return each


def grade_loop(
    each: list[tuple[Path, Path, str]], options: list[str], logs: Path
) -> tuple[float, list[int]]:
    started = time.perf_counter()
    rewards = []
    for run, patch, _ in each:
        done = runner(
            "grade", str(run), "--patch", str(patch), "--json", "-q", "--logs", str(logs), *options
        )
        rewards.append(int(json.loads(done.stdout)["reward"]["reward"]))
    return time.perf_counter() - started, rewards


def evaluate(
    source: Path, preds: Path, out: Path, jobs: int, options: list[str]
) -> tuple[float, list[int]]:
    started = time.perf_counter()
    done = runner("evaluate", str(source), "--predictions", str(preds), "-o", str(out),
                  "--jobs", str(jobs), "--json", "-q", *options)  # fmt: skip
    wall = time.perf_counter() - started
    summary = json.loads(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"evaluate exited {done.returncode}: {done.stderr[-2000:]}")
    rewards = [int(row["reward"] or 0) for row in summary["rows"]]
    return wall, rewards


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--per-task", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    args, extra = parser.parse_known_args()
    options = [*(extra or default_options()), *SHAPE_OPTIONS]
    with tempfile.TemporaryDirectory(prefix="bench-evaluate.") as tmp:
        work = Path(tmp)
        runs = args.runs or made_runs(work, options)
        source = work / "source"
        source.mkdir()
        for index, run in enumerate(runs):
            (source / f"{index:02d}").symlink_to(run.resolve(), target_is_directory=True)
        preds = work / "preds.jsonl"
        each = predictions(runs, args.per_task, preds)
        count = len(each)
        print(f"{len(runs)} tasks, {count} predictions", flush=True)
        loop, loop_rewards = grade_loop(each, options, work / "grades")
        print(
            f"grade x {count}, one after another: {loop:.1f} s, "
            f"{loop / count:.2f} s per prediction",
            flush=True,
        )
        rows = [("grade loop", loop)]
        for jobs in sorted({1, args.jobs}):
            wall, rewards = evaluate(source, preds, work / f"eval-{jobs}", jobs, options)
            if sorted(rewards) != sorted(loop_rewards):
                raise SystemExit(f"evaluate --jobs {jobs} gave other rewards: {rewards}")
            rows.append((f"evaluate --jobs {jobs}", wall))
            print(f"evaluate --jobs {jobs}: {wall:.1f} s, {wall / count:.2f} s per prediction, "
                  f"{loop / wall:.2f}x the loop", flush=True)  # fmt: skip
    print()
    print("| way | seconds | per prediction |")
    print("| --- | ---: | ---: |")
    for name, wall in rows:
        print(f"| {name} | {wall:.1f} | {wall / count:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
