"""The verification round without Docker: the fix boundary's rules (runner.compile.fixrules),
`fix` on real git repositories shaped like real projects (a uv project in a monorepo
subdirectory whose `.venv` is inside the repository and ignored, `node_modules`), and the
sidecar's check of a request that names the green verification it fixes (`fixOf`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.compile.fixrules import (
    fixed_task_problems,
    held_out,
    held_out_patch_problems,
    is_beside,
    is_held_out,
    merge_definition,
    summarize,
)
from runner.compile.patches import parse_patch
from runner.sidecar.policy import RequestRefusedError
from runner.sidecar.request import JobState, VerificationRequest, VerificationResponse
from runner.sidecar.service import Service, ServiceConfig
from runner.sidecar.store import Store
from tests.helpers import definition, diff_of, make_repo, write_task

ROOT = Path(__file__).resolve().parents[2]

# ---- the rules ---------------------------------------------------------------------------


def test_fields_merge_one_by_one_and_fixed_or_unknown_ones_are_refused() -> None:
    green = {
        "taskId": "t",
        "prompt": "Do it.",
        "timeouts": {"setupSeconds": 60, "agentSeconds": 60, "testsSeconds": 60},
        "failToPass": ["a"],
    }
    merged, problems = merge_definition(
        green,
        {"timeouts": {"testsSeconds": 120}, "failToPass": ["a", "b"], "taskId": "t"},
    )
    assert problems == []
    assert merged["timeouts"] == {"setupSeconds": 60, "agentSeconds": 60, "testsSeconds": 120}
    assert merged["failToPass"] == ["a", "b"]
    _, problems = merge_definition(
        green, {"prompt": "Do more.", "baseCommit": "f" * 40, "colour": 1}, file="fix/d.json"
    )
    assert [(p.file, p.field) for p in problems] == [
        ("fix/d.json", "prompt"),
        ("fix/d.json", "baseCommit"),
        ("fix/d.json", "colour"),
    ]
    assert "never changes the instruction" in problems[0].message
    assert problems[2].message.startswith("unknown field")


@pytest.mark.parametrize(
    ("command", "selector", "escapes"),
    [
        ("pytest {tests}", "../../../etc/passwd", True),
        ("pytest {tests}", "/etc/passwd", True),
        ("pytest {tests}", "tests/test_a.py::test_b", False),
        ("go test {tests}", "../other", True),
        ("go test {tests}", "./mul", False),
        ("bash tests/run.sh {tests}", "../../etc/shadow", True),  # a custom runner's, too
        ("bash tests/run.sh {tests}", "tests/a.sh", False),
    ],
)
def test_a_fix_cannot_select_a_path_outside_the_repository(
    command: str, selector: str, escapes: bool
) -> None:
    green = {"testCommand": command, "workdir": ".", "failToPass": ["x"], "passToPass": []}
    _, problems = merge_definition(green, {"passToPass": [selector]}, file="fix/d.json")
    assert [(p.field, p.message) for p in problems] == (
        [("passToPass[0]", "names a path outside the repository")] if escapes else []
    )


@pytest.mark.parametrize(
    ("path", "held", "beside"),
    [
        ("pkg/tests/test_new.py", True, True),
        ("pkg/tests/fixtures/data.json", False, True),  # a new file below a held-out one's dir
        ("pkg/tests/data/deep/x.txt", True, True),  # inside a testPaths directory
        ("pkg/src/app.py", False, False),
        ("conftest.py", False, False),  # the root is beside no test in a directory
        ("pkg/tests/../src/app.py", False, False),  # normalized first
        ("/etc/passwd", False, False),
        ("", False, False),
    ],
)
def test_held_out_and_beside(path: str, held: bool, beside: bool) -> None:
    tests = parse_patch(
        b"diff --git a/pkg/tests/test_new.py b/pkg/tests/test_new.py\n"
        b"new file mode 100644\n--- /dev/null\n+++ b/pkg/tests/test_new.py\n@@ -0,0 +1 @@\n+x\n"
    )
    paths = held_out(tests, ["pkg/tests/data/", "."])
    assert paths == ["pkg/tests/data", "pkg/tests/test_new.py"]  # never the root
    assert is_held_out(path, paths) is held
    assert is_beside(path, paths) is beside


def patch_of(*paths: str, new: bool = True) -> bytes:
    out = b""
    for path in paths:
        if new:
            head, hunk = "new file mode 100644\n--- /dev/null\n", "@@ -0,0 +1 @@\n+x\n"
        else:
            head, hunk = f"--- a/{path}\n", "@@ -1 +1 @@\n-y\n+x\n"
        out += f"diff --git a/{path} b/{path}\n{head}+++ b/{path}\n{hunk}".encode()
    return out


def test_a_fixed_test_patch_stays_within_the_held_out_tests() -> None:
    green = parse_patch(patch_of("tests/test_new.py"))
    gold = parse_patch(patch_of("src/app.py", new=False))
    held = held_out(green, ["tests/test_new.py"])
    fine = parse_patch(patch_of("tests/test_new.py", "tests/fixture.json"))
    assert held_out_patch_problems(fine, held, gold) == []
    bad = parse_patch(patch_of("src/app.py", "src/helper.py", "tests/test_old.py", new=False))
    problems = held_out_patch_problems(bad, held, gold)
    assert [p.field for p in problems] == ["src/app.py", "src/helper.py", "tests/test_old.py"]
    assert "gold patch" in problems[0].message
    assert "outside the held-out tests" in problems[1].message


def green_files() -> dict[str, Any]:
    return {
        "definition.json": {
            "taskId": "t",
            "prompt": "Do it.",
            "difficulty": "easy",
            "testPaths": ["tests/test_new.py"],
            "failToPass": ["tests/test_new.py"],
            "passToPass": ["tests/test_old.py"],
        },
        "instruction.md": "Do it.\n",
        "test.patch": patch_of("tests/test_new.py"),
        "gold.patch": patch_of("src/app.py", new=False),
    }


def test_a_whole_fixed_task_against_the_green_one() -> None:
    green = green_files()
    fixed = json.loads(json.dumps({k: v for k, v in green.items() if k == "definition.json"}))
    fixed |= {k: v for k, v in green.items() if k != "definition.json"}
    fixed["definition.json"]["failToPass"] = ["tests/test_new.py", "tests/test_old.py"]
    fixed["definition.json"]["passToPass"] = []
    assert fixed_task_problems(green, fixed) == []
    summary = summarize(
        green["definition.json"],
        fixed["definition.json"],
        parse_patch(green["test.patch"]),
        parse_patch(fixed["test.patch"]),
    )
    assert summary.fields == ["failToPass", "passToPass"]
    assert summary.fail_to_pass.added == ["tests/test_old.py"]
    assert summary.pass_to_pass.removed == ["tests/test_old.py"]
    crossing = {
        **fixed,
        "gold.patch": patch_of("src/app.py", "src/more.py", new=False),
        "instruction.md": "Do it differently.\n",
        "test.patch": patch_of("tests/test_new.py", "src/app.py", new=False),
        "definition.json": {**fixed["definition.json"], "difficulty": "hard", "testPaths": ["src"]},
    }
    words = [(p.file, p.field) for p in fixed_task_problems(green, crossing)]
    assert words == [
        ("gold.patch", None),
        ("instruction.md", None),
        ("definition.json", "difficulty"),
        ("test.patch", "src/app.py"),
        ("definition.json", "testPaths[0]"),
    ]


# ---- `fix` on real repositories ----------------------------------------------------------

PYPROJECT = '[project]\nname = "calc"\nversion = "0.1.0"\n'
CALC = "def add(a, b):\n    return a + b\n"
CALC_GOLD = CALC + "".join(
    f'\n\ndef {name}(a, b):\n    """{name}."""\n    return a {op} b\n'
    for name, op in (("sub", "-"), ("mul", "*"), ("div", "/"), ("mod", "%"), ("pow_", "**"))
)
OLD_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
NEW_TEST = "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 2) == 1\n"


def uv_monorepo_task(tmp: Path) -> tuple[Path, Path, str]:
    """A uv project in `pkg/` of a monorepo, `.venv` and `node_modules` ignored by the
    repository; the green task and a reviewer's work tree (the base with the held-out tests
    applied, a virtualenv and node_modules in it)."""
    repo, commit = make_repo(
        tmp / "repo",
        {
            ".gitignore": ".venv/\nnode_modules/\n__pycache__/\n",
            "README.md": "monorepo\n",
            "pkg/pyproject.toml": PYPROJECT,
            "pkg/src/calc/__init__.py": CALC,
            "pkg/tests/test_old.py": OLD_TEST,
            "web/package.json": '{"name": "web"}\n',
        },
    )
    test_patch = diff_of(repo, {"pkg/tests/test_sub.py": NEW_TEST})
    gold_patch = diff_of(repo, {"pkg/src/calc/__init__.py": CALC_GOLD})
    doc = definition(
        taskId="calc-sub",
        baseCommit=commit,
        repo=str(repo),
        workdir="pkg",
        testCommand="uv run pytest {tests}",
        failToPass=["tests/test_sub.py"],
        passToPass=["tests/test_old.py"],
        testPaths=["pkg/tests/test_sub.py"],
    )
    task = write_task(tmp / "task", doc, test_patch=test_patch, gold_patch=gold_patch)
    tree = tmp / "work"
    subprocess.run(["git", "clone", "-q", str(repo), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "apply", str(task / "test.patch")], check=True)
    shutil.rmtree(tree / ".git")  # the reviewer's tree need not be a repository
    for junk in (".venv/lib/python3.11/site-packages/calc.pth", "web/node_modules/x/index.js"):
        (tree / junk).parent.mkdir(parents=True, exist_ok=True)
        (tree / junk).write_text("planted?\n")
    (tree / "pkg/tests/__pycache__").mkdir()
    (tree / "pkg/tests/__pycache__/test_old.cpython-311.pyc").write_bytes(b"\0")
    return task, tree, commit


def fix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", "fix", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_a_fix_from_a_real_work_tree_is_written_with_what_changed(tmp_path: Path) -> None:
    task, tree, _ = uv_monorepo_task(tmp_path)
    # Tighten the held-out test, add a fixture beside it, move the old test to fail-to-pass.
    (tree / "pkg/tests/test_sub.py").write_text(NEW_TEST + "    assert sub(0, 5) == -5\n")
    (tree / "pkg/tests/fixtures").mkdir()
    (tree / "pkg/tests/fixtures/cases.json").write_text("[]\n")
    fix_dir = tmp_path / "fix"
    fix_dir.mkdir()
    (fix_dir / "definition.json").write_text(
        json.dumps(
            {
                "failToPass": ["tests/test_sub.py", "tests/test_old.py"],
                "passToPass": [],
                "timeouts": {"testsSeconds": 90},
            }
        )
    )
    out = tmp_path / "fixed"
    done = fix(str(task), "--tree", str(tree), "--fix", str(fix_dir), "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["fixed"] is True
    changes = result["changes"]
    assert changes["fields"] == ["failToPass", "passToPass", "timeouts"]
    assert changes["testFiles"] == {
        "added": ["pkg/tests/fixtures/cases.json"],
        "modified": ["pkg/tests/test_sub.py"],
        "removed": [],
    }
    assert changes["failToPass"] == {"added": ["tests/test_old.py"], "removed": []}
    assert changes["passToPass"] == {"added": [], "removed": ["tests/test_old.py"]}
    written = json.loads((out / "definition.json").read_text())
    assert written["timeouts"]["testsSeconds"] == 90
    assert (
        written["timeouts"]["setupSeconds"]
        == json.loads((task / "definition.json").read_text())["timeouts"]["setupSeconds"]
    )
    assert (out / "gold.patch").read_bytes() == (task / "gold.patch").read_bytes()
    patch = (out / "test.patch").read_text()
    assert "assert sub(0, 5) == -5" in patch and "cases.json" in patch
    assert ".venv" not in patch and "node_modules" not in patch and "__pycache__" not in patch
    # The fixed task is a task: audit accepts it as it is.
    audit = subprocess.run(
        [sys.executable, "-m", "runner", "audit", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_a_fix_that_crosses_the_boundary_is_refused_naming_each_and_writes_nothing(
    tmp_path: Path,
) -> None:
    task, tree, _ = uv_monorepo_task(tmp_path)
    (tree / "pkg/src/calc/__init__.py").write_text(CALC + "\n# patched\n")  # a gold path
    (tree / "README.md").write_text("changed\n")  # a source file
    (tree / "pkg/conftest.py").write_text("import pytest\n")  # a new file, not beside a test
    fix_dir = tmp_path / "fix"
    fix_dir.mkdir()
    (fix_dir / "definition.json").write_text(
        json.dumps({"prompt": "Something else.", "baseCommit": "f" * 40, "difficulty": "hard"})
    )
    (fix_dir / "gold.patch").write_text("diff --git a/x b/x\n")
    out = tmp_path / "fixed"
    done = fix(str(task), "--tree", str(tree), "--fix", str(fix_dir), "-o", str(out))
    assert done.returncode == 2, done.stderr
    for words in (
        "gold.patch: a fix never changes the gold patch",
        "field `prompt`: a fix never changes the instruction",
        "field `baseCommit`: a fix never changes the base commit",
        "field `difficulty`: a fix never changes the difficulty",
        "field `pkg/src/calc/__init__.py`: a path of the gold patch",
        "field `README.md`: an edit outside the held-out tests",
        "field `pkg/conftest.py`: a new file outside the held-out tests",
    ):
        assert words in done.stderr, done.stderr
    assert ".venv" not in done.stderr and "node_modules" not in done.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".fixed.*"))


def test_a_tree_with_the_gold_patch_applied_is_no_edit_and_a_rejected_fix_is_not_written(
    tmp_path: Path,
) -> None:
    task, tree, _ = uv_monorepo_task(tmp_path)
    (tree / "pkg/src/calc/__init__.py").write_text(CALC_GOLD)  # the reviewer ran the oracle
    # A fix that drops the only fail-to-pass test file: the audit refuses the fixed task.
    (tree / "pkg/tests/test_sub.py").unlink()
    out = tmp_path / "fixed"
    done = fix(str(task), "--tree", str(tree), "-o", str(out), "--json")
    assert done.returncode in (1, 2), done.stdout + done.stderr
    assert "pkg/src/calc" not in done.stdout + done.stderr
    assert not out.exists()
    # Unchanged, the tree gives back the green task's own tests.
    tree_again = tmp_path / "again"
    shutil.copytree(tree, tree_again)
    (tree_again / "pkg/tests/test_sub.py").write_text(NEW_TEST)
    done = fix(str(task), "--tree", str(tree_again), "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changes"]["testFiles"] == {
        "added": [],
        "modified": [],
        "removed": [],
    }
    taken = fix(str(task), "--tree", str(tree_again), "-o", str(out))
    assert taken.returncode == 2 and "exists and is not an empty directory" in taken.stderr


def test_a_relative_tree_is_the_one_below_the_current_directory(tmp_path: Path) -> None:
    """`fix --tree repo` from the directory that holds it (git once read the relative path
    from the runner's scratch repository: "must be run in a work tree")."""
    task, tree, _ = uv_monorepo_task(tmp_path)
    (tree / "pkg/tests/test_sub.py").write_text(NEW_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "runner", "fix", str(task), "--tree", tree.name, "-o", "fixed"],
        capture_output=True,
        text=True,
        cwd=tree.parent,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "work tree" not in done.stderr
    assert (tree.parent / "fixed" / "test.patch").read_bytes() == (task / "test.patch").read_bytes()


# ---- the sidecar's fixOf -------------------------------------------------------------------


def request_of(task_dir: Path, **extra: Any) -> VerificationRequest:
    task = {
        "definition": json.loads((task_dir / "definition.json").read_text()),
        "instruction": "Add sub.",
        "testPatch": (task_dir / "test.patch").read_text(),
        "goldPatch": (task_dir / "gold.patch").read_text(),
    }
    doc = {"run": "r", "stage": "verification", "candidate": "c", "round": 1, "verify": 1}
    return VerificationRequest.model_validate({"task": task, **doc, **extra})


def test_the_sidecar_checks_a_fix_against_the_green_verification_it_names(
    tmp_path: Path,
) -> None:
    task, _, _ = uv_monorepo_task(tmp_path)
    repo = json.loads((task / "definition.json").read_text())["repo"]
    service = Service(
        ServiceConfig(state_dir=tmp_path / "state", allow_repo_roots=(Path(repo).parent,)),
        Store(tmp_path / "state" / "jobs.sqlite3"),
    )
    green = request_of(task, id="green")
    service.submit(green, source="http")
    red_fix = request_of(task, id="early", verify=2, fixOf="green")
    with pytest.raises(RequestRefusedError, match="is not green"):
        service.submit(red_fix, source="http")
    job = service.store.get("green")
    assert job is not None
    service.store.start("green", run_id="x")
    done = VerificationResponse(id="green", status="done", report={"verdict": "accepted"})
    service.answers.finish(job, done, state=JobState.DONE, verdict="accepted")

    fixed = request_of(task, id="fix-1", round=2, fixOf="green")
    fixed.task.definition["passToPass"] = []
    fixed.task.definition["failToPass"] = ["tests/test_sub.py", "tests/test_old.py"]
    assert service.submit(fixed, source="http").id == "fix-1"

    crossing = request_of(task, id="fix-2", round=2, verify=2, fixOf="green")
    crossing = crossing.model_copy(
        update={
            "task": crossing.task.model_copy(
                update={"instruction": "Add mul.", "gold_patch": crossing.task.gold_patch + "\n"}
            )
        }
    )
    crossing.task.definition["taskId"] = "other"
    with pytest.raises(RequestRefusedError) as caught:
        service.submit(crossing, source="http")
    body = caught.value.body()
    assert body.code == "fix-refused"
    assert [p.field for p in body.problems] == [
        "task.goldPatch",
        "task.instruction",
        "task.definition.taskId",
    ]
    assert service.store.get("fix-2") is None  # nothing recorded, nothing built

    unknown = request_of(task, id="fix-3", verify=3, fixOf="nobody")
    with pytest.raises(RequestRefusedError, match="no verification 'nobody' is known here"):
        service.submit(unknown, source="http")
    # A fix that vouches for itself: an unknown id, and its own edited task sent as the green
    # one (the gold patch changed in both). The requester's copy is never the reference.
    forged = crossing.task.model_copy(update={"gold_patch": crossing.task.gold_patch + "\n"})
    vouching = request_of(task, id="fix-4", round=2, verify=4, fixOf="elsewhere")
    vouching = vouching.model_copy(update={"task": forged, "fix_of_task": forged})
    with pytest.raises(RequestRefusedError, match="no verification 'elsewhere' is known"):
        service.submit(vouching, source="temporal")
    assert service.store.get("fix-4") is None
    # A fleet's other worker finds the green run its fleet published (green_elsewhere): that,
    # not the request's copy, is what the fix is checked against.
    service.green_elsewhere = lambda name: (green.task, "accepted") if name == "far" else None
    carried = request_of(task, id="fix-6", round=2, verify=6, fixOf="far")
    assert service.submit(carried, source="temporal").id == "fix-6"
    far_crossing = request_of(task, id="fix-7", round=2, verify=7, fixOf="far")
    far_crossing = far_crossing.model_copy(update={"task": forged, "fix_of_task": forged})
    with pytest.raises(RequestRefusedError, match="fixOfTask is not the task"):
        service.submit(far_crossing, source="temporal")
    lying = request_of(task, id="fix-5", round=2, verify=5, fixOf="green", fixOfTask=crossing.task)
    with pytest.raises(RequestRefusedError, match="fixOfTask is not the task"):
        service.submit(lying, source="http")


def test_the_review_index_says_how_to_hand_back_a_fix() -> None:
    """index.md ends with the hand-back: the `fix` command with options it really has."""
    import runner.cli.main  # noqa: F401  (registers every command)
    from runner.cli.common import cli
    from runner.run.review import _index_md

    index = {"taskId": "t", "runId": "r", "verdict": "accepted", "reason": ""}
    text = _index_md({**index, "items": [], "omitted": []})
    assert "## Handing back a fix" in text
    (command,) = [line.strip() for line in text.splitlines() if "selfbench-runner fix" in line]
    fix = cli.commands["fix"]
    options = {name for param in fix.params for name in getattr(param, "opts", [])}
    for option in ("--tree", "--fix", "-o"):
        assert option in command and option in options, option
