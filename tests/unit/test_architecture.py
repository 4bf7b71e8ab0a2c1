"""The shape the design promises, checked on the source: the layers are packages and each
imports only from the layers below it, only the engine package talks to Docker, the pure
modules import nothing with side effects, and the old orchestrator class is gone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "runner"
# Pure logic: models, patches, audit, rendering, plans, judgement. No Docker, git, network,
# subprocess or signals here.
PURE = (
    "base/validation",
    "model/task",
    "model/shell",
    "model/stages",
    "model/reward",
    "model/evidence",
    "model/census",
    "model/layout",
    "model/manifest",
    "model/verifiertask",
    "compile/patches",
    "compile/audit",
    "compile/render",
    "compile/templates",
    "compile/exploits/__init__",
    "runners/kit",
    "runners/command",
    "runners/vocabulary",
    "compile/exploits/python",
    "compile/exploits/node",
    "runners/__init__",
    "runners/room",
    "runners/setups",
    "runners/progress",
    "runners/pytest",
    "runners/unittest",
    "runners/jest",
    "runners/vitest",
    "runners/mocha",
    "runners/node_test",
    "runners/bun",
    "runners/go",
    "runners/cargo",
    "runners/exit_code",
    "compile/exploits/evidence_node",
    "compile/exploits/generic",
    "compile/harness",
    "compile/coupling",
    "plan/verify",
    "plan/images",
    "plan/planner",
    "plan/sidetrials",
    "plan/runtime",
    "plan/debug",
    "plan/debugcheck",
    "plan/labels",
    "plan/inimage",
    "plan/types",
    "plan/debugcommands",
    "judge/__init__",
    "judge/base",
    "judge/images",
    "judge/trials",
    "judge/probe",
    "judge/grade",
    "judge/hack",
    "judge/verdict",
    "engine/buildlog",
    "sidecar/request",
    "present/html",
)
# The layers, bottom first: a module imports from its own layer or the ones before it. (The
# sidecar, the batch and the CLI stand side by side at the top; the CLI starts the others.)
LAYERS = (
    ("base",),
    ("model",),
    ("runners",),
    ("compile",),
    ("plan", "present"),
    ("engine", "judge", "artifacts"),
    ("run",),
    ("supervise",),
    ("batch", "sidecar", "worker"),
    ("cli",),
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


def top_level_imports(path: Path) -> set[str]:
    """The modules a file imports when it is imported (not inside a function)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def layer_of(path: Path) -> int | None:
    relative = path.relative_to(PACKAGE)
    top = relative.parts[0].removesuffix(".py")
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    return None


def test_every_module_is_in_a_layer() -> None:
    loose = [
        str(p.relative_to(PACKAGE))
        for p in modules()
        if layer_of(p) is None and p.name not in ("__init__.py", "__main__.py")
    ]
    assert loose == []


def test_each_layer_imports_only_from_the_layers_below() -> None:
    upward = []
    for path in modules():
        mine = layer_of(path)
        if mine is None:
            continue
        for name in imported_modules(path):
            if not name.startswith("runner."):
                continue
            target = PACKAGE / name.removeprefix("runner.").replace(".", "/")
            theirs = layer_of(target if target.is_dir() else target.with_suffix(".py"))
            if theirs is not None and theirs > mine:
                upward.append(f"{path.relative_to(PACKAGE)} -> {name}")
    assert upward == []


def test_only_the_engine_package_imports_docker() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in modules()
        if path.relative_to(PACKAGE).parts[0] != "engine"
        and any(name == "docker" or name.startswith("docker.") for name in imported_modules(path))
    ]
    assert offenders == []
    assert "docker" in imported_modules(PACKAGE / "engine" / "docker.py")


@pytest.mark.parametrize("name", PURE)
def test_pure_modules_have_no_side_effect_imports(name: str) -> None:
    imported = {n.split(".")[0] for n in imported_modules(PACKAGE / f"{name}.py")}
    assert imported & SIDE_EFFECT_MODULES == set()
    assert "runner.engine.docker" not in imported_modules(PACKAGE / f"{name}.py")


def test_an_engine_is_constructed_in_the_engine_package_only() -> None:
    """Everything above gets one through runner.engine.docker.connect/connected."""
    makers = []
    for path in modules():
        relative = path.relative_to(PACKAGE)
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (getattr(node.func, "id", None) or getattr(node.func, "attr", None))
                in ("DockerEngine", "DockerClient", "APIClient")
                and relative.parts[0] != "engine"
            ):
                makers.append(f"{relative}:{node.lineno}")
    assert makers == []


