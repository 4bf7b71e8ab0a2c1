"""Python projects shaped like real pull requests: a uv monorepo whose virtualenv lives in the
repository (git-ignored, `uv sync`'s default) with an editable install; a pip project with an
in-tree venv and unittest whose gold patch changes requirements.txt; a setuptools project whose
gold patch changes setup.cfg and setup.py; a pdm project whose gold patch changes pyproject.toml
and pdm.lock."""

from __future__ import annotations

from tests.realistic.project import Project, shaped, steps

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
    runners=("pytest",),
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
    runners=("unittest",),
    gold_manifests=("requirements.txt",),
)

# ---- a setuptools project: the gold patch changes setup.cfg and setup.py ----------------------

_SETUP_CFG = (
    "[metadata]\nname = tempconv\nversion = 0.1.0\n\n[options]\npackages = find:\n"
    "python_requires = >=3.9\n"
)
_SETUP_PY = "from setuptools import setup\n\nsetup()\n"
_VENV_ROOT = {
    "rootSetupCommand": "apt-get update -qq && apt-get install -y -qq python3 python3-venv "
    "> /dev/null"
}
_CONVERT = "import six\n\n\ndef describe(celsius):\n" + steps(20, "    #")
SETUPTOOLS = Project(
    name="real-setuptools",
    base={
        ".gitignore": ".venv/\n__pycache__/\n*.egg-info/\nbuild/\n",
        "setup.cfg": _SETUP_CFG,
        "setup.py": _SETUP_PY,
        "tempconv/__init__.py": "",
        "tempconv/units.py": "def to_fahrenheit(celsius):\n    return celsius * 9 / 5 + 32\n",
        "tests/test_units.py": "from tempconv.units import to_fahrenheit\n\n\n"
        "def test_boiling():\n    assert to_fahrenheit(100) == 212\n",
    },
    tests={
        "tests/test_describe.py": "from tempconv.convert import describe\n\n\n"
        "def test_text():\n    assert describe(100) == '100 C = 212 F'\n\n\n"
        "def test_bytes():\n    assert describe(b'0') == '0 C = 32 F'\n"
    },
    gold={
        "setup.cfg": _SETUP_CFG + "install_requires =\n    six==1.16.0\n",
        "setup.py": "from setuptools import setup\n\n# Metadata and dependencies: setup.cfg.\n"
        "setup(zip_safe=False)\n",
        "tempconv/convert.py": _CONVERT
        + "    text = six.ensure_str(celsius) if isinstance(celsius, bytes) else str(celsius)\n"
        "    from tempconv.units import to_fahrenheit\n\n"
        "    return '%s C = %g F' % (text, to_fahrenheit(float(text)))\n",
    },
    broken_gold={
        "setup.cfg": _SETUP_CFG + "install_requires =\n    six==1.16.0\n",
        "tempconv/convert.py": _CONVERT + "    return '%s C' % six.ensure_str(str(celsius))\n",
    },
    failing={
        "tests/test_env.py": "import os\n\n\ndef test_env():\n"
        "    assert os.environ['SELFBENCH_NO_SUCH']\n"
    },
    failing_selector="tests/test_env.py",
    overrides={
        "setupCommand": "python3 -m venv .venv && .venv/bin/pip install -q -e . pytest",
        "testCommand": ".venv/bin/python -m pytest {tests}",
        "failToPass": ["tests/test_describe.py"],
        "passToPass": ["tests/test_units.py"],
        "testPaths": ["tests/test_describe.py"],
        "toolchains": ["uv"],
        "environment": _VENV_ROOT,
    },
    options=["--build-network", "host"],
    runners=("pytest",),
    gold_manifests=("setup.cfg", "setup.py"),
)

# ---- a pdm project: the gold patch changes pyproject.toml and pdm.lock ------------------------


