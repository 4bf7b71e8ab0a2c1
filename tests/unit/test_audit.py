"""Static audit: every row of the seed's table, with its blocker text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.compile.audit import (
    NO_TEST_FILES,
    PLACEHOLDER_COUNT,
    PLACEHOLDER_HARDCODED,
    PLACEHOLDER_QUOTED,
    audit,
    placeholder_blockers,
)
from runner.compile.patches import PatchInfo, parse_patch
from runner.model.task import TaskDefinition
from tests.helpers import definition


def patch(files: dict[str, int]) -> PatchInfo:
    """A patch adding `lines` lines to each file."""
    parts = []
    for name, lines in files.items():
        body = "".join(f"+line {i}\n" for i in range(lines))
        parts.append(
            f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{name}\n@@ -0,0 +1,{lines} @@\n{body}"
        )
    return parse_patch("".join(parts).encode())


def model(**overrides: Any) -> TaskDefinition:
    return TaskDefinition.model_validate_json(json.dumps(definition(**overrides)))


TESTS = patch({"tests/test_new.sh": 3})


def test_accepted_easy() -> None:
    result = audit(model(), gold=patch({"lib.sh": 20}), tests=TESTS)
    assert result.accepted
    assert result.reason() == ""
    assert result.metrics.implementation_files == 1
    assert result.metrics.implementation_changed_lines == 20
    assert result.metrics.test_files == 1


@pytest.mark.parametrize(
    ("difficulty", "files", "lines", "p2p", "expected"),
    [
        (
            "easy",
            1,
            19,
            0,
            ["easy mode requires at least 20 changed implementation lines; found 19"],
        ),
        ("medium", 1, 50, 1, ["medium mode requires at least 2 implementation files; found 1"]),
        (
            "medium",
            2,
            49,
            1,
            ["medium mode requires at least 50 changed implementation lines; found 49"],
        ),
        (
            "medium",
            2,
            50,
            0,
            ["medium mode requires at least 1 pass-to-pass regression test; found 0"],
        ),
        ("hard", 3, 100, 2, []),
        (
            "hard",
            2,
            99,
            1,
            [
                "hard mode requires at least 3 implementation files; found 2",
                "hard mode requires at least 100 changed implementation lines; found 99",
                "hard mode requires at least 2 pass-to-pass regression tests; found 1",
            ],
        ),
        ("easy", 1, 20, 0, []),
    ],
)
def test_difficulty_profiles(
    difficulty: str, files: int, lines: int, p2p: int, expected: list[str]
) -> None:
    per_file = [lines // files + (1 if i < lines % files else 0) for i in range(files)]
    gold = patch({f"src/f{i}.sh": n for i, n in enumerate(per_file)})
    selectors = [f"tests/old_{i}.sh" for i in range(p2p)]
    result = audit(model(difficulty=difficulty, passToPass=selectors), gold=gold, tests=TESTS)
    assert result.blockers == expected
    assert result.reason() == "; ".join(expected)


def test_overlap_names_the_paths() -> None:
    gold = patch({"lib.sh": 20, "tests/test_new.sh": 1})
    result = audit(model(), gold=gold, tests=TESTS)
    assert result.blockers == ["gold and held-out test patches overlap: tests/test_new.sh"]


def test_held_out_path_that_swallows_a_gold_file() -> None:
    gold = patch({"src/lib.sh": 20, "tests/helper.sh": 1})
    result = audit(model(testPaths=["tests"]), gold=gold, tests=TESTS)
    assert result.blockers == ["held-out path 'tests' covers gold patch file tests/helper.sh"]


def test_overlap_through_unnormalized_paths() -> None:
    tests = parse_patch(
        b"diff --git a/tests/test_new.sh b/tests/test_new.sh\nnew file mode 100644\n"
        b"--- /dev/null\n+++ b/tests/test_new.sh\n@@ -0,0 +1 @@\n+x\n"
    )
    result = audit(
        model(testPaths=["./tests//test_new.sh"]), gold=patch({"lib.sh": 20}), tests=tests
    )
    assert result.blockers == []


def test_repository_problems_are_blockers() -> None:
    result = audit(
        model(),
        gold=patch({"lib.sh": 20}),
        tests=TESTS,
        repository=["gold.patch does not apply to baseCommit: error: patch failed: lib.sh:1"],
    )
    assert result.blockers == [
        "gold.patch does not apply to baseCommit: error: patch failed: lib.sh:1"
    ]
    assert result.repository_checked


def test_rename_source_counts_for_overlap() -> None:
    gold = parse_patch(
        b"diff --git a/tests/test_new.sh b/moved.sh\nsimilarity index 100%\n"
        b"rename from tests/test_new.sh\nrename to moved.sh\n"
    )
    result = audit(model(), gold=gold, tests=TESTS)
    assert "gold and held-out test patches overlap: tests/test_new.sh" in result.blockers


def test_a_selector_in_both_lists_is_a_blocker_not_invalid_input(tmp_path: Path) -> None:
    from runner.compile.taskdir import load_authored_task
    from tests.helpers import bash_task

    result = audit(
        model(failToPass=["t1", "t3"], passToPass=["t2", "t1", "t3"]),
        gold=patch({"lib.sh": 20}),
        tests=TESTS,
    )
    assert result.blockers == [
        "selector 't1' is in both failToPass and passToPass (passToPass[1]): it cannot both "
        "fail and pass at baseCommit",
        "selector 't3' is in both failToPass and passToPass (passToPass[2]): it cannot both "
        "fail and pass at baseCommit",
    ]
    # The schema allows it: the task loads.
    task = bash_task(tmp_path, failToPass=["tests/test_new.sh"], passToPass=["tests/test_new.sh"])
    assert load_authored_task(task.directory).definition.pass_to_pass == ["tests/test_new.sh"]


def test_held_out_patch_without_files() -> None:
    result = audit(model(), gold=patch({"lib.sh": 20}), tests=PatchInfo(changes=()))
    assert result.blockers == [NO_TEST_FILES]


def test_blockers_are_joined_in_table_order() -> None:
    gold = patch({"tests/test_new.sh": 1})
    result = audit(model(testCommand="run {tests} {tests}"), gold=gold, tests=TESTS)
    assert result.reason() == "; ".join(
        [
            "gold and held-out test patches overlap: tests/test_new.sh",
            "easy mode requires at least 20 changed implementation lines; found 1",
            PLACEHOLDER_COUNT,
        ]
    )


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("bun test {tests}", []),
        ("npm test -- {tests}", []),
        ("pytest -q {tests} --tb=short", []),
        ("cd pkg && go test {tests}", []),
        ("echo '{' && pytest {tests}", []),
        ("pytest", [PLACEHOLDER_COUNT]),
        ("pytest {tests} {tests}", [PLACEHOLDER_COUNT]),
        ("bun test {tests} && bun test {tests}", [PLACEHOLDER_COUNT]),
        ('bun test "{tests}"', [PLACEHOLDER_QUOTED]),
        ("bun test '{tests}'", [PLACEHOLDER_QUOTED]),
        ('pytest "-k {tests}"', [PLACEHOLDER_QUOTED]),
        ("bash -c 'pytest {tests}'", [PLACEHOLDER_QUOTED]),
        ("TESTS={tests} make test", [PLACEHOLDER_QUOTED]),
        ("env X={tests} make", [PLACEHOLDER_QUOTED]),
        ("pytest {tests} tests/test_new.sh", [PLACEHOLDER_HARDCODED]),
        ("pytest ./tests/test_old.sh {tests}", [PLACEHOLDER_HARDCODED]),
        ("pytest --deselect=tests/test_old.sh {tests}", [PLACEHOLDER_HARDCODED]),
        ("cd /app && pytest /app/tests/test_new.sh {tests}", [PLACEHOLDER_HARDCODED]),
        ("pytest tests/test_new.sh::case {tests}", [PLACEHOLDER_HARDCODED]),
        ("pytest tests/ {tests}", []),
        ("pytest tests/test_new.shx {tests}", []),
        ('pytest "{tests}" tests/test_new.sh', [PLACEHOLDER_QUOTED, PLACEHOLDER_HARDCODED]),
        # Every context but a command's own argument list, as the shell parses it.
        ("bash -c '{tests}'", [PLACEHOLDER_QUOTED]),
        ('echo "$("{tests}")"', [PLACEHOLDER_QUOTED]),
        ("cat <<EOF\n{tests}\nEOF\n", [PLACEHOLDER_QUOTED]),
        ("bash <<'EOF'\npytest {tests}\nEOF\n", [PLACEHOLDER_QUOTED]),
        ("pytest tests # {tests}", [PLACEHOLDER_QUOTED]),
        ("pytest $(echo {tests})", [PLACEHOLDER_QUOTED]),
        ("pytest `echo {tests}`", [PLACEHOLDER_QUOTED]),
        ("pytest <(printf '%s\\n' {tests})", [PLACEHOLDER_QUOTED]),
        ("for t in {tests}; do pytest $t; done", [PLACEHOLDER_QUOTED]),
        ("case {tests} in *) pytest;; esac", [PLACEHOLDER_QUOTED]),
        ("[[ -n {tests} ]] && pytest", [PLACEHOLDER_QUOTED]),
        ("pytest > {tests}", [PLACEHOLDER_QUOTED]),
        ("export T={tests}; pytest $T", [PLACEHOLDER_QUOTED]),
        ("T=({tests}); pytest ${T[@]}", [PLACEHOLDER_QUOTED]),
        ("f() { pytest {tests}; }", [PLACEHOLDER_QUOTED]),
        ("pytest x{tests}", [PLACEHOLDER_QUOTED]),
        ("pytest --files={tests}", [PLACEHOLDER_QUOTED]),
        ("pytest ${tests}", [PLACEHOLDER_QUOTED]),
        ("pytest $'{tests}'", [PLACEHOLDER_QUOTED]),
        ("pytest \\{tests}", [PLACEHOLDER_QUOTED]),
        ("{tests}", [PLACEHOLDER_QUOTED]),
        ("eval pytest {tests}", [PLACEHOLDER_QUOTED]),
        (". {tests}", [PLACEHOLDER_QUOTED]),
        ("bash {tests}", [PLACEHOLDER_QUOTED]),
        ("bash -ec {tests}", [PLACEHOLDER_QUOTED]),
        ("env CI=1 {tests}", [PLACEHOLDER_QUOTED]),
        ("timeout 60 {tests}", [PLACEHOLDER_QUOTED]),
        ("if {tests}", [PLACEHOLDER_QUOTED]),
        ("pytest 'unterminated {tests}", [PLACEHOLDER_QUOTED]),
        # ... and the argument lists that stay: nested in lists, pipelines, subshells, groups.
        ("cd pkg && uv run pytest -q {tests} 2>&1 | tee log", []),
        ("(cd pkg; go test -count=1 {tests}) && echo done", []),
        ("{ set -e; bun test {tests}; }", []),
        ("if pytest {tests}; then echo ok; fi", []),
        ("sh -c 'pytest \"$@\"' sh {tests}", []),
        ("timeout 600 env CI=1 npx jest {tests}", []),
        ("bash tests/run.sh {tests} # the runner", []),
    ],
)
def test_placeholder_rules(command: str, expected: list[str]) -> None:
    assert placeholder_blockers(command, ["tests/test_new.sh", "tests/test_old.sh"]) == expected


def test_a_misplaced_placeholder_keeps_the_seeds_words_and_says_where_it_is() -> None:
    result = audit(
        model(testCommand="bash tests/run.sh <<EOF\n{tests}\nEOF"),
        gold=patch({"lib.sh": 20}),
        tests=TESTS,
    )
    assert result.blockers == [PLACEHOLDER_QUOTED]
    assert result.hints == ["testCommand: {tests} it is part of a heredoc body"]


def test_escaped_quote_does_not_open_a_string() -> None:
    assert placeholder_blockers("echo \\' && pytest {tests}", ["a"]) == []
    assert placeholder_blockers('echo "a\\"b" && pytest {tests}', ["a"]) == []


def test_evidence_paths_must_exist_at_the_base_commit(tmp_path: Path) -> None:
    from runner.compile.compiler import compile_task
    from runner.compile.taskdir import load_authored_task
    from runner.model.settings import CompileOptions
    from tests.helpers import bash_task

    evidence = [
        {"field": "setupCommand", "path": "tests/run.sh", "note": "the runner script"},
        {"field": "services", "path": ".github/workflows/ci.yml", "lines": "3-9", "note": "CI"},
    ]
    task = bash_task(tmp_path, environment={"evidence": evidence})
    result = compile_task(
        load_authored_task(task.directory), repo=None, out=tmp_path / "b", options=CompileOptions()
    )
    assert result.repository.problems == [
        "evidence path '.github/workflows/ci.yml' does not exist at baseCommit"
    ]


def diff(path: str, removed: list[str], added: list[str]) -> str:
    body = "".join(f"-{line}\n" for line in removed) + "".join(f"+{line}\n" for line in added)
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -1,{len(removed)} +1,{len(added)} @@\n{body}"
    )


@pytest.mark.parametrize(
    ("command", "path", "removed", "added", "why"),
    [
        # The seen case: gold implements nothing and rewrites the runner script.
        (
            "bash tests/run.sh {tests}",
            "tests/run.sh",
            ["bash $1"],
            ['echo "PASS $1"'],
            "which the test command runs",
        ),
        (
            "cd sub && ./scripts/test {tests}",
            "sub/scripts/test",
            ["x"],
            ["exit 0"],
            "which the test command runs",
        ),
        (
            "make test TESTS={tests}",
            "Makefile",
            ["test:"],
            ["test: ; true"],
            "which the test command runs",
        ),
        (
            "pytest {tests}",
            "tests/conftest.py",
            [],
            ["import pytest"],
            "which configures the test runner",
        ),
        (
            "pytest {tests}",
            "pytest.ini",
            ["[pytest]"],
            ["[pytest]", "addopts = -k nothing"],
            "which configures the test runner",
        ),
        (
            "npx vitest run {tests}",
            "vitest.config.ts",
            ["a"],
            ["b"],
            "which configures the test runner",
        ),
        (
            "pytest {tests}",
            "pyproject.toml",
            ["x = 1"],
            ["addopts = '--co'"],
            "in the lines that configure the test runner",
        ),
        (
            "npm test -- {tests}",
            "package.json",
            ['"test": "jest"'],
            ['"test": "true"'],
            "in the lines that configure the test runner",
        ),
        (
            "go test {tests}",
            "go.mod",
            [],
            ["replace example.com/x => ./fake"],
            "in the lines that configure the test runner",
        ),
    ],
)
def test_gold_that_changes_the_test_harness_is_a_blocker(
    command: str, path: str, removed: list[str], added: list[str], why: str
) -> None:
    gold_text = diff(path, removed, added) + "".join(
        diff(f"src/f{i}.py", [], ["x"] * 10) for i in range(3)
    )
    gold = parse_patch(gold_text.encode())
    result = audit(model(testCommand=command), gold=gold, tests=patch({"tests/test_new.sh": 3}))
    wanted = f"gold.patch changes {path}, {why}: a reference solution must not change the test"
    assert any(b.startswith(wanted) for b in result.blockers), result.blockers


def test_ordinary_gold_changes_to_mixed_files_pass() -> None:
    gold_text = (
        diff("pyproject.toml", ['version = "1"'], ['version = "2"', 'deps = ["x"]'])
        + diff("package.json", ['"version": "1"'], ['"version": "2"'])
        + diff("src/app.py", [], ["x"] * 30)
        + diff("docs/run.sh.md", [], ["x"])
    )
    result = audit(
        model(testCommand="bash tests/run.sh {tests}"),
        gold=parse_patch(gold_text.encode()),
        tests=patch({"tests/test_new.sh": 3}),
    )
    assert not [b for b in result.blockers if "test harness" in b], result.blockers


def test_selector_files_and_the_contract_list_are_harness_too() -> None:
    gold_text = (
        diff("tests/test_old.sh", ["a"], ["b"])
        + diff("ci/check.py", [], ["x"])
        + diff("conftest.py", [], ["x"])
        + "".join(diff(f"src/f{i}.py", [], ["x"] * 10) for i in range(3))
    )
    result = audit(
        model(
            testCommand="bash tests/run.sh {tests}",
            environment={"harnessProtect": ["ci/*.py"], "harnessAllow": ["conftest.py"]},
        ),
        gold=parse_patch(gold_text.encode()),
        tests=patch({"tests/test_new.sh": 3}),
    )
    harness = [b for b in result.blockers if "test harness" in b]
    assert harness == [
        "gold.patch changes tests/test_old.sh, which a test selector names: a reference "
        "solution must not change the test harness",
        "gold.patch changes ci/check.py, which the environment contract's harnessProtect "
        "lists: a reference solution must not change the test harness",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "app/[id]/page.tsx",
        "app/(marketing)/about/page.tsx",
        "app/routes/posts.$slug.tsx",
        "src/routes/+page.svelte",
        "packages/@scope/pkg/index.ts",
        "docs/Release Notes.md",
        "src/{curly}.txt",
        "a/-dash-inside.txt",
    ],
)
def test_paths_of_real_frameworks_are_no_oddity(path: str) -> None:
    from runner.compile.audit import path_oddity

    assert path_oddity(path) is None


def test_a_held_out_path_a_command_line_would_misread_is_a_blocker() -> None:
    result = audit(
        model(testPaths=["tests/test_new.sh", "--collect-only", "tests/$(id)"]),
        gold=patch({"lib.sh": 20}),
        tests=TESTS,
    )
    assert result.blockers == [
        "testPaths[1]: path '--collect-only' starts with '-' (read as an option, or as pathspec "
        "magic, by the commands it reaches)",
        "testPaths[2]: path 'tests/$(id)' holds the shell metacharacter '$('",
    ]


def test_gitattributes_without_drivers_is_no_oddity() -> None:
    from runner.compile.audit import patch_oddities

    text = (
        "diff --git a/.gitattributes b/.gitattributes\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/.gitattributes\n@@ -0,0 +1,4 @@\n+# line endings\n+*.sh text eol=lf\n"
        "+*.png binary -diff\n+[attr]generated -merge linguist-generated\n"
    )
    assert patch_oddities("gold.patch", parse_patch(text.encode())) == []


@pytest.mark.parametrize(
    ("runner", "selector", "path"),
    [
        ("pytest", "tests/test_a.py", "tests/test_a.py"),
        ("pytest", "tests/test_a.py::TestX::test_y[1-2]", "tests/test_a.py"),
        ("pytest", "tests/unit", "tests/unit"),
        ("pytest", "-k", None),
        ("go", "./pkg/...", "./pkg"),
        ("go", "./...", "."),
        ("go", "example.com/m/pkg", None),
        ("jest", "tests/mul", None),  # a pattern over paths
        ("unittest", "tests.test_a", None),  # a module
        ("mocha", "test/a.spec.js:12", "test/a.spec.js"),
        ("mocha", "test/**/*.spec.js", None),  # a glob
        (None, "tests/test_new.sh", "tests/test_new.sh"),
        (None, "suite/name", None),  # a custom runner's name, not a file
    ],
)
def test_the_path_a_selector_names(runner: str | None, selector: str, path: str | None) -> None:
    from runner.runners import selector_path

    assert selector_path(runner, selector) == path


def test_selectors_that_name_nothing_in_the_repository_are_blockers(tmp_path: Path) -> None:
    """A path-like selector must name a file of the base commit with test.patch applied, and the
    names a pytest node id adds must occur in its file (a typo would pass nop as a failing test,
    and only the oracle would say something, without naming the selector)."""
    from runner.compile.compiler import compile_task
    from runner.compile.taskdir import load_authored_task
    from runner.model.settings import CompileOptions
    from tests.helpers import files_task

    task = files_task(
        tmp_path,
        "typos",
        base={
            "calc.py": "def add(a, b):\n    return a + b\n",
            "tests/test_add.py": "def test_add():\n    pass\n",
        },
        tests={"tests/test_mul.py": "def test_mul():\n    pass\n\n\ndef test_zero():\n    pass\n"},
        gold={"calc.py": "def mul(a, b):\n    return a * b\n"},
        testCommand="python -m pytest {tests}",
        failToPass=[
            "tests/test_mul.py::test_mul",
            "tests/test_mull.py",
            "tests/test_mul.py::test_zer0",
        ],
        passToPass=["tests/test_add.py"],
        testPaths=["tests/test_mul.py"],
    )
    result = compile_task(
        load_authored_task(task), repo=None, out=tmp_path / "b", options=CompileOptions()
    )
    assert result.repository.selector_problems == [
        "failToPass[1]: selector 'tests/test_mull.py' names tests/test_mull.py, which is neither "
        "in baseCommit nor added by test.patch (a typo would select no test)",
        "failToPass[2]: selector 'tests/test_mul.py::test_zer0': test_zer0 does not occur in "
        "tests/test_mul.py (a typo would select no test)",
    ]
