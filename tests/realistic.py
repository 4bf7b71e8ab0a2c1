"""Tasks shaped like real pull requests, for the integration tests: a uv project in a monorepo
whose virtualenv lives in the repository (git-ignored, `uv sync`'s default) with an editable
install, a pip project with an in-tree venv whose gold patch changes requirements.txt and whose
tests run under unittest, jest and vitest with node_modules, a go module with a vendored
package. Each has its real fix, a nop-red variant (a pass-to-pass test that already fails on the
base) and a broken-gold variant (a gold patch that does not fix), and knows the stage and reason
each variant must be rejected with."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import LIB_BASE, LIB_GOLD, RUNNER_SH, diff_of, make_repo, write_task
from tests.helpers import definition as base_definition

Files = dict[str, str | bytes | None]


@dataclass(frozen=True)
class Project:
    """A real-shaped task: the repository at the base commit, the held-out tests, the gold
    patch's files, and what a verification needs."""

    name: str
    base: Files
    tests: Files
    gold: Files
    broken_gold: Files  # a gold patch that implements the feature wrongly
    failing: Files  # a test of the base that fails: the nop-red variant's pass-to-pass
    failing_selector: str
    overrides: dict[str, Any]
    options: list[str] = field(default_factory=list)
    # What the rejections say (the start of the stage's detail).
    nop_red: str = "pass-to-pass tests fail on the base snapshot (exit 1)"
    broken: str = "fail-to-pass tests still fail with the gold patch (exit 1)"
    # What a red gate quotes of the failing run: the evidence's failed test, or (a custom runner,
    # judged by exit codes) the runner's last line.
    failed_words: str = "test(s) failed"
    evidence: str = "per-test"


@dataclass(frozen=True)
class Built:
    task: Path
    repo: Path
    project: Project


def build(tmp: Path, project: Project, variant: str = "") -> Built:
    """The task directory of `project` (variant "", "nop-red" or "broken-gold")."""
    name = project.name + (f"-{variant}" if variant else "")
    base = {**project.base, **project.failing} if variant == "nop-red" else project.base
    repo, commit = make_repo(tmp / f"{name}-repo", base)
    overrides = dict(project.overrides)
    if variant == "nop-red":
        overrides["passToPass"] = [*overrides["passToPass"], project.failing_selector]
    gold = project.broken_gold if variant == "broken-gold" else project.gold
    doc = base_definition(taskId=name, baseCommit=commit, repo=str(repo), **overrides)
    directory = write_task(
        tmp / name,
        doc,
        test_patch=diff_of(repo, project.tests),
        gold_patch=diff_of(repo, gold),
    )
    return Built(task=directory, repo=repo, project=project)


def steps(count: int, comment: str = "#") -> str:
    """Filler lines: the easy profile asks 20 changed lines of a gold patch."""
    return "".join(f"{comment} step {i}\n" for i in range(count))


PYTHON_ROOT = {
    "rootSetupCommand": "apt-get update -qq && apt-get install -y -qq python3 > /dev/null"
}

# ---- a uv project in a monorepo --------------------------------------------------------------

_UV = "packages/textkit"
_TRUNCATE = "def truncate(text: str, width: int, suffix: str = '...') -> str:\n"
UV_MONOREPO = Project(
    name="real-uv",
    base={
        "README.md": "# tools\n\nA monorepo of small packages.\n",
        "packages/other/README.md": "Another package.\n",
        f"{_UV}/pyproject.toml": '[project]\nname = "textkit"\nversion = "0.1.0"\n'
        'requires-python = ">=3.11"\ndependencies = []\n\n[dependency-groups]\n'
        'dev = ["pytest>=8"]\n\n[build-system]\nrequires = ["hatchling"]\n'
        'build-backend = "hatchling.build"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        f"{_UV}/.gitignore": ".venv/\n__pycache__/\n*.egg-info/\n",
        f"{_UV}/src/textkit/__init__.py": (
            "from textkit.slug import slugify\n\n__all__ = ['slugify']\n"
        ),
        f"{_UV}/src/textkit/slug.py": "import re\n\n\ndef slugify(text: str) -> str:\n"
        "    return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')\n",
        f"{_UV}/tests/test_slug.py": "from textkit import slugify\n\n\ndef test_slug():\n"
        "    assert slugify('Hello World') == 'hello-world'\n",
    },
    tests={
        f"{_UV}/tests/test_truncate.py": "from textkit.truncate import truncate\n\n\n"
        "def test_short():\n    assert truncate('abc', 5) == 'abc'\n\n\n"
        "def test_long():\n    assert truncate('abcdefgh', 5) == 'ab...'\n"
    },
    gold={
        f"{_UV}/src/textkit/truncate.py": _TRUNCATE
        + steps(20, "    #")
        + "    if len(text) <= width:\n        return text\n"
        "    return text[: max(0, width - len(suffix))] + suffix\n"
    },
    broken_gold={
        f"{_UV}/src/textkit/truncate.py": _TRUNCATE
        + steps(20, "    #")
        + "    return text[:width]\n"
    },
    failing={
        f"{_UV}/tests/test_env.py": (
            "import os\n\n\ndef test_home():\n    assert os.environ['SELFBENCH_NO_SUCH']\n"
        )
    },
    failing_selector="tests/test_env.py",
    overrides={
        "workdir": _UV,
        "setupCommand": "uv sync --python /usr/bin/python3",
        "testCommand": ".venv/bin/python -m pytest {tests}",
        "failToPass": ["tests/test_truncate.py"],
        "passToPass": ["tests/test_slug.py"],
        "testPaths": ["tests/test_truncate.py"],
        "toolchains": ["uv"],
        "environment": PYTHON_ROOT,
    },
    options=["--build-network", "host"],
)