def _pdm_lock(packages: list[tuple[str, str, str, str]]) -> str:
    """A pdm.lock as pdm 2 writes it, for (name, version, wheel, sha256) rows."""
    head = (
        "# This file is @generated by PDM.\n# It is not intended for manual editing.\n\n"
        '[metadata]\ngroups = ["default", "test"]\nstrategy = ["inherit_metadata"]\n'
        'lock_version = "4.5.0"\ncontent_hash = "sha256:'
        + str(len(packages)) * 64
        + '"\n\n[[metadata.targets]]\nrequires_python = ">=3.11"\n'
    )
    rows = "".join(
        f'\n[[package]]\nname = "{name}"\nversion = "{version}"\n'
        f'summary = ""\nfiles = [\n    {{file = "{wheel}", hash = "sha256:{digest}"}},\n]\n'
        for name, version, wheel, digest in packages
    )
    return head + rows


_INICONFIG = (
    "iniconfig",
    "2.0.0",
    "iniconfig-2.0.0-py3-none-any.whl",
    "b6a85871a79d2e3b22d2d1b94ac2824226a63c6b741c88f7ae975f18b6778374",
)
_SIX = (
    "six",
    "1.16.0",
    "six-1.16.0-py2.py3-none-any.whl",
    "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254",
)


def _pdm_pyproject(dependencies: str) -> str:
    return (
        f'[project]\nname = "money"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = [{dependencies}]\n\n[build-system]\n"
        'requires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[tool.setuptools]\npackages = ["money"]\n\n[tool.pdm]\ndistribution = true\n'
    )


_FORMAT = "import six\n\n\ndef cents(value):\n" + steps(20, "    #")
PDM = Project(
    name="real-pdm",
    base={
        ".gitignore": ".venv/\n__pycache__/\n*.egg-info/\n.pdm-python\n",
        "pyproject.toml": _pdm_pyproject(""),
        "pdm.lock": _pdm_lock([_INICONFIG]),
        "money/__init__.py": "",
        "money/parse.py": "def parse(text):\n    return round(float(text) * 100)\n",
        "tests/test_parse.py": "from money.parse import parse\n\n\n"
        "def test_parse():\n    assert parse('1.25') == 125\n",
    },
    tests={
        "tests/test_cents.py": "from money.format import cents\n\n\n"
        "def test_cents():\n    assert cents(125) == '1.25'\n\n\n"
        "def test_bytes():\n    assert cents(b'5') == '0.05'\n"
    },
    gold={
        "pyproject.toml": _pdm_pyproject('"six==1.16.0"'),
        "pdm.lock": _pdm_lock([_INICONFIG, _SIX]),
        "money/format.py": _FORMAT
        + "    number = int(six.ensure_str(value)) if isinstance(value, bytes) else value\n"
        "    return '%d.%02d' % divmod(number, 100)\n",
    },
    broken_gold={
        "pyproject.toml": _pdm_pyproject('"six==1.16.0"'),
        "pdm.lock": _pdm_lock([_INICONFIG, _SIX]),
        "money/format.py": _FORMAT + "    return six.text_type(value)\n",
    },
    failing={
        "tests/test_env.py": "import os\n\n\ndef test_env():\n"
        "    assert os.environ['SELFBENCH_NO_SUCH']\n"
    },
    failing_selector="tests/test_env.py",
    overrides={
        # The project's CI installs with pip; pdm.lock is what its developers lock with.
        "setupCommand": "python3 -m venv .venv && .venv/bin/pip install -q -e . pytest",
        "testCommand": ".venv/bin/python -m pytest {tests}",
        "failToPass": ["tests/test_cents.py"],
        "passToPass": ["tests/test_parse.py"],
        "testPaths": ["tests/test_cents.py"],
        "toolchains": ["uv"],
        "environment": _VENV_ROOT,
    },
    options=["--build-network", "host"],
    runners=("pytest",),
    gold_manifests=("pyproject.toml", "pdm.lock"),
)


# What test_real_projects.py runs of this family: its runners' shapes (the task and its two
# rejected variants each), and the gold patches that change dependency files (the task alone).
PROJECTS = (
    shaped(UV_MONOREPO, "pytest-uv-monorepo", forged=True),
    shaped(PIP_UNITTEST, "unittest-pip", proves=True, forged=True),
)
MANIFEST_PROJECTS = (
    shaped(SETUPTOOLS, "setup-cfg-and-setup-py"),
    shaped(PDM, "pdm-lock"),
)
