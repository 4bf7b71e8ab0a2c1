"""Make a test-bound task for the speed benchmarks: a small Python package whose pytest suite
burns a core for about `--seconds` a run (half in the fail-to-pass tests, half in the
pass-to-pass ones), with its repository beside it.

The tests are CPU-bound (a hash chain per test), not sleeps, so they compete for the machine as
real suites do. Python comes from Debian's package (the contract's root setup) and pytest from
PyPI: what this machine can reach.

Usage: python scripts/make_bench_task.py OUT_DIR [--seconds S] [--tests N]
Prints the task directory; verify it with `--build-network host`, or time it with
`scripts/bench_harbor.py --task OUT_DIR/task`.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from tests.helpers import definition, diff_of, make_repo, write_task  # noqa: E402

BASE_CALC = '''"""A tiny calculator."""


def add(a, b):
    return a + b


def chain(rounds):
    """A hash chain: work a test can size."""
    import hashlib

    value = b"seed"
    for _ in range(rounds):
        value = hashlib.sha256(value).digest()
    return value.hex()
'''

GOLD_CALC = (
    BASE_CALC
    + '''

def mul(a, b):
    """a times b, for integers of either sign."""
    result = 0
    for _ in range(abs(b)):
        result = add(result, a)
    return result if b >= 0 else -result


def power(a, n):
    """a to the n-th power, n >= 0."""
    if n < 0:
        raise ValueError("power: negative exponent")
    result = 1
    for _ in range(n):
        result = mul(result, a)
    return result


def square(a):
    """a times itself."""
    return mul(a, a)
'''
)


def rounds_per_second() -> int:
    """How many sha256 rounds this machine does in a second (the tests are sized by it)."""
    value, rounds, started = b"seed", 0, time.perf_counter()
    while time.perf_counter() - started < 0.5:
        for _ in range(10_000):
            value = hashlib.sha256(value).digest()
        rounds += 10_000
    return rounds * 2


def test_module(name: str, count: int, rounds: int, body: str) -> str:
    tests = "".join(
        f"\n\ndef test_{name}_{index}():\n    assert len(chain({rounds})) == 64\n{body}"
        for index in range(count)
    )
    return f"from calc import *  # noqa: F403\n{tests}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tests", type=int, default=10, help="tests per selector file")
    args = parser.parse_args()
    rounds = int(rounds_per_second() * args.seconds / 2 / args.tests)
    repo, commit = make_repo(
        args.out / "repo",
        {
            "calc.py": BASE_CALC,
            "tests/__init__.py": "",
            "tests/test_add.py": test_module(
                "add", args.tests, rounds, "    assert add(2, 3) == 5\n"
            ),
        },
    )
    test_patch = diff_of(
        repo,
        {
            "tests/test_mul.py": test_module(
                "mul", args.tests, rounds, "    assert mul(2, -3) == -6 and power(2, 5) == 32\n"
            )
        },
    )
    gold_patch = diff_of(repo, {"calc.py": GOLD_CALC})
    task = args.out / "task"
    write_task(
        task,
        definition(
            taskId="bench-pytest",
            repo=str(repo),
            baseCommit=commit,
            setupCommand="uv venv -q --python /usr/bin/python3 /opt/venv "
            "&& uv pip install -q --python /opt/venv pytest==8.3.4",
            testCommand="PYTHONPATH=. /opt/venv/bin/python -m pytest -p no:cacheprovider {tests}",
            failToPass=["tests/test_mul.py"],
            passToPass=["tests/test_add.py"],
            testPaths=["tests/test_mul.py"],
            toolchains=["uv"],
            prompt="Add mul(a, b) and power(a, n) to calc.py, built on add.",
            timeouts={"setupSeconds": 600, "agentSeconds": 600, "testsSeconds": 600},
            resources={"cpus": 1, "memoryMb": 1024, "storageMb": 4096},
            environment={
                "rootSetupCommand": "apt-get update -qq "
                "&& apt-get install -y -qq python3 > /dev/null"
            },
        ),
        test_patch=test_patch,
        gold_patch=gold_patch,
    )
    print(task)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
