"""init's rules that several rooms share (pure): what a Python or a node repository's files say
about its setup command, and whether a Python project tests with pytest. A room proposes its
test command and asks these for the rest."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping

from runner.runners.room import Proposal
from runner.runners.vocabulary import VOCABULARY


def json_object(data: bytes | None) -> dict[str, object]:
    try:
        parsed = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


# ---- Python ------------------------------------------------------------------------------------

_REQUIREMENTS = ("requirements.txt", "requirements-dev.txt")


def is_python(files: Mapping[str, bytes]) -> bool:
    """A Python project: one of the vocabulary's Python files is at its root."""
    return any(VOCABULARY.files.python.matches(name) for name in files)


def uses_pytest(files: Mapping[str, bytes]) -> bool:
    """A Python project that tests with pytest: its pyproject or requirements name pytest, or
    it locks with uv (whose projects run pytest as a dev dependency)."""
    if not is_python(files):
        return False
    try:
        project = tomllib.loads(files.get("pyproject.toml", b"").decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        project = {}
    requirements = b"".join(files.get(name, b"") for name in _REQUIREMENTS)
    return "pytest" in json.dumps(project) or b"pytest" in requirements or "uv.lock" in files


def python_proposal(files: Mapping[str, bytes], test_command: str, runner: str) -> Proposal:
    """The python toolchain (CPython 3.11 to 3.13 installed by uv, which it implies: a base image
    need not have any Python, and uv then finds these before downloading one of its own) and the
    setup the repository's files suggest."""
    if "uv.lock" in files:
        setup = "uv sync --frozen"
    elif wanted := [name for name in _REQUIREMENTS if name in files]:
        setup = "uv venv .venv && uv pip install --python .venv " + " ".join(
            f"-r {name}" for name in wanted
        )
    else:
        setup = "uv venv .venv && uv pip install --python .venv -e . pytest"
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
