"""The verifier's helper (dockerfiles/verifier/verifier.pl), run by the host's perl through its
pure entry points: the default-deny patch policy path by path, and the parsers of the runners
that report on their own output (bun test, cargo test) or go test's -json events.

The helper's other commands change /app and run as root in the verifier image; the integration
tests run them there (tests/integration/test_verdicts.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from runner.base.resources import verifier_dir

HELPER = verifier_dir() / "verifier.pl"


def task_document(tmp_path: Path, **changes: Any) -> Path:
    document: dict[str, Any] = {
        "schemaVersion": 1,
        "taskId": "t",
        "workdir": ".",
        "heldOut": ["tests/test_new.py"],
        "testDirs": ["tests"],
        "commandFiles": ["scripts/run-tests.sh"],
        "selectorFiles": ["tests/test_old.py"],
        "harnessAllow": [],
        "harnessProtect": [],
        "goldFiles": ["src/pkg/core.py"],
        "failToPass": ["tests/test_new.py"],
        "passToPass": ["tests/test_old.py"],
        "expectedRunners": ["pytest"],
    }
    document.update(changes)
    path = tmp_path / "task.json"
    path.write_text(json.dumps(document))
    return path


def classify(
    tmp_path: Path,
    changes: list[tuple[str, str, str]],
    shadowed: list[str] | None = None,
    **task: Any,
) -> dict[str, tuple[str, str]]:
    shadow = "-"
    if shadowed is not None:
        (tmp_path / "shadowed.txt").write_text("".join(f"{n}\n" for n in shadowed))
        shadow = str(tmp_path / "shadowed.txt")
    result = subprocess.run(
        ["perl", str(HELPER), "classify", str(task_document(tmp_path, **task)), shadow],
        input="".join(f"{status}\t{mode}\t{path}\n" for status, mode, path in changes),
        capture_output=True,
        text=True,
        check=True,
    )
    out = {}
    for line in result.stdout.splitlines():
        item = json.loads(line)
        out[item["path"]] = (item["verdict"], item["reason"])
    return out


# (path, expected verdict, a word of the reason): every class the policy undoes, whatever the
# extension and however deep, and the source and data it keeps.
CASES = [
    ("src/pkg/util.py", "keep", "source"),
    ("src/app.ts", "keep", "source"),
    ("lib/calc.go", "keep", "source"),
    ("docs/guide.md", "keep", "data"),
    ("assets/logo.png", "keep", "data"),
    ("src/data/table.json", "keep", "data"),
    ("tests/test_new.py", "held-out", "held-out"),
    ("scripts/run-tests.sh", "undo", "run by the test command"),
    ("tests/test_old.py", "undo", "named by a test selector"),
    (".npmrc", "undo", "dotfile"),
    ("packages/a/.babelrc", "undo", "dotfile"),
    (".cargo/config.toml", "undo", "dotfile"),
    ("src/.pytest.ini", "undo", "dotfile"),
    ("pytest.ini", "undo", "configuration"),
    ("pytest.toml", "undo", "configuration"),
    ("tests/pytest.ini", "undo", "configuration"),
    ("tox.ini", "undo", "configuration"),
    ("jest.config.js", "undo", "configuration"),
    ("packages/web/vite.config.mts", "undo", "configuration"),
    ("babel.config.json", "undo", "configuration"),
    ("tsconfig.json", "undo", "configuration"),
    ("tsconfig.build.json", "undo", "configuration"),
    ("Makefile", "undo", "configuration"),
    ("ruff.toml", "undo", "configuration"),
    ("package.json", "undo", "manifest"),
    ("packages/deep/nested/package.json", "undo", "manifest"),
    ("pyproject.toml", "undo", "manifest"),
    ("setup.cfg", "undo", "manifest"),
    ("setup.py", "undo", "manifest"),
    ("requirements-dev.txt", "undo", "manifest"),
    ("go.mod", "undo", "manifest"),
    ("mul/go.mod", "undo", "manifest"),
    ("go.work", "undo", "manifest"),
    ("Cargo.lock", "undo", "manifest"),
    ("evil-1.0.dist-info/entry_points.txt", "undo", "packaging"),
    ("src/evil.egg-info/PKG-INFO", "undo", "packaging"),
    ("hook.pth", "undo", "packaging"),
    ("__pycache__/calc.cpython-312.pyc", "undo", "compiled"),
    ("calc.pyc", "undo", "compiled"),
    ("native/addon.node", "undo", "compiled"),
    ("node_modules/.bin/jest", "undo", "installed"),
    ("venv/lib/python3.12/site-packages/x.py", "undo", "installed"),
    ("vendor/github.com/x/y/y.go", "undo", "installed"),
    ("conftest.py", "undo", "hook"),
    ("src/conftest.py", "undo", "hook"),
    ("sitecustomize.py", "undo", "hook"),
    ("src/setupTests.ts", "undo", "hook"),
    ("jest.setup.js", "undo", "hook"),
    ("tests/helpers.py", "undo", "test directory"),
    ("src/__tests__/a.test.ts", "undo", "test directory"),
    ("src/__mocks__/fs.js", "undo", "test directory"),
    ("src/pkg/test_extra.py", "undo", "test file"),
    ("mul/zz_main_test.go", "undo", "test file"),
    ("src/app.spec.ts", "undo", "test file"),
    ("bin/tool", "undo", "not recognised"),
    ("LICENSE", "undo", "not recognised"),
]


def test_the_policy_keeps_source_and_data_and_undoes_everything_else(tmp_path: Path) -> None:
    found = classify(tmp_path, [("A", "100644", path) for path, _, _ in CASES])
    for path, verdict, reason in CASES:
        assert found[path][0] == verdict, (path, found[path])
        assert reason in found[path][1], (path, found[path])


def test_both_sides_of_a_rename_and_a_deletion_are_judged(tmp_path: Path) -> None:
    found = classify(
        tmp_path,
        [
            ("D", "000000", "conftest.py"),
            ("D", "000000", "src/old.py"),
            ("A", "100644", "src/new.py"),
        ],
    )
    assert found["conftest.py"][0] == "undo"  # deleting a base conftest is undone too
    assert found["src/old.py"] == ("keep", "source")
    assert found["src/new.py"] == ("keep", "source")


def test_links_and_submodules_are_undone(tmp_path: Path) -> None:
    found = classify(tmp_path, [("A", "120000", "src/link.py"), ("A", "160000", "third_party/x")])
    assert found["src/link.py"] == ("undo", "a symbolic link")
    assert found["third_party/x"] == ("undo", "a submodule")


def test_the_gold_patch_makes_its_paths_source_but_never_configuration(tmp_path: Path) -> None:
    found = classify(
        tmp_path,
        [
            ("M", "100644", "pkg/testing/helpers.py"),
            ("M", "100755", "bin/tool"),
            ("M", "100644", "tsconfig.json"),
            ("M", "100644", "package.json"),
        ],
        goldFiles=["pkg/testing/helpers.py", "bin/tool", "tsconfig.json", "package.json"],
    )
    assert found["pkg/testing/helpers.py"] == ("keep", "source")
    assert found["bin/tool"][0] == "keep"
    assert found["tsconfig.json"][0] == "undo"
    assert found["package.json"][0] == "undo"


def test_the_contract_adds_and_exempts(tmp_path: Path) -> None:
    found = classify(
        tmp_path,
        [("A", "100644", "conftest.py"), ("M", "100644", "src/generated/api.py")],
        harnessAllow=["conftest.py"],
        harnessProtect=["src/generated/*"],
    )
    assert found["conftest.py"][0] == "keep"
    assert found["src/generated/api.py"] == ("undo", "listed in the contract: harnessProtect")


def test_a_new_module_that_shadows_one_outside_app_is_undone(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    found = classify(
        tmp_path,
        [
            ("A", "100644", "pytest.py"),
            ("A", "100644", "argparse.py"),
            ("A", "100644", "_pytest/__init__.py"),
            ("A", "100644", "mymodule.py"),
            ("M", "100644", "json.py"),  # the repository's own module: not new
        ],
        shadowed=["pytest", "_pytest", "argparse", "json"],
    )
    assert found["pytest.py"] == ("undo", "shadows the module pytest that resolves outside /app")
    assert found["argparse.py"][0] == "undo"
    assert found["_pytest/__init__.py"][0] == "undo"
    assert found["mymodule.py"] == ("keep", "source")
    assert found["json.py"] == ("keep", "source")


def test_an_initialiser_beside_the_held_out_tests_is_undone(tmp_path: Path) -> None:
    found = classify(
        tmp_path,
        [("A", "100644", "src/pkg/__init__.py"), ("A", "100644", "src/other/__init__.py")],
        heldOut=["src/pkg/test_core.py"],
        testDirs=["src/pkg"],
        goldFiles=[],
    )
    assert found["src/pkg/__init__.py"] == ("undo", "a package initialiser beside the tests")
    assert found["src/other/__init__.py"] == ("keep", "source")


def parse(tmp_path: Path, runner: str, text: str) -> dict[str, Any]:
    log = tmp_path / f"{runner}.log"
    log.write_text(text)
    result = subprocess.run(
        ["perl", str(HELPER), "parse", runner, str(log), str(task_document(tmp_path))],
        capture_output=True,
        text=True,
        check=True,
    )
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


BUN = """bun test v1.3.14 (0d9b296a)

