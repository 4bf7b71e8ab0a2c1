"""init's rules that several rooms share (pure): what a Python or a node repository's files say
about its setup command, and whether a Python project tests with pytest. A room proposes its
test command and asks these for the rest."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping

from runner.runners.cifiles import ci_python_runner, ci_requirements
from runner.runners.room import Proposal
from runner.runners.vocabulary import VOCABULARY


def json_object(data: bytes | None) -> dict[str, object]:
    try:
        parsed = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


# ---- Python ------------------------------------------------------------------------------------

# The requirement files a setup installs when the CI files name none: the root's, and the test
# requirements kept beside the tests or in a requirements folder.
_REQUIREMENTS = re.compile(
    r"^(requirements(-dev|-test|-tests|_dev|_test)?\.txt"
    r"|tests?/requirements[^/]*\.txt|requirements/(dev|test|tests|testing)\.txt)$"
)
# pytest's own configuration files (the vocabulary's named for pytest, and its hidden
# `.pytest.ini`) and a root conftest.py: their presence says the project tests with pytest.
_PYTEST_CONFIGS = frozenset(
    {name for name in VOCABULARY.files.configs.names if name.startswith("pytest.")}
    | {".pytest.ini", "conftest.py"}
)
# Sections of shared configuration files that configure pytest.
_PYTEST_SECTIONS = {"tox.ini": b"[pytest]", "setup.cfg": b"[tool:pytest]"}
# Where init looks for them besides the root (runner.compile.init lists these folders), and
# the root's configuration files a proposal reads besides the manifests.
PYTHON_TEST_FOLDERS = ("tests", "test", "requirements")
TEST_REQUIREMENTS = re.compile(r"^(tests?|requirements)/([^/]+/)*[^/]*\.txt$")
ROOT_CONFIGS = frozenset({*_PYTEST_CONFIGS, *_PYTEST_SECTIONS})


def is_python(files: Mapping[str, bytes]) -> bool:
    """A Python project: one of the vocabulary's Python files is at its root."""
    return any(VOCABULARY.files.python.matches(name) for name in files if "/" not in name)


def _requirements(files: Mapping[str, bytes]) -> list[str]:
    """The requirement files to install: those the CI files install, when they exist; else the
    usual names, the root's first."""
    named = [path for path in ci_requirements(files) if path in files]
    return named or sorted((p for p in files if _REQUIREMENTS.match(p)), key=_root_first)


def _root_first(path: str) -> tuple[int, str]:
    return (path.count("/"), path)


def uses_pytest(files: Mapping[str, bytes]) -> bool:
    """A Python project that tests with pytest: its CI files start pytest; or, where they start
    neither runner, its pytest configuration, its pyproject or requirements name pytest, or it
    locks with uv (whose projects run pytest as a dev dependency)."""
    if not is_python(files):
        return False
    if ci := ci_python_runner(files):
        return ci == "pytest"
    if any(name in files for name in _PYTEST_CONFIGS):
        return True
    if any(section in files.get(name, b"") for name, section in _PYTEST_SECTIONS.items()):
        return True
    try:
        project = tomllib.loads(files.get("pyproject.toml", b"").decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        project = {}
    requirements = b"".join(files.get(name, b"") for name in _requirements(files))
    return "pytest" in json.dumps(project) or b"pytest" in requirements or "uv.lock" in files


def python_proposal(files: Mapping[str, bytes], test_command: str, runner: str) -> Proposal:
    """The python toolchain (CPython 3.11 to 3.13 installed by uv, which it implies: a base image
    need not have any Python, and uv then finds these before downloading one of its own) and the
    setup the repository's files suggest (pytest installed only for a project that runs it)."""
    if "uv.lock" in files:
        setup = "uv sync --frozen"
    elif wanted := _requirements(files):
        setup = "uv venv .venv && uv pip install --python .venv " + " ".join(
            f"-r {name}" for name in wanted
        )
    else:
        extra = " pytest" if runner == "pytest" else ""
        setup = f"uv venv .venv && uv pip install --python .venv -e .{extra}"
    return Proposal(
        toolchains=["python"], setup_command=setup, test_command=test_command, runner=runner
    )


# ---- node --------------------------------------------------------------------------------------


def node_dependencies(files: Mapping[str, bytes]) -> dict[str, object]:
    package = json_object(files.get("package.json"))
    deps: dict[str, object] = {}
    for key in ("dependencies", "devDependencies"):
        value = package.get(key)
        if isinstance(value, dict):
            deps.update(value)
    return deps


def npm_proposal(files: Mapping[str, bytes], test_command: str, runner: str) -> Proposal:
    """The node toolchain and npm's install: `npm ci` with a lockfile."""
    setup = "npm ci" if "package-lock.json" in files else "npm install --no-audit --no-fund"
    return Proposal(
        toolchains=["node"], setup_command=setup, test_command=test_command, runner=runner
    )
