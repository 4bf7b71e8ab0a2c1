"""Make a test-bound task for the speed benchmarks: a small package whose test suite burns a core
for about `--seconds` a run (half in the fail-to-pass tests, half in the pass-to-pass ones), with
its repository beside it.

The tests are CPU-bound (a hash chain per test), not sleeps, so they compete for the machine as
real suites do.
- `--runner pytest` (the default): Python from Debian's package (the contract's root setup),
  pytest from PyPI: what this machine can reach.
- `--runner go`: a Go module (toolchain go, `--toolchain-source go=registry` here) whose
  packages import a large part of the standard library, as a project with dependencies does,
  and whose setup compiles nothing (`go mod download`): each fresh verifier compiles the test
  binaries, the cost the build cache hand-off saves.

Usage: python scripts/make_bench_task.py OUT_DIR [--runner pytest|go] [--seconds S] [--tests N]
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


# The standard library packages the Go task's code links (what a project's dependencies cost to
# compile in a fresh container).
GO_IMPORTS = [
    "archive/zip",
    "compress/gzip",
    "crypto/tls",
    "crypto/x509",
    "database/sql",
    "encoding/json",
    "encoding/xml",
    "go/parser",
    "html/template",
    "image/png",
    "net/http",
    "net/http/httptest",
    "net/mail",
    "net/smtp",
    "regexp",
    "text/template",
]
GO_WORK = (
    "// Package work burns a core for a test; it links a large part of the standard library.\n"
    'package work\n\nimport (\n\t"crypto/sha256"\n'
    + "".join(f'\t_ "{name}"\n' for name in GO_IMPORTS)
    + ")\n\n// Chain is a hash chain of n rounds.\n"
    'func Chain(n int) []byte {\n\tv := []byte("seed")\n'
    "\tfor i := 0; i < n; i++ {\n\t\ts := sha256.Sum256(v)\n\t\tv = s[:]\n\t}\n\treturn v\n}\n"
)
GO_MUL = (
    'package mul\n\nimport (\n\t"example.com/bench/add"\n\t_ "example.com/bench/work"\n)\n\n'
    "// Mul is a times b, for integers of either sign, built on add.\n"
    "func Mul(a, b int) int {\n\tr := 0\n\tn := b\n\tif n < 0 {\n\t\tn = -n\n\t}\n"
    "\tfor i := 0; i < n; i++ {\n\t\tr = add.Add(r, a)\n\t}\n"
    "\tif b < 0 {\n\t\treturn -r\n\t}\n\treturn r\n}\n"
)


def go_tests(package: str, count: int, rounds: int, check: str) -> str:
    imports = '\t"testing"\n\n\t"example.com/bench/work"\n'
    tests = "".join(
        f"\nfunc Test{package.title()}{index}(t *testing.T) {{\n"
        f'\tif len(work.Chain({rounds})) != 32 || !({check}) {{\n\t\tt.Fatal("wrong")\n\t}}\n}}\n'
        for index in range(count)
    )
    return f"package {package}\n\nimport (\n{imports})\n{tests}"


def make_go(out: Path, count: int, rounds: int) -> Path:
    repo, commit = make_repo(
        out / "repo",
        {
            "go.mod": "module example.com/bench\n\ngo 1.25\n",
            "work/work.go": GO_WORK,
            "add/add.go": 'package add\n\nimport _ "example.com/bench/work"\n\n'
            "// Add is a plus b.\nfunc Add(a, b int) int { return a + b }\n",
            "add/add_test.go": go_tests("add", count, rounds, "Add(2, 3) == 5"),
            # The package exists at the base, its function does not.
            "mul/doc.go": "// Package mul multiplies.\npackage mul\n",
        },
    )
    test_patch = diff_of(
        repo, {"mul/mul_test.go": go_tests("mul", count, rounds, "Mul(2, -3) == -6")}
    )
    gold_patch = diff_of(repo, {"mul/mul.go": GO_MUL})
    task = out / "task"
    write_task(
        task,
        definition(
            taskId="bench-go",
            repo=str(repo),
            baseCommit=commit,
            setupCommand="go mod download",
            testCommand="go test {tests}",
            failToPass=["./mul"],
            passToPass=["./add"],
            testPaths=["mul/mul_test.go"],
            toolchains=["go"],
            prompt="Add Mul(a, b) to package mul, built on add.Add.",
            timeouts={"setupSeconds": 600, "agentSeconds": 600, "testsSeconds": 600},
            resources={"cpus": 1, "memoryMb": 2048, "storageMb": 4096},
        ),
        test_patch=test_patch,
        gold_patch=gold_patch,
    )
    return task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runner", choices=["pytest", "go"], default="pytest")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tests", type=int, default=10, help="tests per selector file")
    args = parser.parse_args()
    rounds = int(rounds_per_second() * args.seconds / 2 / args.tests)
    if args.runner == "go":
        print(make_go(args.out, args.tests, rounds))
        return 0
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
