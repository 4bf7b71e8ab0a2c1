"""One vocabulary for both sides of the verifier: the helper (verifier.pl) and the Python side
(runner/runners/vocabulary.py) load the one data file, dockerfiles/verifier/vocabulary.json,
they agree on every name and pattern in it, and no list of its names is spelled anywhere else.
(Two spellings drifted by 35 manifest names before: a gold patch that changed setup.cfg had no
dependency-setup pass and was undone at the oracle.)"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from runner.base.resources import verifier_dir
from runner.runners.vocabulary import VOCABULARY, VOCABULARY_FILE, Vocabulary
from tests.unit.test_verifier_helper import classify

ROOT = Path(__file__).resolve().parents[2]
DATA = verifier_dir() / VOCABULARY_FILE


def test_the_python_side_reads_the_data_file_whole() -> None:
    assert Vocabulary.model_validate_json(DATA.read_text()) == VOCABULARY
    raw = json.loads(DATA.read_text())
    assert VOCABULARY.files.manifests.names == frozenset(raw["files"]["manifests"]["names"])
    assert set(VOCABULARY.runners) == set(raw["runners"])


def test_the_helper_reads_the_data_file_beside_it(tmp_path: Path) -> None:
    """A name added to the data file only is a manifest to the helper, and a name taken out of
    it is not: the helper has no list of its own."""
    helper = tmp_path / "verifier"
    shutil.copytree(verifier_dir(), helper)
    doc = json.loads(DATA.read_text())
    doc["files"]["manifests"]["names"].append("selfbench-made-up.lock")
    doc["files"]["manifests"]["names"].remove("pdm.lock")
    (helper / VOCABULARY_FILE).write_text(json.dumps(doc))
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"heldOut": [], "goldFiles": []}))
    result = subprocess.run(
        ["perl", str(helper / "verifier.pl"), "classify", str(task), "-"],
        input="A\t100644\tselfbench-made-up.lock\nM\t100644\tpdm.lock\n",
        capture_output=True,
        text=True,
        check=True,
    )
    reasons = {
        json.loads(line)["path"]: json.loads(line)["reason"] for line in result.stdout.splitlines()
    }
    assert reasons["selfbench-made-up.lock"] == "a dependency manifest or lockfile"
    assert reasons["pdm.lock"] != "a dependency manifest or lockfile"


# Paths each rule of the vocabulary decides, at any depth; the two sides must agree on each.
MANIFESTS = [
    "setup.py",
    "setup.cfg",
    "pdm.lock",
    "go.work",
    "go.work.sum",
    "a/b/requirements-dev.in",
    "constraints.txt",
    "pkg/pylock.toml",
    "app/Cargo.lock",
    "web/pnpm-lock.yaml",
    "lib/x.gemspec",
    "src/App.csproj",
]
NOT_MANIFESTS = ["src/setup_helpers.py", "docs/requirements.md", "go.sum.bak", "README"]


@pytest.mark.parametrize("path", MANIFESTS + NOT_MANIFESTS)
def test_both_sides_call_the_same_files_manifests(path: str, tmp_path: Path) -> None:
    _, reason = classify(tmp_path, [("M", "100644", path)])[path]
    assert VOCABULARY.is_manifest(path) == (path in MANIFESTS)
    assert (reason == "a dependency manifest or lockfile") == (path in MANIFESTS), reason


# ---- no list of the vocabulary's names spelled elsewhere ---------------------------------------

FILE_NAMES = (
    VOCABULARY.files.manifests.names
    | VOCABULARY.files.configs.names
    | VOCABULARY.files.hooks.names
    | VOCABULARY.files.runner_configs.names
)
DIRECTORIES = VOCABULARY.directories.installed | VOCABULARY.directories.tests
NAMES = FILE_NAMES | DIRECTORIES
# Source extensions are each language's own (grammars, script suffixes): not counted.
EXTENSIONS = (
    VOCABULARY.extensions.data | VOCABULARY.extensions.binary_data | VOCABULARY.extensions.compiled
)
RUNNER_NAMES = frozenset(VOCABULARY.runners)


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    return []


def _spelled_lists(tree: ast.AST) -> list[tuple[int, list[str]]]:
    found = []
    for node in ast.walk(tree):
        values = _strings(node)
        files = [v for v in values if v in FILE_NAMES]
        dirs = [v for v in values if v in DIRECTORIES]
        extensions = [v for v in values if v.lstrip(".") in EXTENSIONS]
        if len(files) >= 3 or len(dirs) >= 4 or len(extensions) >= 6:
            found.append((getattr(node, "lineno", 0), files or dirs or extensions))
    return found


def test_no_python_module_spells_a_list_of_the_vocabulary() -> None:
    """A collection literal with three or more of its file names, four of its directories or
    six of its data, binary or compiled extensions is a second spelling of the vocabulary."""
    offenders = []
    for path in sorted((ROOT / "runner").rglob("*.py")):
        for line, names in _spelled_lists(ast.parse(path.read_text())):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {names[:4]}")
    assert offenders == []


def test_the_helper_spells_no_list_of_the_vocabulary() -> None:
    """No qw() list of the helper (or of a runner's Perl reader) holds vocabulary names or the
    runners' names: it reads them from the data file."""
    offenders = []
    for path in [verifier_dir() / "verifier.pl", *sorted(verifier_dir().rglob("*.pl"))]:
        for match in re.finditer(r"qw\(([^)]*)\)", path.read_text()):
            words = match.group(1).split()
            listed = [w for w in words if w in NAMES or w in RUNNER_NAMES or w in EXTENSIONS]
            if len(listed) >= 3:
                offenders.append(f"{path.name}: qw({' '.join(words[:6])} ...)")
    assert offenders == []


# ---- the vocabulary's runners are the registry ---------------------------------------------

# The hooks folders that are no runner's: a language's kit, shared by its runners.
KITS = {"node", "python"}


def test_every_room_module_is_a_vocabulary_runner_and_each_runner_has_its_room() -> None:
    """The registry is the vocabulary's runners: a room module whose runner the vocabulary lacks
    would never be asked, so each module with a ROOM must be one of them, and in their order."""
    import importlib
    import pkgutil

    import runner.runners as package
    from runner.runners import ROOMS
    from runner.runners.room import Room

    with_rooms = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"runner.runners.{info.name}")
        if isinstance(getattr(module, "ROOM", None), Room):
            with_rooms.add(module.ROOM.name)
    assert with_rooms == set(VOCABULARY.runners)
    assert [room.name for room in ROOMS] == list(json.loads(DATA.read_text())["runners"])


