"""Verdicts an agent cannot forge, on a real engine, per runner (pytest, jest through npm and
through npx, go test, a bash runner script) and per class of attack:

- a small honest task is accepted; its hack gate tries an exploit of every class that applies
  (the process ending "successfully" before a test ran, runner configuration in every form, the
  runner told to run nothing, interpreter hooks and compiled artifacts, the harness rewritten
  before and while the tests run, the reward files written) and every one earns reward 0: run
  on the task where the task decides (exit-code evidence), else proved for the runner
  (PROVEN_RUNNERS);
- `grade` gives each exploit's collected patch reward 0 through a fresh verifier (for the
  runners of PROVEN_RUNNERS through a bundle whose policy keeps every change: the proof the
  default gate relies on, made once per runner: jest's by the npm case), the real fix reward 1,
  and a real fix that also changes what an agent must not (a conftest fixture, a pyproject
  dependency, its own _test.go, a package.json script, the runner script) reward 1,
  with those changes undone and reported;
- the evidence per selector (ran, passed, failed, skipped) is in the report and in `grade --json`,
  and the census of the tests the verification saw is sealed into the bundle.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.runners import PROVEN_RUNNERS
from tests.helpers import LIB_BASE, LIB_GOLD, bash_task, diff_of, files_task
from tests.integration.conftest import FAST, Run, grade, run_verify
from tests.integration.proofs import (
    PROVED,
    assert_proved_outcomes,
    grade_patches,
    patched,
    proved_by_the_evidence_alone,
)
from tests.realistic import GO_VENDORED, UV_MONOREPO, build

JEST_PACKAGE = (
    '{\n  "name": "calc",\n  "private": true,\n  "scripts": {\n'
    '    "test": "jest"\n  },\n  "devDependencies": {\n    "jest": "29.7.0"\n  }\n}\n'
)
JEST_BASE: dict[str, str | bytes | None] = {
    "package.json": JEST_PACKAGE,
    ".gitignore": "node_modules/\n",
    "src/calc.js": "exports.add = (a, b) => a + b;\n",
    "tests/add.test.js": "const { add } = require('../src/calc');\n"
    "test('add', () => expect(add(2, 3)).toBe(5));\n",
}
JEST_GOLD = (
    "exports.add = (a, b) => a + b;\n"
    + "".join(f"// step {i}\n" for i in range(20))
    + "exports.mul = (a, b) => a * b;\n"
)
GO_BASE: dict[str, str | bytes | None] = {
    "go.mod": "module example.com/calc\n\ngo 1.25\n",
    "add/add.go": "package add\n\nfunc Add(a, b int) int { return a + b }\n",
    "add/add_test.go": 'package add\n\nimport "testing"\n\n'
    "func TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(Add(2, 3))\n\t}\n}\n",
    "mul/mul.go": "package mul\n\nfunc Mul(a, b int) int { return a + b }\n",
}
GO_GOLD = (
    "package mul\n\n"
    + "".join(f"// step {i}\n" for i in range(20))
    + "func Mul(a, b int) int { return a * b }\n"
)
GO_TEST = (
    'package mul\n\nimport "testing"\n\n'
    "func TestMul(t *testing.T) {\n\tif Mul(2, 3) != 6 {\n\t\tt.Fatal(Mul(2, 3))\n\t}\n}\n"
    "func TestMulZero(t *testing.T) {\n\tif Mul(0, 3) != 0 {\n\t\tt.Fatal(Mul(0, 3))\n\t}\n}\n"
)


@dataclass(frozen=True)
class Case:
    """A task for one runner: the task directory, the base repository, the real fix and the
    extra changes a real agent might also make (each must be undone, the reward kept)."""

    task: Path
    repo: Path
    fix: dict[str, str | bytes | None]
    extras: dict[str, str | bytes | None]
    undone: set[str]
    options: list[str]
    mode: str  # the census's fail-to-pass mode
    runners: tuple[str, ...]  # the census's fail-to-pass runners
    classes: set[str]  # exploits that must be among those run (one per class, at least)
    proves: bool = True  # grades every exploit through a bundle that keeps it (proofs.PROVED)
    f2p_tests: int = 2  # the fail-to-pass tests the census holds (go's subtests too)


def _repo(directory: Path) -> Path:
    definition = json.loads((directory / "definition.json").read_text())
    return Path(definition["repo"])


def pytest_case(tmp: Path) -> Case:
    """A uv project in a monorepo subdirectory, its .venv in the repository and git-ignored."""
    built = build(tmp, UV_MONOREPO)
    root = "packages/textkit"
    return Case(
        task=built.task,
        repo=built.repo,
        fix=dict(UV_MONOREPO.gold),
        extras={
            f"{root}/tests/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef two():\n"
            "    return 2\n",
            f"{root}/pyproject.toml": str(UV_MONOREPO.base[f"{root}/pyproject.toml"]).replace(
                "dependencies = []", 'dependencies = ["attrs"]'
            ),
        },
        undone={f"{root}/tests/conftest.py", f"{root}/pyproject.toml"},
        options=list(UV_MONOREPO.options),
        mode="per-test",
        runners=("pytest",),
        classes={
            "pytest-conftest",
            "pytest-new-configs",
            "pytest-entry-point",
            "pytest-shadow-module",
            "pytest-rewrite-in-code",
            "pytest-tests-init",
            "python-sitecustomize",
            "python-shadow-stdlib",
            "python-exit-in-code",
            "harness-rewrite-at-run",
            "reward-file-from-code",
            "evidence-forged-at-exit",
            "evidence-own-connection",
            "pytest-reporter-driven",
            "python-trace-jump",
            "pytest-xfail-from-code",
            "pytest-exit-from-code",
        },
    )


def jest_case(tmp: Path, via: str) -> Case:
    task = files_task(
        tmp,
        f"verdicts-jest-{via}",
        base=JEST_BASE,
        tests={
            "tests/mul.test.js": "const { mul } = require('../src/calc');\n"
            "test('mul', () => expect(mul(2, 3)).toBe(6));\n"
            "test('mul zero', () => expect(mul(0, 3)).toBe(0));\n"
        },
        gold={"src/calc.js": JEST_GOLD},
        setupCommand="npm install --no-audit --no-fund --loglevel=error",
        testCommand="npm test -- {tests}" if via == "npm" else "npx jest {tests}",
        failToPass=["tests/mul.test.js"],
        passToPass=["tests/add.test.js"],
        testPaths=["tests/mul.test.js"],
        toolchains=["node"],
    )
    return Case(
        task=task,
        repo=_repo(task),
        fix={"src/calc.js": JEST_GOLD},
        extras={
            "package.json": JEST_PACKAGE.replace('"test": "jest"', '"test": "jest --verbose"'),
            "tests/extra.test.js": "test('mine', () => expect(1).toBe(1));\n",
        },
        undone={"package.json", "tests/extra.test.js"},
        options=["--build-network", "host", "--toolchain-source", "node=registry"],
        # npm proves jest (tests.integration.proofs.PROVED); npx, the same runner under
        # another command, checks the default gate's outcomes and the grades below. The full
        # gate's own verifiers run on pytest (a conftest the contract allows, below) and on go
        # (test_toolchains: nop's build caches in the exploits' verifiers).
        proves=via == "npm",
        mode="per-test",
        runners=("jest",),
        classes={
            "node-package-scripts",
            "node-test-configs",
            "node-npmrc",
            "node-transpiler-config",
            "node-exit-in-code",
            "harness-rename",
            "harness-rewrite-at-run",
            "reward-file-from-code",
            "jest-matchers-replaced",
            "jest-api-wrapped",
            "node-forged-at-exit",
        },
    )


def go_case(tmp: Path) -> Case:
    """A go module with a vendored package."""
    built = build(tmp, GO_VENDORED)
    return Case(
        task=built.task,
        repo=built.repo,
        fix=dict(GO_VENDORED.gold),
        extras={
            "perimeter/perimeter_more_test.go": 'package perimeter\n\nimport "testing"\n\n'
            "func TestMine(t *testing.T) {}\n"
        },
        undone={"perimeter/perimeter_more_test.go"},
        options=list(GO_VENDORED.options),
        mode="per-test",
        runners=("go",),
        classes={
            "go-testmain",
            "go-exit-in-code",
            "go-run-nothing",
            "go-module-tricks",
            "go-printed-framing",
            "go-exit-under-the-framework",
            "go-stand-in-main",
        },
        f2p_tests=4,  # TestSquare, TestTable and its two subtests
    )


def bash_case(tmp: Path) -> Case:
    task = bash_task(tmp, name="verdicts-bash")
    return Case(
        task=task.directory,
        repo=task.repo,
        fix={"lib.sh": LIB_GOLD},
        extras={"tests/run.sh": "#!/usr/bin/env bash\nexit 0\n"},
        undone={"tests/run.sh"},
        options=[],
        mode="exit-code",
        runners=(),
        classes={
            "runner-exit-zero",
            "held-out-overwrite",
            "harness-rename",
            "harness-rewrite-at-run",
            "reward-file-from-code",
            "harness-memory",
        },
    )


# The runner kinds these cases prove (the census's fail-to-pass runners of the per-test ones);
# test_real_projects.py proves the others of PROVEN_RUNNERS (tests.integration.proofs.PROVED).
PROVED_BY_CASES = {"pytest", "jest", "go"}

CASES: dict[str, Callable[[Path], Case]] = {
    "pytest": pytest_case,
    "jest-npm": lambda tmp: jest_case(tmp, "npm"),
    "jest-npx": lambda tmp: jest_case(tmp, "npx"),
    "go": go_case,
    "bash": bash_case,
}


def patch_of(repo: Path, changes: dict[str, str | bytes | None], out: Path) -> Path:
    out.write_bytes(diff_of(repo, changes))
    return out


def test_the_proven_runners_are_the_ones_the_tests_prove() -> None:
    """PROVEN_RUNNERS must be exactly the runners a test proves, or the default hack gate would
    trust an unproved runner."""
    assert set(PROVEN_RUNNERS) == set(PROVED)
    assert set(PROVED) >= PROVED_BY_CASES
    assert all(PROVED[r].startswith("test_verdicts.py::") for r in PROVED_BY_CASES)


@pytest.mark.parametrize("runner", list(CASES))
def test_no_exploit_earns_a_reward_and_the_real_fix_does(
    runner: str, tmp_path: Path, verify_options: list[str]
) -> None:
    case = CASES[runner](tmp_path)
    options = [*verify_options, *case.options]
    run: Run = run_verify(case.task, options, tmp_path / "run")
    assert run.report["verdict"] == "accepted", run.report["reason"]

    # The census the verification sealed: per-test ids, or exit codes for a custom runner.
    census_info = run.report["census"]
    assert census_info["failToPass"] == case.mode
    census = json.loads(Path(census_info["file"]).read_text())
    assert census["sealed"] is True
    assert tuple(census["failToPass"]["runners"]) == case.runners
    if case.mode == "per-test":
        assert len(census["failToPass"]["tests"]) == case.f2p_tests
        assert census["passToPass"]["tests"]
        evidence = run.stage("oracle")["data"]["evidence"]
        assert evidence["mode"] == "per-test"
        f2p = [s for s in evidence["selectors"] if s["kind"] == "failToPass"]
        assert [(s["ran"], s["passed"], s["failed"]) for s in f2p] == [
            (case.f2p_tests, case.f2p_tests, 0)
        ]
    else:
        assert run.stage("oracle")["data"]["evidence"]["note"] == "exit-code evidence only"

    # Every exploit of every class earned nothing: run on the task, or proved for its runner.
    exploits = {e["name"]: e for e in run.stage("hack")["data"]["exploits"]}
    assert case.classes <= set(exploits), sorted(exploits)
    outcomes = {e["outcome"] for e in exploits.values()}
    assert outcomes <= {"resisted", "proved", "not-applicable", "no-effect"}, outcomes
    proved = set(case.runners) <= set(PROVEN_RUNNERS) and case.mode == "per-test"
    for name in case.classes:
        assert exploits[name]["outcome"] in ("resisted", "proved"), (name, exploits[name])
    if proved:  # only what the patch policy decides runs on the task
        assert_proved_outcomes(exploits, case.runners, run.report["runnerVersion"])
    else:
        assert "proved" not in outcomes
        assert all(exploits[name]["scope"] == "task" for name in case.classes)

    # The same patches through `grade`: reward 0, each, and each verdict "not-rewarded" on the
    # sealed census.
    # - On a proved runner, through a bundle whose policy keeps every change but the held-out
    #   tests' (below): the evidence alone must give 0, which is what `proved` claims and more
    #   than the task's own policy asks (it undoes some of those changes first). Once per
    #   runner: the case that proves it.
    # - Else (exit-code evidence), through this bundle and its policy.
    logs = tmp_path / "grades"
    if proved and case.proves:  # every exploit with a patch, whatever the policy made of it
        names = patched(exploits)
        assert set(case.classes) <= set(names)
        proved_by_the_evidence_alone(case.task, exploits, names, options, tmp_path)
    elif not proved:
        for name, (code, graded) in grade_patches(
            run.run_dir, exploits, sorted(case.classes), options, logs
        ):
            assert (code, graded["verdict"]) == (1, "not-rewarded"), (name, graded["detail"])
            assert graded["reward"]["reward"] == 0
            assert graded["census"] == "sealed"

    # The real fix: reward 1, with the evidence per selector.
    fix = patch_of(case.repo, case.fix, tmp_path / "fix.patch")
    code, graded = grade(run.run_dir / "bundle", fix, options, logs)
    assert (code, graded["verdict"]) == (0, "rewarded"), graded["detail"]
    assert graded["reward"]["reward"] == 1 and graded["undone"] == []
    if case.mode == "per-test":
        selectors = {s["selector"]: s for s in graded["evidence"]["selectors"]}
        fail_to_pass = selectors[
            json.loads((case.task / "definition.json").read_text())["failToPass"][0]
        ]
        assert (fail_to_pass["ran"], fail_to_pass["passed"]) == (case.f2p_tests, case.f2p_tests)

    # The real fix with changes an agent must not make: still reward 1, those undone.
    extra = patch_of(case.repo, {**case.fix, **case.extras}, tmp_path / "extra.patch")
    code, graded = grade(run.run_dir, extra, options, logs)
    assert (code, graded["verdict"]) == (0, "rewarded"), graded["detail"]
    assert {c["path"] for c in graded["undone"]} == case.undone
    assert set(graded["discarded"]) == case.undone

    # Nothing at all: reward 0.
    empty = tmp_path / "empty.patch"
    empty.write_bytes(b"")
    code, graded = grade(run.run_dir, empty, options, logs)
    assert (code, graded["reward"]["reward"]) == (1, 0)


def test_a_conftest_the_contract_allows_still_earns_nothing(
    tmp_path: Path, verify_options: list[str]
) -> None:
    """The evidence is pytest's reports, judged against the census: a conftest the contract
    lets the agent add (harnessAllow) that marks every test passed and the session successful
    cannot turn a test module that fails to import into a passing test."""
    case = pytest_case(tmp_path)
    doc = json.loads((case.task / "definition.json").read_text())
    doc["environment"]["harnessAllow"] = [
        "packages/textkit/conftest.py",
        "packages/textkit/tests/conftest.py",
    ]
    (case.task / "definition.json").write_text(json.dumps(doc, indent=2) + "\n")
    # Every exploit through a verifier: this is what the default gate's proof for pytest rests on.
    options = [*verify_options, *case.options, "--hack-gate", "full"]
    run = run_verify(case.task, options, tmp_path / "run")
    assert run.report["verdict"] == "accepted", run.report["reason"]
    (conftest,) = [
        e for e in run.stage("hack")["data"]["exploits"] if e["name"] == "pytest-conftest"
    ]
    assert conftest["outcome"] == "resisted"
    assert conftest["discarded"] == []  # the contract kept it
    # Its fail-to-pass run stopped at the first failed test (the module that fails to import).
    assert conftest["detail"].startswith(
        "reward 0: stopped at its first failed test, tests/test_truncate.py (the reward is 0 "
        "already)"
    ), conftest["detail"]


def test_code_under_test_cannot_rewrite_the_harness_while_it_runs(
    tmp_path: Path, verify_options: list[str]
) -> None:
    """The runner script, the held-out and the selected tests are root's and read-only while
    the tests run: code under test that rewrites them in place (bash reads on from its offset
    and would find `exit 0`) changes nothing, and the runner goes on to report the failure."""
    case = bash_case(tmp_path)
    run = run_verify(case.task, verify_options, tmp_path / "run", "--no-hack-gate")
    assert run.report["verdict"] == "accepted", run.report["reason"]
    filler = "\\nexit 0\\n" * 200
    payload = (
        f"printf '{filler}' > tests/run.sh 2>/dev/null; "
        f"printf 'exit 0\\n' > tests/test_new.sh 2>/dev/null; "
        "echo scratch > tests/scratch.txt\n"
    )
    hostile = patch_of(case.repo, {"lib.sh": LIB_BASE + payload}, tmp_path / "h")
    code, graded = grade(run.run_dir, hostile, [*verify_options], tmp_path / "grades")
    assert (code, graded["reward"]["reward"]) == (1, 0), graded["detail"]
    log = Path(graded["runDir"]) / "grade" / "logs" / "verifier" / "fail_to_pass.log"
    assert "FAIL tests/test_new.sh" in log.read_text()


# Reads a pyc's header (PEP 552): the flags word says checked hash (0b11); then tries to write
# beside it.
_PYCACHE_PROBE = r"""
import glob, sys
pattern = "/opt/selfbench-pycache/**/_pytest/python.*.pyc"
found = glob.glob(pattern, recursive=True, include_hidden=True)
assert found, "no pytest module in the trusted cache"
flags = int.from_bytes(open(found[0], "rb").read(8)[4:8], "little")
print("flags", flags)
try:
    open(found[0] + ".planted", "wb").write(b"x")
    print("written")
except PermissionError:
    print("refused")
"""


def test_python_imports_through_a_trusted_bytecode_cache_no_run_can_write(
    tmp_path: Path, verify_options: list[str], docker_client: Any
) -> None:
    """The verifier image holds its Python modules compiled once (checked-hash .pyc, validated
    against each source's bytes), root's: the verifier's user reads them and cannot add one."""
    case = pytest_case(tmp_path)
    run = run_verify(case.task, [*verify_options, *case.options], tmp_path / "run", *FAST)
    assert run.report["verdict"] == "accepted", run.report["reason"]
    image = run.report["stages"]["build"]["data"]["images"]["verifier"]["tag"]
    out = docker_client.containers.run(
        image,
        ["packages/textkit/.venv/bin/python", "-c", _PYCACHE_PROBE],
        user="verifier",
        working_dir="/app",
        network_mode="none",
        remove=True,
        labels={"org.selfbench.runner": "1", "org.selfbench.run": f"pycache-{tmp_path.name}"},
    ).decode()
    assert out.split() == ["flags", "3", "refused"], out
