"""Benchmark: `audit` of a task whose held-out patch is just under the 20 MiB patch limit, in the
shapes a real large patch takes, and the refusal of one just over it.

Shapes (each added to the example's test.patch, which keeps its one real test):
- data: one fixture file of short lines (no names: quoted strings only);
- python: one test module of small functions (read by the Python grammar);
- sections: 4,000 small new files (section bookkeeping);
- over: one byte past the limit (refused before it is read).

Usage: python scripts/bench_audit.py [--runs N]   (default 3; prints the median per shape)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from runner.base.validation import MAX_PATCH_BYTES  # noqa: E402

EXAMPLE = ROOT / "examples" / "bash-calc"
HEADROOM = 64 * 1024  # stay this far under the limit


def _new_file(path: str, lines: list[str]) -> str:
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def _fill(base: str, budget: int, line: Callable[[int], str], path: str) -> str:
    size = len(line(0)) + 2
    count = (budget - len(base) - 200) // size
    return base + _new_file(path, [line(i) for i in range(count)])


def shapes(base: str) -> dict[str, str]:
    budget = MAX_PATCH_BYTES - HEADROOM
    sections = []
    per_file = (budget - len(base)) // 4000 - 120
    for index in range(4000):
        sections.append(_new_file(f"tests/data/f{index}.txt", ["x" * max(per_file, 1)]))
    return {
        "data": _fill(
            base, budget, lambda i: f"row {i:012d} value {i * 7:012d} ok", "tests/rows.txt"
        ),
        "python": _fill(
            base,
            budget,
            lambda i: f"def test_case_{i:08d}(): assert run('x') == {i % 1000:04d}",
            "tests/test_many.py",
        ),
        "sections": base + "".join(sections),
        "over": base + "+" * (MAX_PATCH_BYTES + 1 - len(base)),
    }


def audit_seconds(task: Path) -> tuple[float, int, str]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "runner", "audit", str(task)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:]
    return time.monotonic() - started, result.returncode, last[0] if last else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = (EXAMPLE / "test.patch").read_text()
    with tempfile.TemporaryDirectory(prefix="bench-audit.") as tmp:
        for name, patch in shapes(base).items():
            task = Path(tmp) / name
            shutil.copytree(EXAMPLE, task)
            (task / "test.patch").write_text(patch)
            times, code, said = [], 0, ""
            for _ in range(args.runs):
                seconds, code, said = audit_seconds(task)
                times.append(seconds)
            size = len(patch.encode()) / 1024 / 1024
            median = statistics.median(times)
            print(f"{name:9} {size:6.2f} MiB  audit median {median:5.2f} s  (exit {code}: {said})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