# ---- a pip project, an in-tree venv, unittest, requirements changed by the gold patch --------

PIP_UNITTEST = Project(
    name="real-pip",
    base={
        "requirements.txt": "# runtime dependencies\n",
        ".gitignore": ".venv/\n__pycache__/\n",
        "units/__init__.py": "",
        "units/length.py": "def to_cm(inches):\n    return inches * 2.54\n",
        "tests/__init__.py": "",
        "tests/test_length.py": "import unittest\n\nfrom units.length import to_cm\n\n\n"
        "class LengthTest(unittest.TestCase):\n    def test_inch(self):\n"
        "        self.assertAlmostEqual(to_cm(1), 2.54)\n",
    },
    tests={
        "tests/test_text.py": "import unittest\n\nfrom units.text import label\n\n\n"
        "class LabelTest(unittest.TestCase):\n    def test_label(self):\n"
        "        self.assertEqual(label(3, 'cm'), '3 cm')\n\n"
        "    def test_bytes(self):\n        self.assertEqual(label(b'3', 'cm'), '3 cm')\n"
    },
    gold={
        "requirements.txt": "# runtime dependencies\nsix==1.16.0\n",
        "units/text.py": "import six\n\n\ndef label(value, unit):\n"
        + steps(20, "    #")
        + "    text = six.ensure_str(value) if isinstance(value, bytes) else value\n"
        "    return '%s %s' % (text, unit)\n",
    },
    broken_gold={
        "requirements.txt": "# runtime dependencies\nsix==1.16.0\n",
        "units/text.py": "import six\n\n\ndef label(value, unit):\n"
        + steps(20, "    #")
        + "    return '%s %s' % (value, unit)\n",
    },
    failing={
        "tests/test_locale.py": "import unittest\n\n\nclass LocaleTest(unittest.TestCase):\n"
        "    def test_locale(self):\n        self.assertEqual('a', 'b')\n"
    },
    failing_selector="tests.test_locale",
    overrides={
        "setupCommand": "python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt",
        "testCommand": ".venv/bin/python -m unittest {tests}",
        "failToPass": ["tests.test_text"],
        "passToPass": ["tests.test_length"],
        "testPaths": ["tests/test_text.py"],
        "toolchains": ["uv"],
        "environment": {
            "rootSetupCommand": "apt-get update -qq && apt-get install -y -qq python3 "
            "python3-venv > /dev/null"
        },
    },
    options=["--build-network", "host"],
)

# ---- jest and vitest with node_modules --------------------------------------------------------


def _package(runner: str, version: str, script: str) -> str:
    return (
        json.dumps(
            {
                "name": "strutil",
                "private": True,
                "scripts": {"test": script},
                "devDependencies": {runner: version},
            },
            indent=2,
        )
        + "\n"
    )


def _node_project(name: str, runner: str, version: str, command: str, esm: bool) -> Project:
    """`esm`: the tests import (vitest 3 refuses require()); else they require (jest)."""
    header = "import { test, expect } from 'vitest';\n" if esm else ""

    def load(names: str, module: str) -> str:
        if esm:
            return f"import {{ {names} }} from '{module}/index.js';\n"
        return f"const {{ {names} }} = require('{module}');\n"

    return Project(
        name=name,
        base={
            "package.json": _package(runner, version, command.replace(" {tests}", "")),
            ".gitignore": "node_modules/\ncoverage/\n",
            "src/pad.js": "exports.padLeft = (s, n) => String(s).padStart(n);\n",
            "src/index.js": "module.exports = { ...require('./pad') };\n",
            "test/pad.test.js": header
            + load("padLeft", "../src")
            + "test('pads', () => expect(padLeft('a', 3)).toBe('  a'));\n",
        },
        tests={
            "test/repeat.test.js": header
            + load("repeat", "../src")
            + "test('repeats', () => expect(repeat('ab', 3)).toBe('ababab'));\n"
            "test('zero', () => { expect(repeat('x', 0)).toBe(''); "
            "expect(repeat('x', 1)).toEqual('x'); });\n"
        },
        gold={
            "src/repeat.js": steps(20, "//")
            + "exports.repeat = (s, n) => Array(n).fill(s).join('');\n",
            "src/index.js": "module.exports = { ...require('./pad'), ...require('./repeat') };\n",
        },
        broken_gold={
            "src/repeat.js": steps(20, "//") + "exports.repeat = (s, n) => s;\n",
            "src/index.js": "module.exports = { ...require('./pad'), ...require('./repeat') };\n",
        },
        failing={
            "test/env.test.js": f"{header}test('env', () => expect(process.env.SELFBENCH_NO_SUCH)"
            ".toBe('set'));\n"
        },
        failing_selector="test/env.test.js",
        overrides={
            "setupCommand": "npm install --no-audit --no-fund --loglevel=error",
            "testCommand": command,
            "failToPass": ["test/repeat.test.js"],
            "passToPass": ["test/pad.test.js"],
            "testPaths": ["test/repeat.test.js"],
            "toolchains": ["node"],
            "resources": {"memoryMb": 1024},
        },
        options=["--build-network", "host", "--toolchain-source", "node=registry"],
    )