def test_labels_are_made_in_one_place() -> None:
    """runner.plan.labels.runner_labels: no other module spells the runner's label by hand."""
    spelled = [
        str(path.relative_to(PACKAGE))
        for path in modules()
        if path.relative_to(PACKAGE).as_posix() != "plan/labels.py"
        and ('LABEL_RUNNER: "1"' in path.read_text() or '"org.selfbench.' in path.read_text())
    ]
    assert spelled == []


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
        if ("os.environ" in text or "os.getenv" in text) and str(path.relative_to(PACKAGE)) not in (
            "model/settings.py",
            "compile/git.py",  # passes the environment through to git, with its own
            "cli/output.py",  # GitHub Actions' own variables decide the output format
            "supervise/forkserver.py",  # sets a forked child's environment, reads none
        ):
            readers.append(str(path.relative_to(PACKAGE)))
    assert readers == []


# The stage and gate names (runner.model.stages) and the names of a run directory's and a
# bundle's files (runner.model.layout): spelled in their module, named everywhere else.
STAGE_AND_GATE_NAMES = frozenset(
    {"compile", "audit", "build", "smoke", "nop", "oracle", "determinism", "hack", "grade"}
)
LAYOUT_NAMES = frozenset(
    {
        "report.json",
        "report.html",
        "plan.json",
        "runner.log",
        "agent.patch",
        "expected-tests.json",
        ".selfbench-manifest.json",
    }
)


def _is_command_name(node: ast.Constant, parents: dict[ast.AST, ast.AST]) -> bool:
    """`@cli.command("audit")`: a CLI command's name, which happens to be a stage's too."""
    call = parents.get(node)
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "command"
    )


def test_stage_gate_and_layout_names_are_spelled_in_one_place() -> None:
    spelled = []
    for path in modules():
        relative = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            named = node.value in STAGE_AND_GATE_NAMES and not _is_command_name(node, parents)
            if named and relative != "model/stages.py":
                spelled.append(f"{relative}:{node.lineno}: {node.value!r}")
            if node.value in LAYOUT_NAMES and relative != "model/layout.py":
                spelled.append(f"{relative}:{node.lineno}: {node.value!r}")
    assert spelled == []


MAX_MODULE_LINES = 400
# A runner's room holds that runner whole (its exploit payloads included): one room past 400
# lines is better than its parts in siblings that must be read together (STYLE.md).
MAX_ROOM_LINES = 520
MAX_FUNCTION_LINES = 80


def test_modules_and_functions_stay_small() -> None:
    """docs/development.md's size rules, checked: a module past 400 lines (a runner's room past
    520) or a function past 80 is split before it grows further."""
    from runner.runners import ROOMS

    rooms = {type(room).__module__.removeprefix("runner.").replace(".", "/") for room in ROOMS}
    large = []
    for path in modules():
        relative = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        limit = MAX_ROOM_LINES if relative.removesuffix(".py") in rooms else MAX_MODULE_LINES
        if text.count("\n") > limit:
            large.append(f"{relative}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    large.append(f"{relative}:{node.lineno} {node.name}: {length} lines")
    assert large == []


def _declared() -> dict[str, set[str]]:
    """The distributions pyproject declares: core (`dependencies`) and each extra's, by
    normalised name."""
    import re
    import tomllib

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {
            re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-")
            for r in requirements
        }

    declared = {"core": names(project["dependencies"])}
    for extra, requirements in project["optional-dependencies"].items():
        declared[extra] = names(requirements)
    return declared


# The packages that may use an extra's distributions: the sidecar (`serve`) and the fleet
# (`worker`, `batch --temporal`); every other module runs with the core install.
EXTRA_PACKAGES = {"sidecar": ("sidecar", "worker"), "fleet": ("worker", "artifacts")}


def test_every_imported_package_is_declared_and_the_core_needs_no_extra() -> None:
    import importlib.metadata
    import sys

    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared: list[str] = []
    for path in modules():
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        allowed = set(declared["core"])
        for extra, packages in EXTRA_PACKAGES.items():
            if top in packages:
                allowed |= declared[extra]
        # The CLI imports an extra's modules inside the command that needs it, after
        # require_extra: only its module-level imports must come with the core install.
        imports = top_level_imports(path) if top == "cli" else imported_modules(path)
        for module in imports:
            root = module.split(".")[0]
            if root == "runner" or root in sys.stdlib_module_names or root == "__future__":
                continue
            owners = {d.lower().replace("_", "-") for d in distributions.get(root, [])}
            if not owners & allowed:
                undeclared.append(f"{path.relative_to(PACKAGE)}: {module} ({sorted(owners)})")
    assert undeclared == []
