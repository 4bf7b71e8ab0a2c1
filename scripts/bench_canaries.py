"""Benchmark: what the canaries cost, per runner, on the real-shaped tasks (tests/realistic).

For each project, a warm verification with `--no-hack-gate --repeat 0` and the canaries
(`--evidence-checks all`, the default) and one without them (`--evidence-checks in-process`),
alternated; it prints the canaries made and kept, the oracle's kill rate, the chance a blind
guess gets past them, and the oracle's fail-to-pass run in milliseconds with and without them
(medians of --runs). A first, unmeasured verification builds the images.

Usage: python scripts/bench_canaries.py [--runs N] [--only NAME,...] [verify options...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_warm_verify import default_options  # noqa: E402

from tests import realistic  # noqa: E402
from tests.realistic import build  # noqa: E402

PROJECTS = {
    "pytest": "UV_MONOREPO",
    "unittest": "PIP_UNITTEST",
    "jest": "JEST",
    "vitest": "VITEST",
    "mocha": "MOCHA",
    "node-test": "NODE_TEST",
    "bun": "BUN",
    "go": "GO_VENDORED",
    "go -run": "GO_MULTI",
    "exit-code": "BASH_RUNNER",
}


def verify(task: Path, options: list[str], run_dir: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "runner", "verify", str(task), "--json", "--run-dir", str(run_dir),
         "--no-hack-gate", "--repeat", "0", *options],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    report: dict[str, object] = json.loads(result.stdout)
    if report.get("verdict") != "accepted":
        raise SystemExit(f"{task}: {report.get('verdict')}: {report.get('reason')}")
    return report


def oracle_runs(report: dict[str, object]) -> dict[str, dict[str, object]]:
    stages = report["stages"]
    assert isinstance(stages, dict)
    runs = stages["oracle"]["data"]["evidence"]["runs"]
    return {r["name"]: r for r in runs}


def fail_to_pass_ms(report: dict[str, object]) -> float:
    stages = report["stages"]
    assert isinstance(stages, dict)
    details = stages["oracle"]["data"]["details"]
    return float(details["fail_to_pass_ms"]) + float(details.get("fail_to_pass_repeat_ms") or 0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--only", default="")
    args, extra = parser.parse_known_args()
    chosen = [n for n in PROJECTS if not args.only or n in args.only.split(",")]
    base = default_options()
    rows = []
    with tempfile.TemporaryDirectory(prefix="selfbench-bench-canaries.") as tmp:
        for name in chosen:
            project = getattr(realistic, PROJECTS[name])
            built = build(Path(tmp) / name.replace(" ", "_"), project)
            options = [*base, *project.options, *extra]
            verify(built.task, options, Path(tmp) / f"{name}-cold")
            times: dict[str, list[float]] = {"all": [], "in-process": []}
            report: dict[str, object] = {}
            for index in range(args.runs):
                for mode in ("all", "in-process"):
                    run_dir = Path(tmp) / f"{name}-{mode}-{index}".replace(" ", "_")
                    done = verify(built.task, [*options, "--evidence-checks", mode], run_dir)
                    times[mode].append(fail_to_pass_ms(done))
                    if mode == "all":
                        report = done
            census = report["census"]
            assert isinstance(census, dict)
            canaries = census["canaries"]
            runs = oracle_runs(report)
            first = runs.get("fail_to_pass") or {}
            counts = first.get("canaries") or {}
            assert isinstance(counts, dict)
            if canaries["exitCode"]:
                killed = f"{canaries['exitCode']}/{canaries['made']} (exit-code run)"
            else:
                killed = f"{counts.get('failed', 0)}/{canaries['made']}"
            with_ms, without_ms = (statistics.median(times[m]) for m in ("all", "in-process"))
            rows.append(
                f"| {name} | {canaries['made']} | {canaries['kept']} | {killed} | "
                f"{canaries['guess']:.3f} | {without_ms:.0f} | {with_ms:.0f} | "
                f"{with_ms - without_ms:+.0f} |"
            )
            print(rows[-1], flush=True)
    print(
        "\n| runner | made | kept | killed by the gold | blind guess | oracle f2p ms without | "
        "with | canaries cost ms |\n|---|---|---|---|---|---|---|---|"
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
