"""The shape the design promises, checked on the source: only engine.py talks to Docker, the
pure modules import nothing with side effects, and the old orchestrator class is gone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "runner"
# Pure logic: models, patches, audit, rendering, plans, judgement. No Docker, git, network,
# subprocess or signals here.
PURE = (
    "validation",
    "models",
    "patches",
    "audit",
    "shell",
    "render",
    "plan",
    "gates",
    "exploits",
    "stages",
    "reward",
    "buildlog",
    "runtime",
    "sidecar/request",
    "debug",
    "htmlreport",
    "harness",
    "coupling",
)
SIDE_EFFECT_MODULES = {"docker", "requests", "subprocess", "socket", "signal", "urllib3"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_only_engine_imports_docker() -> None:
    offenders = [
        path.name
        for path in modules()
        if path.name != "engine.py"
        and any(name == "docker" or name.startswith("docker.") for name in imported_modules(path))
    ]
    assert offenders == []
    assert "docker" in imported_modules(PACKAGE / "engine.py")


@pytest.mark.parametrize("name", PURE)
def test_pure_modules_have_no_side_effect_imports(name: str) -> None:
    imported = {n.split(".")[0] for n in imported_modules(PACKAGE / f"{name}.py")}
    assert imported & SIDE_EFFECT_MODULES == set()
    assert "runner.engine" not in imported_modules(PACKAGE / f"{name}.py")


def test_the_old_orchestrator_is_gone() -> None:
    assert not (PACKAGE / "verify.py").exists()
    for path in modules():
        tree = ast.parse(path.read_text())
        classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        assert "Verifier" not in classes, path.name


def test_environment_is_read_in_the_settings_module_only() -> None:
    readers = []
    for path in modules():
        text = path.read_text()
        if ("os.environ" in text or "os.getenv" in text) and path.name not in (
            "settings.py",
            "gitrepo.py",  # passes the environment through to git, adding GIT_TERMINAL_PROMPT
            "cli_output.py",  # GitHub Actions' own variables decide the output format
        ):
            readers.append(path.name)
    assert readers == []
