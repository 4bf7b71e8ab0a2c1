"""`init`: a task from a repository's change (real git repositories shaped like real projects),
its rules (runner.compile.initrules) and its refusals."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.compile.initrules import difficulty, is_test_path, propose, selectors
from runner.model.task import Difficulty
from tests.helpers import git, make_repo, run_cli_captured, write_files

run = run_cli_captured


@pytest.fixture(autouse=True)
def downloads_answer(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every toolchain's download mirrored by a local server that answers: init asks each
    proposed toolchain's download before anything is built, and no unit test asks the
    internet."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    mirrors = ",".join(f"{name}={url}" for name in ("uv", "python", "node", "go", "rust"))
    monkeypatch.setenv("SELFBENCH_TOOLCHAIN_MIRRORS", mirrors)
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def commit(repo: Path, files: dict[str, str | bytes | None], message: str) -> str:
    write_files(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def body(name: str, lines: int) -> str:
    return "".join(f"def {name}_{n}(x):\n    return x + {n}\n\n" for n in range(lines // 3))


@pytest.fixture
def uv_project(tmp_path: Path) -> tuple[Path, str, str]:
    """A uv project whose .venv lives in the repository, ignored; a change that adds a module,
    edits another, updates the lockfile and adds a test beside an existing one."""
    repo, base = make_repo(
        tmp_path / "calc",
        {
            ".gitignore": ".venv/\n__pycache__/\n",
            "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1.0"\n'
            '[dependency-groups]\ndev = ["pytest>=8"]\n',
            "uv.lock": "version = 1\n",
            "src/calc/__init__.py": "",
            "src/calc/ops.py": body("add", 30),
            "tests/test_ops.py": "from calc.ops import add_1\n\ndef test_add():\n"
            "    assert add_1(1) == 2\n",
        },
    )
    (repo / ".venv" / "lib").mkdir(parents=True)
    (repo / ".venv" / "lib" / "conftest.py").write_text("raise SystemExit\n")
    git(repo, "checkout", "-qb", "feature")
    head = commit(
        repo,
        {
            "src/calc/ops.py": body("add", 30) + body("mul", 40),
            "src/calc/power.py": body("power", 30),
            "uv.lock": "version = 1\n# numpy added\n",
            "tests/test_power.py": "from calc.power import power_1\n\ndef test_power():\n"
            "    assert power_1(1) == 2\n",
        },
        "Add mul and power (#42)",
    )
    git(repo, "checkout", "-q", "main")
    return repo, base, head


def test_init_splits_a_uv_projects_change_and_proposes_what_its_files_say(
    uv_project: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, base, _ = uv_project
    out = tmp_path / "task"
    code, stdout, err = run(
        "init", str(repo), "--base", base, "--head", "feature", "-o", str(out), "--json",
        "--prompt", "Add mul_* to calc.ops and a power module.",
        "--source-url", "https://git.example.org/calc/pull/42",
    )  # fmt: skip
    made = json.loads(stdout)
    assert code == 0, (stdout, err)
    assert made["ready"] is True and made["staticAudit"]["accepted"] is True
    assert made["testFiles"] == ["tests/test_power.py"]
    # The lockfile the change updates is the fix's, with the code.
    assert made["goldFiles"] == ["src/calc/ops.py", "src/calc/power.py", "uv.lock"]
    definition = json.loads((out / "definition.json").read_text())
    assert definition["baseCommit"] == base
    assert definition["setupCommand"] == "uv sync --frozen"
    assert definition["testCommand"] == ".venv/bin/python -m pytest {tests}"
    assert definition["toolchains"] == ["python"]
    assert definition["failToPass"] == ["tests/test_power.py"]
    assert definition["passToPass"] == ["tests/test_ops.py"]
    assert definition["testPaths"] == ["tests/test_power.py"]
    assert definition["sourcePr"] == 42  # from the squash commit's "(#42)"
    # 3 files, 70 changed lines, 1 pass-to-pass test: medium's minimums, not hard's 100 lines.
    assert definition["difficulty"] == "medium"
    assert b"tests/test_power.py" in (out / "test.patch").read_bytes()
    assert b"tests/" not in (out / "gold.patch").read_bytes()
    # The ignored .venv is no part of the change.
    assert b".venv" not in (out / "gold.patch").read_bytes() + (out / "test.patch").read_bytes()
    # The task written is one `audit` accepts as it is.
    assert run("audit", str(out), "--repo", str(repo))[0] == 0


def test_init_marks_what_it_cannot_know_and_says_so(
    uv_project: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, base, _ = uv_project
    out = tmp_path / "task"
    code, stdout, _ = run("init", str(repo), "--base", base, "--head", "feature", "-o", str(out))
    assert code == 1  # written, but the prompt is the author's to write
    assert "not ready: still marked TODO: sourceUrl, prompt" in stdout
    assert "review: prompt: marked TODO" in stdout
    assert "audit: accepted" in stdout
    assert json.loads((out / "definition.json").read_text())["prompt"].startswith("TODO: ")


def test_init_says_which_toolchain_cannot_be_downloaded_here_before_anything_is_built(
    uv_project: tuple[Path, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    downloads_answer: str,
) -> None:
    """python's CPython download does not answer (a closed port stands for a machine where no
    registry serves CPython): init says so, names the download and what to do instead, and the
    task is not ready; uv comes from a registry (pip on the host), so it is not asked."""
    repo, base, _ = uv_project
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/cpython"
    monkeypatch.setenv("SELFBENCH_TOOLCHAIN_MIRRORS", f"python={closed}")
    monkeypatch.setenv("SELFBENCH_TOOLCHAIN_SOURCES", "uv=registry")
    out = tmp_path / "task"
    args = ["init", str(repo), "--base", base, "--head", "feature", "-o", str(out)]
    args += ["--prompt", "Add mul.", "--source-url", "https://git.example.org/calc/pull/42"]
    code, stdout, err = run(*args)
    assert code == 1, (stdout, err)
    assert (
        f"review: toolchains: python cannot be built on this machine: its download {closed} "
        "does not answer (Connection refused); instead, give a mirror (--toolchain-mirror "
        "python=URL); or use the base image's Python: take python out of toolchains (uv stays)"
    ) in stdout
    assert "/usr/bin/python3" in stdout
    assert "toolchains: uv" not in stdout
    assert "not ready: cannot be downloaded on this machine: python (see review)" in stdout
    # The same in --json, and a download that answers (the option beats the variable) is ready.
    code, stdout, _ = run(*args[:6], "-o", str(tmp_path / "again"), *args[8:], "--json")
    made = json.loads(stdout)
    assert [u["toolchain"] for u in made["unreachable"]] == ["python"]
    assert made["unreachable"][0]["reason"] == "Connection refused" and not made["ready"]
    monkeypatch.delenv("SELFBENCH_TOOLCHAIN_MIRRORS")
    code, stdout, _ = run(
        *args[:6], "-o", str(tmp_path / "third"), *args[8:], "--json",
        "--toolchain-source", "uv=registry",
        "--toolchain-mirror", "python=" + downloads_answer,
    )  # fmt: skip
    assert code == 0 and json.loads(stdout)["unreachable"] == [], stdout


def test_init_takes_a_go_modules_packages_as_selectors(tmp_path: Path) -> None:
    """A Go module with a vendored package: the held-out test's package is the selector, the
    vendored code is not a test."""
    repo, base = make_repo(
        tmp_path / "gomod",
        {
            "go.mod": "module example.com/m\n\ngo 1.22\n",
            "vendor/example.com/dep/dep.go": "package dep\n",
            "add/add.go": "package add\n\nfunc Add(a, b int) int { return a + b }\n",
            "add/add_test.go": "package add\n",
        },
    )
    git(repo, "tag", "v1")
    head = commit(
        repo,
        {
            "mul/mul.go": "package mul\n" + "// line\n" * 25,
            "mul/mul_test.go": "package mul\n",
            "mul/testdata/cases.txt": "2 3 6\n",
            "vendor/example.com/dep/dep.go": "package dep\n// updated\n",
        },
        "mul",
    )
    out = tmp_path / "task"
    code, stdout, _ = run(
        "init", str(repo), "--base", "v1", "--head", head, "-o", str(out), "--json"
    )
    made = json.loads(stdout)
    assert made["testFiles"] == ["mul/mul_test.go", "mul/testdata/cases.txt"]
    assert made["goldFiles"] == ["mul/mul.go", "vendor/example.com/dep/dep.go"]
    definition = made["definition"]
    assert (definition["testCommand"], definition["failToPass"]) == ("go test {tests}", ["./mul"])
    assert definition["toolchains"] == ["go"] and definition["baseCommit"] == base
    assert code == 1 and made["todo"] == ["sourceUrl", "prompt"]


def test_init_refuses_what_it_cannot_split_and_writes_nothing(
    uv_project: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, base, _ = uv_project
    out = tmp_path / "task"
    # No file matches the author's rule: they are told which option decides.
    code, _, err = run(
        "init", str(repo), "--base", base, "--head", "feature", "-o", str(out),
        "--test-glob", "spec/**",
    )  # fmt: skip
    assert code == 2 and "--test-glob" in err and not out.exists()
    # A ref the repository does not have.
    code, _, err = run("init", str(repo), "--base", "nope", "--head", "feature", "-o", str(out))
    assert code == 2 and "'nope' is neither a commit id nor a branch or tag" in err
    assert not out.exists()
    # An id the contract refuses: refused before anything is in place.
    code, _, err = run(
        "init", str(repo), "--base", base, "--head", "feature", "-o", str(out),
        "--task-id", "Bad Id!",
    )  # fmt: skip
    assert code == 2 and "taskId" in err and not out.exists()
    # The same change twice: the directory is there now.
    (out / "x").mkdir(parents=True)
    code, _, err = run("init", str(repo), "--base", base, "--head", "feature", "-o", str(out))
    assert code == 2 and "exists and is not an empty directory" in err


def test_a_change_too_large_to_be_a_task_is_refused_before_it_is_read_whole(
    uv_project: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The diff is read a chunk at a time and stopped past twice the patch limit (the test and
    gold patches are each at most that): a 500 MB change took 4.8 GB and 143 s to be refused.
    The limit is lowered here so that a 16 MiB change stands for a huge one."""
    import tracemalloc

    from runner.base import validation

    repo, base, _ = uv_project
    git(repo, "checkout", "-q", "feature")
    line = "0123456789abcdef" * 4 + "\n"
    head = commit(repo, {"data/big.csv": line * (16 * 1024 * 1024 // len(line))}, "Big data")
    git(repo, "checkout", "-q", "main")
    monkeypatch.setattr(validation, "MAX_PATCH_BYTES", 1024 * 1024)
    out = tmp_path / "task"
    tracemalloc.start()
    try:
        code, _, err = run("init", str(repo), "--base", base, "--head", head, "-o", str(out))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 2, err
    assert f"the change {base}..{head} is over 2 MiB as a patch" in err, err
    assert "each at most 1 MiB" in err and "--head" in err, err
    assert not out.exists()
    assert peak < 8 * 1024 * 1024, peak  # never the 16 MiB diff whole


def test_the_author_s_globs_replace_the_default_rules(
    uv_project: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, base, _ = uv_project
    code, stdout, _ = run(
        "init", str(repo), "--base", base, "--head", "feature", "-o", str(tmp_path / "t"),
        "--json", "--test-glob", "tests/**", "--test-glob", "uv.lock",
    )  # fmt: skip
    made: dict[str, Any] = json.loads(stdout)
    assert made["testFiles"] == ["tests/test_power.py", "uv.lock"]
    assert code == 1  # the prompt is still marked


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("tests/test_x.py", True),
        ("pkg/x_test.py", True),
        ("conftest.py", True),
        ("src/app.test.ts", True),
        ("src/__tests__/app.js", True),
        ("web/app.spec.jsx", True),
        ("mul/mul_test.go", True),
        ("mul/testdata/in.txt", True),
        ("spec/models/user_spec.rb", True),
        ("src/testing.py", False),
        ("src/contest.py", False),
        ("uv.lock", False),
        ("vendor/example.com/dep/dep.go", False),
        ("node_modules/jest/index.js", False),
    ],
)
def test_which_changed_files_are_tests(path: str, test: bool) -> None:
    assert is_test_path(path) is test


def test_proposals_from_the_repositorys_files() -> None:
    node = propose(
        {"package.json": b'{"devDependencies": {"vitest": "^1"}}', "package-lock.json": b"{}"}
    )
    assert node is not None
    assert (node.setup_command, node.test_command) == ("npm ci", "npx vitest run {tests}")
    jest = propose({"package.json": b'{"devDependencies": {"jest": "^29"}}'})
    assert jest is not None and jest.test_command == "npx jest {tests}"
    assert jest.setup_command == "npm install --no-audit --no-fund"
    plain = propose({"requirements.txt": b"requests\n"})
    assert plain is not None and plain.test_command == ".venv/bin/python -m unittest {tests}"
    assert propose({"README.md": b"x"}) is None
    assert selectors(["a/b_test.go", "a/c_test.go", "b/d.go"], "go") == ["./a"]
    assert selectors(["x_test.go"], "go") == ["."]
    assert selectors(["tests/parse.rs", "src/lib.rs"], "cargo") == ["parse"]


def test_the_difficulty_is_the_highest_whose_minimums_the_change_meets() -> None:
    assert difficulty(1, 20, 0) is Difficulty.EASY
    assert difficulty(2, 50, 1) is Difficulty.MEDIUM
    assert difficulty(2, 50, 0) is Difficulty.EASY
    assert difficulty(3, 100, 2) is Difficulty.HARD


@pytest.mark.parametrize(
    ("glob", "path", "test"),
    [
        ("**/test_*.py", "src/test_utils/helpers.py", False),  # fnmatch's * crossed /
        ("**/test_*.py", "test_root.py", True),
        ("**/test_*.py", "a/b/test_deep.py", True),
        ("test_*.py", "pkg/sub/test_any_depth.py", True),  # no /: a name at any depth
        ("tests/*.py", "tests/unit/test_x.py", False),  # * stays in its component
        ("tests/**", "tests/unit/data/in.json", True),
        ("spec", "spec/models/user_spec.rb", True),  # a directory takes what is below it
        ("/uv.lock", "sub/uv.lock", False),  # a leading / anchors at the root
        ("uv.lock", "uv.lock", True),
    ],
)
def test_test_globs_read_as_gitignore_lines(glob: str, path: str, test: bool) -> None:
    assert is_test_path(path, [glob]) is test


def test_init_takes_any_revision_git_takes_in_a_local_repository(tmp_path: Path) -> None:
    """A short id, `REV^`, `REV~N`, `branch~1` and a full id all name the same commits (as the
    help's own `--base 1a2b3c4` example); an unknown one is a usage error naming it."""
    from runner.base.errors import UsageError
    from runner.compile.init import resolve_ref
    from runner.compile.repository import revision_commit

    repo, base = make_repo(tmp_path / "revs", {"a.txt": "a\n"})
    middle = commit(repo, {"b.txt": "b\n"}, "second")
    head = commit(repo, {"c.txt": "c\n"}, "third")
    git(repo, "branch", "-f", "feature", head)
    spec = str(repo)
    assert resolve_ref(spec, head[:7]) == head
    assert resolve_ref(spec, f"{head[:9]}^") == middle
    assert resolve_ref(spec, f"{head}~2") == base
    assert resolve_ref(spec, "feature~1") == middle
    assert resolve_ref(spec, "feature^^") == base
    assert resolve_ref(spec, base) == base
    with pytest.raises(UsageError, match="names no commit"):
        resolve_ref(spec, "0000000")
    with pytest.raises(UsageError, match="neither a commit id nor a branch or tag"):
        resolve_ref(spec, "no-such-branch~1")
    with pytest.raises(UsageError, match="repository on this disk"):
        revision_commit("https://example.invalid/r.git", "1a2b3c4")


def test_init_names_a_local_repository_by_its_origin_without_credentials(tmp_path: Path) -> None:
    """definition.repo means the same on another machine: a local clone's origin URL (its
    credentials dropped, the task id from its name), else the path with a note to name it."""
    from runner.compile.init import portable_repo

    repo, base = make_repo(tmp_path / "checkout", {"a.txt": "a\n"})
    assert portable_repo(str(repo)) == (str(repo), False)
    git(repo, "remote", "add", "origin", "https://user:s3cret@forge.example/team/calc.git")
    assert portable_repo(str(repo)) == ("https://forge.example/team/calc.git", True)
    git(repo, "remote", "set-url", "origin", "git@forge.example:team/calc.git")
    assert portable_repo(str(repo)) == ("git@forge.example:team/calc.git", True)
    assert portable_repo("https://forge.example/x.git") == ("https://forge.example/x.git", False)
    head = commit(repo, {"tests/test_a.py": "def test_a(): pass\n", "a.py": "x = 1\n"}, "a")
    out = tmp_path / "task"
    code, stdout, _ = run(
        "init", str(repo), "--base", base, "--head", head, "-o", str(out), "--json"
    )
    assert code == 1  # written; the prompt is the author's
    definition = json.loads(stdout)["definition"]
    assert definition["repo"] == "git@forge.example:team/calc.git"
    assert definition["taskId"] == f"calc-{head[:8]}"
    assert "s3cret" not in (out / "definition.json").read_text()


def test_a_bounded_git_read_still_ends_a_silent_command_at_its_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """git_output_bounded reads a chunk at a time; a command that prints nothing and never
    ends is killed at the timeout as run_git's is, not waited on for ever."""
    import time

    from runner.base.errors import InfrastructureError
    from runner.compile import git as runner_git

    monkeypatch.setattr(runner_git, "git_command", lambda args, git_dir=None: ["sleep", "30"])
    started = time.monotonic()
    with pytest.raises(InfrastructureError, match=r"git diff x took longer than 0\.5s"):
        runner_git.git_output_bounded(["diff", "x"], git_dir=tmp_path, limit=10, timeout=0.5)
    assert time.monotonic() - started < 10


WORKFLOW = b"""name: tests
on: [push, pull_request]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - name: Install
        run: |
          python -m pip install --upgrade pip
          python -m pip install -e . -r requirements/test.txt
      - run: python -m pytest -q tests
"""


def test_the_project_s_ci_and_pytest_files_say_which_runner_and_what_to_install() -> None:
    """The project's own CI steps and pytest configuration decide between pytest and unittest,
    and the requirement files its CI installs are the setup's; pytest is installed only for a
    project that runs it."""
    pyproject = b'[project]\nname = "calc"\nversion = "0.1"\n'
    # CI runs pytest and installs a test requirements file in a folder.
    ci = propose(
        {
            "pyproject.toml": pyproject,
            ".github/workflows/tests.yml": WORKFLOW,
            "requirements/test.txt": b"hypothesis\n",
        }
    )
    assert ci is not None and ci.runner == "pytest", ci
    assert (
        ci.setup_command
        == "uv venv .venv && uv pip install --python .venv -r requirements/test.txt"
    )
    assert ".github/workflows/tests.yml" in ci.found
    # CI runs unittest (Django's manage.py test alike), though the requirements name pytest.
    for line in ("python -m unittest discover -s tests", "python manage.py test"):
        gitlab = b"test:\n  script:\n    - pip install -r requirements.txt\n    - " + line.encode()
        unit = propose(
            {"pyproject.toml": pyproject, "requirements.txt": b"pytest\n", ".gitlab-ci.yml": gitlab}
        )
        assert unit is not None and unit.runner == "unittest", (line, unit)
    # No CI: pytest's own configuration files, and test requirements beside the tests.
    for name, text in (
        ("pytest.ini", b"[pytest]\n"),
        (".pytest.ini", b"[pytest]\n"),
        ("conftest.py", b""),
        ("tox.ini", b"[tox]\nenvlist = py311\n\n[pytest]\naddopts = -q\n"),
        ("setup.cfg", b"[metadata]\nname = calc\n\n[tool:pytest]\ntestpaths = tests\n"),
        ("tests/requirements.txt", b"pytest>=8\n"),
    ):
        found = propose({"pyproject.toml": pyproject, name: text})
        assert found is not None and found.runner == "pytest", name
    with_tests = propose({"setup.py": b"", "tests/requirements.txt": b"pytest>=8\n"})
    assert with_tests is not None
    assert with_tests.setup_command.endswith("-r tests/requirements.txt")
    # unittest without any of them: the package alone, no pytest installed.
    bare = propose({"pyproject.toml": pyproject, "tox.ini": b"[tox]\nenvlist = py311\n"})
    assert bare is not None and bare.runner == "unittest"
    assert bare.setup_command == "uv venv .venv && uv pip install --python .venv -e ."


def test_a_hostile_ci_file_is_read_within_bounds() -> None:
    """Aliases that would expand without end, a step that names a file outside the repository
    or behind a variable, and YAML that does not parse: read as data, bounded, skipped."""
    from runner.runners.cifiles import ci_lines, ci_requirements

    bomb = "a: &a [pytest, pytest]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(20)
    )
    bomb += "run: [*u, *u]\n"
    assert ci_lines({".gitlab-ci.yml": bomb.encode()}) == ["pytest", "pytest"]
    outside = (
        b"jobs:\n  t:\n    steps:\n"
        b"      - run: pip install -r ../x.txt -r $REQ -r /etc/r.txt -r ok.txt\n"
    )
    assert ci_requirements({".github/workflows/a.yml": outside}) == ["ok.txt"]
    assert ci_lines({".github/workflows/a.yml": b"run: [unclosed\n"}) == []
    # A file that is not a CI file is not read as one.
    assert ci_lines({"docs/ci.yml": b"run: pytest\n"}) == []
    # Commands split at operators outside quotes only, in one pass: a line of 100,000 of them
    # (a quote check per operator from the line's start took hours) reads at once.
    from runner.model.shell import commands
    from runner.runners.cifiles import ci_python_runner

    assert commands("pip install -r a.txt && python -m pytest 'x;y' | tee log\nmake") == [
        ["pip", "install", "-r", "a.txt"],
        ["python", "-m", "pytest", "x;y"],
        ["tee", "log"],
        ["make"],
    ]
    long_line = b"run: '" + b"true; " * 100_000 + b"python -m pytest'\n"
    assert ci_python_runner({".gitlab-ci.yml": long_line}) == "pytest"


def test_init_reads_the_project_s_ci_files_and_test_requirements(tmp_path: Path) -> None:
    """A setuptools project whose CI runs pytest and installs requirements/test.txt: init
    proposes pytest and that install (before: unittest, and `-e . pytest`)."""
    repo, base = make_repo(
        tmp_path / "calc",
        {
            "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1.0"\n',
            ".github/workflows/tests.yml": WORKFLOW.decode(),
            "requirements/test.txt": "pytest>=8\n",
            "src/calc/__init__.py": "",
            "src/calc/ops.py": body("add", 30),
            "tests/test_ops.py": "from calc.ops import add_1\n\ndef test_add():\n"
            "    assert add_1(1) == 2\n",
        },
    )
    git(repo, "checkout", "-qb", "feature")
    commit(
        repo,
        {
            "src/calc/power.py": body("power", 60),
            "src/calc/ops.py": body("add", 30) + body("mul", 30),
            "tests/test_power.py": "from calc.power import power_1\n\ndef test_power():\n"
            "    assert power_1(1) == 2\n",
        },
        "power",
    )
    out = tmp_path / "task"
    code, stdout, err = run(
        "init", str(repo), "--base", base, "--head", "feature", "-o", str(out), "--json",
        "--prompt", "Add a power module.", "--source-url", "https://git.example.org/calc/pull/7",
    )  # fmt: skip
    assert code == 0, (stdout, err)
    definition = json.loads((out / "definition.json").read_text())
    assert definition["testCommand"] == ".venv/bin/python -m pytest {tests}"
    assert definition["setupCommand"] == (
        "uv venv .venv && uv pip install --python .venv -r requirements/test.txt"
    )