JEST = _node_project("real-jest", "jest", "29.7.0", "npx jest {tests}", esm=False)
VITEST = _node_project("real-vitest", "vitest", "3.2.7", "npx vitest run {tests}", esm=True)

# ---- a go module with a vendored package -----------------------------------------------------

GO_VENDORED = Project(
    name="real-go",
    base={
        "go.mod": "module example.com/shapes\n\ngo 1.25\n\nrequire example.com/units v0.1.0\n",
        "vendor/modules.txt": "# example.com/units v0.1.0\n## explicit\nexample.com/units\n",
        "vendor/example.com/units/units.go": "package units\n\n"
        "func Scale(v, f float64) float64 { return v * f }\n",
        "area/area.go": 'package area\n\nimport "example.com/units"\n\n'
        "func Square(s float64) float64 { return units.Scale(s, s) }\n",
        "area/area_test.go": 'package area\n\nimport "testing"\n\nfunc TestSquare(t *testing.T) {\n'
        "\tif Square(2) != 4 {\n\t\tt.Fatal(Square(2))\n\t}\n}\n",
        "perimeter/perimeter.go": (
            "package perimeter\n\nfunc Square(s float64) float64 { return 0 }\n"
        ),
    },
    tests={
        "perimeter/perimeter_test.go": 'package perimeter\n\nimport "testing"\n\n'
        "func TestSquare(t *testing.T) {\n\tif Square(2) != 8 {\n\t\tt.Fatal(Square(2))\n\t}\n}\n\n"
        "func TestTable(t *testing.T) {\n\tfor _, s := range []float64{1, 3} {\n"
        '\t\tt.Run("side", func(t *testing.T) {\n\t\t\tif Square(s) != 4*s {\n'
        "\t\t\t\tt.Fatal(s)\n\t\t\t}\n\t\t})\n\t}\n}\n"
    },
    gold={
        "perimeter/perimeter.go": "package perimeter\n\n"
        + steps(20, "//")
        + "func Square(s float64) float64 { return 4 * s }\n"
    },
    broken_gold={
        "perimeter/perimeter.go": "package perimeter\n\n"
        + steps(20, "//")
        + "func Square(s float64) float64 { return 2 * s }\n"
    },
    failing={
        "env/env_test.go": 'package env\n\nimport (\n\t"os"\n\t"testing"\n)\n\n'
        'func TestEnv(t *testing.T) {\n\tif os.Getenv("SELFBENCH_NO_SUCH") == "" {\n'
        '\t\tt.Fatal("unset")\n\t}\n}\n'
    },
    failing_selector="./env",
    overrides={
        # Compiles the testing packages into the shared build cache once, at setup.
        "setupCommand": "go test -run '^$' ./...",
        "testCommand": "go test {tests}",
        "failToPass": ["./perimeter"],
        "passToPass": ["./area"],
        "testPaths": ["perimeter/perimeter_test.go"],
        "toolchains": ["go"],
    },
    options=["--toolchain-source", "go=registry"],
)

# ---- a bash runner script (exit-code evidence) -----------------------------------------------

BASH_RUNNER = Project(
    name="real-bash",
    base={
        "lib.sh": LIB_BASE,
        "tests/run.sh": RUNNER_SH,
        "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
    },
    tests={"tests/test_new.sh": '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n'},
    gold={"lib.sh": LIB_GOLD},
    broken_gold={"lib.sh": LIB_GOLD.replace('shout() { shout_0 "$@"; }', 'shout() { echo "$@"; }')},
    failing={"tests/test_env.sh": '[ -n "${SELFBENCH_NO_SUCH:-}" ]\n'},
    failing_selector="tests/test_env.sh",
    overrides={
        "testCommand": "bash tests/run.sh {tests}",
        "failToPass": ["tests/test_new.sh"],
        "passToPass": ["tests/test_old.sh"],
        "testPaths": ["tests/test_new.sh"],
    },
    failed_words="FAIL tests/",
    evidence="exit-code",
)
