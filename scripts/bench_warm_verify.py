"""Benchmark: runner overhead of a warm re-verify of an unchanged small task.

overhead = wall time of `selfbench-runner verify` minus the time the task's own commands took
(the setup command: zero when its layer is cached; the test commands, as test.sh records them
in reward.json). Target (issue 14): a median of at most 1.0 s. It also prints how the wall time
splits: the process outside the verify itself (interpreter start, imports, exit), compile,
and the Docker stages. Then cold runs: the task's images removed (the base and toolchain
layers stay cached, as after `prepare`), and the wall time against the builds' and the tests'
own time (target: at most 1.2x).

Usage: python scripts/bench_warm_verify.py [--task DIR] [--runs N] [verify options...]
Defaults: examples/bash-calc, 5 runs, and the options scripts/verify.sh would choose; the verify
options given are added to those. The overhead counts nop's and oracle's test commands as the
task's own time: with the hack gate and the flakiness probe (on by default) their test runs
count as overhead; `--no-hack-gate --repeat 0` measures nop + oracle + determinism alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 1.0
COLD_TARGET_RATIO = 1.2


def default_options() -> list[str]:
    options = ["--toolchain-source", os.environ.get("SELFBENCH_TOOLCHAIN_SOURCES", "uv=registry")]
    base = os.environ.get("SELFBENCH_BASE_IMAGE")
    if not base:
        made = subprocess.run(
            [str(ROOT / "scripts" / "make-base-image.sh")],
            capture_output=True,
            text=True,
            check=True,
        )
        base = made.stdout.strip().splitlines()[-1]
    options += ["--base-image", base]
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if ca.is_file():
        options += ["--extra-ca-certs", str(ca)]
    return options


def verify_once(task: Path, options: list[str], logs: Path) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "verify",
            str(task),
            "--json",
            "-q",
            "--logs",
            str(logs),
            *options,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    wall = time.perf_counter() - started
    report: dict[str, object] = json.loads(result.stdout)
    if result.returncode != 0:
        raise SystemExit(f"verify failed (exit {result.returncode}): {report.get('reason')}")
    return wall, report


def task_seconds(report: dict[str, object]) -> float:
    """The test commands' own time on the run's critical path: both gates' when the plan ran
    the verifiers one after the other, the longer one's when it ran them together."""
    stages = report["stages"]
    assert isinstance(stages, dict)
    per_gate = []
    for gate in ("nop", "oracle"):
        details = stages[gate]["data"]["details"]
        per_gate.append(
            sum(
                details[k] for k in ("fail_to_pass_ms", "fail_to_pass_repeat_ms", "pass_to_pass_ms")
            )
            / 1000
        )
    run_dir = report["runDir"]
    assert isinstance(run_dir, str)
    plan = json.loads((Path(run_dir) / "plan.json").read_text())
    return float(max(per_gate) if plan["parallelVerifiers"] else sum(per_gate))


def images(report: dict[str, object]) -> dict[str, dict[str, object]]:
    stages = report["stages"]
    assert isinstance(stages, dict)
    found: dict[str, dict[str, object]] = stages["build"]["data"]["images"]
    return found


def cold_run(task: Path, options: list[str], logs: Path, tags: list[str]) -> tuple[float, float]:
    """Remove the task's own images (their setup layers go with them; the base and toolchain
    layers stay, as after `prepare`), verify, and return (wall, build + test seconds)."""
    subprocess.run(["docker", "rmi", "-f", *tags], check=True, capture_output=True)
    wall, report = verify_once(task, options, logs)
    built = images(report)
    if any(image["cached"] for image in built.values()):
        raise SystemExit("an image was still cached: not a cold run")
    build_seconds = 0.0
    for image in built.values():
        seconds = image["seconds"]
        assert isinstance(seconds, (int, float))
        build_seconds += seconds
    return wall, build_seconds + task_seconds(report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=str(ROOT / "examples" / "bash-calc"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold-runs", type=int, default=2)
    args, extra = parser.parse_known_args()
    # Extra verify options are added to the defaults (e.g. `--repeat 3`, `--no-hack-gate`).
    options = [*default_options(), *extra]
    task = Path(args.task)
    median = statistics.median
    # As installed: pip byte-compiles a package it installs, but not an editable checkout,
    # and where PYTHONDONTWRITEBYTECODE is set every start would compile runner/ again
    # (measured: ~80 ms of a warm verify).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "runner")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        _, first = verify_once(task, options, Path(tmp) / "warmup")
        tags = [str(image["tag"]) for image in images(first).values()]
        overheads, walls, outside, compiles, docker = [], [], [], [], []
        for index in range(args.runs):
            wall, report = verify_once(task, options, Path(tmp) / f"run{index}")
            if not all(image["cached"] for image in images(report).values()):
                raise SystemExit("images were rebuilt: not a warm run")
            walls.append(wall)
            overheads.append(wall - task_seconds(report))
            stages = report["stages"]
            assert isinstance(stages, dict)
            inside = float(report["seconds"])  # type: ignore[arg-type]
            outside.append(wall - inside)
            compiles.append(float(stages["compile"]["seconds"]))
            docker.append(inside - compiles[-1] - float(stages["audit"]["seconds"]))
        cold = [
            cold_run(task, options, Path(tmp) / f"cold{index}", tags)
            for index in range(args.cold_runs)
        ]
    print(f"task: {task}")
    print(f"warm runs: {args.runs}")
    print(f"wall seconds:     median {median(walls):.2f}  max {max(walls):.2f}")
    print(
        f"  of which: process start-up and exit {median(outside):.2f}, compile "
        f"{median(compiles):.2f}, engine and gates {median(docker):.2f} (medians)"
    )
    print(
        f"overhead seconds: median {median(overheads):.2f}  max {max(overheads):.2f}"
        f"  (target: median <= {TARGET_SECONDS:.1f})"
    )
    ratios = [wall / own for wall, own in cold]
    if cold:
        print(
            f"cold runs (task images removed, base and toolchain layers cached): {len(cold)}; "
            f"wall {median([w for w, _ in cold]):.1f} s, builds + tests "
            f"{median([o for _, o in cold]):.1f} s, ratio median {median(ratios):.2f}"
            f"  (target <= {COLD_TARGET_RATIO})"
        )
    met = median(overheads) <= TARGET_SECONDS and (not cold or median(ratios) <= COLD_TARGET_RATIO)
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