t/a.test.ts:
(pass) grp > ok [0.10ms]
(skip) grp > sk
error: expect(received).toBe(expected)
(fail) bad [0.14ms]
(todo) later

t/b.test.ts:
\x1b[32m(pass)\x1b[0m b ok [0.06ms]

 2 pass
Ran 5 tests across 2 files. [20.00ms]
"""


def test_bun_tests_are_read_from_its_output(tmp_path: Path) -> None:
    parsed = parse(tmp_path, "bun", BUN)
    assert parsed["finished"] is True
    assert {t["id"]: t["outcome"] for t in parsed["tests"]} == {
        "/app/t/a.test.ts > grp > ok": "passed",
        "/app/t/a.test.ts > grp > sk": "skipped",
        "/app/t/a.test.ts > bad": "failed",
        "/app/t/a.test.ts > later": "skipped",
        "/app/t/b.test.ts > b ok": "passed",
    }
    # Ended before its summary: not finished (a process.exit(0) in the code under test).
    assert parse(tmp_path, "bun", BUN.split(" 2 pass", maxsplit=1)[0])["finished"] is False
    # A test file that failed to load is an error of that file (no test line says so).
    unloadable = (
        "tests/stats.test.ts:\n\n# Unhandled error between tests\n-------------\n"
        "error: Cannot find module '../src/stats' from '/app/tests/stats.test.ts'\n"
        "-------------\n\n 0 pass\n 1 fail\n 1 error\nRan 1 test across 1 file. [12.00ms]\n"
    )
    parsed = parse(tmp_path, "bun", unloadable)
    assert parsed["tests"] == [
        {
            "id": "/app/tests/stats.test.ts > [unhandled error]",
            "outcome": "error",
            "file": "/app/tests/stats.test.ts",
        }
    ]
    assert parsed["finished"] is True


CARGO = """   Compiling calc v0.1.0 (/app)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.50s
     Running unittests src/lib.rs (target/debug/deps/calc-0123456789abcdef)

running 3 tests
test tests::adds ... ok
test tests::muls ... FAILED
test tests::slow ... ignored

test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out

     Running tests/api.rs (target/debug/deps/api-fedcba9876543210)

running 1 test
test api_works ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out
"""


def test_cargo_tests_are_read_per_test_binary(tmp_path: Path) -> None:
    parsed = parse(tmp_path, "cargo", CARGO)
    assert parsed["finished"] is True
    assert {t["id"]: t["outcome"] for t in parsed["tests"]} == {
        "calc tests::adds": "passed",
        "calc tests::muls": "failed",
        "calc tests::slow": "skipped",
        "api api_works": "passed",
    }
    cut = CARGO.split("test api_works", maxsplit=1)[0]
    assert parse(tmp_path, "cargo", cut)["finished"] is False


def test_go_json_events_give_tests_by_package_and_a_test_that_never_ended(
    tmp_path: Path,
) -> None:
    events = [
        {"Action": "start", "Package": "example.com/calc/mul"},
        {"Action": "run", "Package": "example.com/calc/mul", "Test": "TestMul"},
        {"Action": "pass", "Package": "example.com/calc/mul", "Test": "TestMul"},
        {"Action": "run", "Package": "example.com/calc/mul", "Test": "TestExit"},
        {"Action": "output", "Package": "example.com/calc/mul", "Output": "ok\n"},
        {"Action": "pass", "Package": "example.com/calc/mul"},
        {
            "Action": "fail",
            "Package": "example.com/calc/add",
            "FailedBuild": "example.com/calc/add",
        },
    ]
    parsed = parse(tmp_path, "go", "".join(json.dumps(e) + "\n" for e in events))
    assert {t["id"]: t["outcome"] for t in parsed["tests"]} == {
        "example.com/calc/mul TestMul": "passed",
        "example.com/calc/mul TestExit": "error",  # started, never ended: its binary exited
        "example.com/calc/add [build failed]": "error",
    }
    assert {t["file"] for t in parsed["tests"]} == {"example.com/calc/mul", "example.com/calc/add"}