def test_each_hooks_folder_is_a_runner_s_or_a_kit_s() -> None:
    """dockerfiles/verifier/hooks/ holds one folder per runner with a recorder of its own and
    the languages' kits; a runner on Python has its hook module in its folder."""
    folders = {p.name for p in (verifier_dir() / "hooks").iterdir() if p.is_dir()}
    assert folders - KITS <= set(VOCABULARY.runners), folders - KITS
    for name, runner in VOCABULARY.runners.items():
        if runner.python is not None:
            assert (verifier_dir() / "hooks" / name / f"{runner.python.module}.py").is_file()
        if runner.evidence == "output":
            assert (verifier_dir() / "hooks" / name / "output.pl").is_file()


def test_a_python_runner_is_wired_from_the_vocabulary_alone(tmp_path: Path) -> None:
    """The evidence boot knows no runner: a made-up runner on Python in the vocabulary is
    started by its command line and gets its hook module called as the module it waits for
    loads, in a real interpreter."""
    boot_source = verifier_dir() / "hooks" / "python" / "selfbench_evidence_boot.py"
    state = tmp_path / "state"
    state.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    boot = boot_source.read_text().replace(
        '_STATE = "/opt/selfbench-verifier/state"', f"_STATE = {str(state)!r}"
    )
    (site / "selfbench_evidence_boot.py").write_text(boot)
    (site / "selfbench_madeup_evidence.py").write_text(
        "import sys\n"
        "def loaded(module, emit, sessions):\n"
        "    module.SEEN = ('hooked', sorted(sessions))\n"
    )
    (site / "madeup_runner.py").write_text("SEEN = None\nPLUGINS = ('own',)\n")
    (site / "madeup_cli.py").write_text(
        "import os\n"
        "import selfbench_evidence_boot as boot\n"
        "print(boot._argv_runner(), sorted(os.path.basename(p) for p in boot._OURS))\n"
        "import madeup_runner\n"
        "print(madeup_runner.SEEN, madeup_runner.PLUGINS)\n"
    )
    (state / "python-hooks.txt").write_text(
        "start\tmadeup\t-m\tmadeup_cli\n"
        "load\tmadeup\tmadeup_runner\tselfbench_madeup_evidence\t\n"
        "load\tmadeup\tmadeup_runner\tselfbench_madeup_plugin\tPLUGINS\n"
    )
    env = {"PYTHONPATH": str(site), "SELFBENCH_EVIDENCE_SOCKET": "@selfbench-no-collector"}
    result = subprocess.run(
        ["python3", "-m", "madeup_cli"], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.splitlines() == [
        "madeup ['selfbench_evidence_boot.py', 'selfbench_madeup_evidence.py',"
        " 'selfbench_madeup_plugin.py']",
        "('hooked', ['madeup']) ('own', 'selfbench_madeup_plugin')",
    ]
