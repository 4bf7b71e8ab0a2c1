"""Coupling evidence, table-driven on small patches (python, JS, Go), and the base-tree lookup
on a real git repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.compile.coupling import candidates, coupling
from runner.compile.patches import PatchInfo, parse_patch
from runner.compile.repocheck import present_in_tree
from runner.compile.repository import resolve_repository
from tests.helpers import make_repo


def added(path: str, lines: list[str], *, new: bool = True) -> str:
    body = "".join(f"+{line}\n" for line in lines)
    header = "new file mode 100644\n--- /dev/null\n" if new else f"--- a/{path}\n"
    start = "0,0" if new else "1,0"
    hunk = f"@@ -{start} +1,{len(lines)} @@\n"
    return f"diff --git a/{path} b/{path}\n{header}+++ b/{path}\n{hunk}{body}"


def patch(*parts: str) -> PatchInfo:
    return parse_patch("".join(parts).encode())


CASES = [
    # (name, gold, tests, instruction, expected (kind, name, testFile, testLine))
    (
        "python private helper and exact message",
        patch(
            added(
                "pkg/calc.py",
                [
                    "def _normalise(x):",
                    "    return x",
                    "",
                    "def divide(a, b):",
                    '    raise ValueError("cannot divide by zero!")',
                ],
            )
        ),
        patch(
            added(
                "tests/test_calc.py",
                [
                    "from pkg.calc import divide, _normalise",
                    "",
                    "def test_div():",
                    '    with raises(ValueError, match="cannot divide by zero!"):',
                    "        divide(1, 0)",
                    "    assert _normalise(2) == 2",
                ],
            )
        ),
        "Add divide(a, b) to pkg/calc.py.",
        {
            ("private-name", "_normalise", "tests/test_calc.py", 1),
            ("error-message", "cannot divide by zero!", "tests/test_calc.py", 4),
        },
    ),
    (
        "JS new module path and internal constant",
        patch(
            added(
                "src/util/retry.js",
                [
                    "export const MAX_RETRY_DELAY = 500;",
                    "export function retry(fn) { return fn(); }",
                ],
            )
        ),
        patch(
            added(
                "test/retry.test.js",
                [
                    "import { retry, MAX_RETRY_DELAY } from '../src/util/retry.js';",
                    "expect(MAX_RETRY_DELAY).toBe(500);",
                ],
            )
        ),
        "Implement retry(fn).",
        {
            ("new-module", "util/retry", "test/retry.test.js", 1),
            ("internal-constant", "MAX_RETRY_DELAY", "test/retry.test.js", 1),
        },
    ),
    (
        "Go test reading a fixture only the gold adds",
        patch(
            added("parser/parse.go", ["func Parse(s string) int { return len(s) }"]),
            added("parser/testdata/golden.txt", ["42"]),
        ),
        patch(
            added(
                "parser/parse_test.go",
                [
                    'data, _ := os.ReadFile("testdata/golden.txt")',
                    "if Parse(string(data)) != 2 {",
                ],
            )
        ),
        "Add Parse(s string) int.",
        {("gold-only-file", "parser/testdata/golden.txt", "parser/parse_test.go", 1)},
    ),
]


@pytest.mark.parametrize(
    ("name", "gold", "tests", "instruction", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_coupling_evidence(
    name: str,
    gold: PatchInfo,
    tests: PatchInfo,
    instruction: str,
    expected: set[tuple[str, str, str, int]],
) -> None:
    del name
    base = {
        "raises",
        "import",
        "from",
        "def",
        "assert",
        "test_div",
        "with",
        "expect",
        "toBe",
        "export",
        "const",
        "function",
        "return",
        "data",
        "ReadFile",
        "string",
    }
    items = coupling(tests, gold, instruction, base)
    found = {(i.kind, i.name, i.test_file, i.test_line) for i in items}
    assert expected <= found, found
    gold_sites = {i.name: (i.gold_file, i.gold_line) for i in items}
    if "_normalise" in gold_sites:
        assert gold_sites["_normalise"] == ("pkg/calc.py", 1)


def test_public_names_from_the_instruction_are_no_evidence() -> None:
    gold = patch(added("pkg/calc.py", ["def divide(a, b):", "    return a / b"]))
    tests = patch(
        added(
            "tests/test_calc.py",
            [
                "from pkg.calc import divide",
                "def test_div():",
                "    assert divide(4, 2) == 2",
            ],
        )
    )
    instruction = "Add divide(a, b) to pkg.calc (module pkg/calc.py)."
    base = {"from", "import", "def", "assert", "test_div", "return"}
    assert coupling(tests, gold, instruction, base) == []
    assert "divide" not in candidates(tests, gold, instruction)


def test_names_already_in_the_base_tree_are_found_by_one_git_grep(tmp_path: Path) -> None:
    repo, commit = make_repo(
        tmp_path / "repo",
        {
            "a.py": "def _existing():\n    raise KeyError('missing key: %s')\n",
            "b/c.txt": "MAX_SIZE = 3\n",
        },
    )
    store = resolve_repository(str(repo), "", commit)
    found = present_in_tree(
        store, commit, ["_existing", "missing key: %s", "MAX_SIZE", "_brand_new", "-e", "--version"]
    )
    assert found == {"_existing", "missing key: %s", "MAX_SIZE"}
    assert present_in_tree(store, commit, []) == frozenset()


# The name `parse_fragment` and the advisory id's pieces exist only in the gold patch; a test
# that mentions them in a comment, a docstring or inside a sentence does not use them.
PROSE_ONLY = {
    "tests/test_prose.py": [
        '"""Regression for GHSA-q7r2-wxyz: parse_fragment accepted junk."""',
        "# parse_fragment used to accept junk (GHSA-q7r2-wxyz)",
        "def test_junk():",
        '    assert run("parse_fragment rejects junk now") == 0',
    ],
    "test/prose.test.js": [
        "/* GHSA-q7r2-wxyz: parse_fragment accepted junk",
        " * parse_fragment used to accept it */",
        "// parse_fragment again",
        "test('parse_fragment rejects junk', () => { expect(run()).toBe(0); });",
    ],
    "test/prose.test.ts": [
        "/** GHSA-q7r2-wxyz parse_fragment */",
        "const label: string = `parse_fragment is strict`;",
    ],
    "prose_test.go": [
        "// GHSA-q7r2-wxyz: parse_fragment accepted junk",
        "/* parse_fragment */",
        'func TestJunk(t *testing.T) { t.Log("parse_fragment rejects junk") }',
    ],
    "tests/prose.rs": [
        "/// GHSA-q7r2-wxyz: parse_fragment accepted junk",
        "// parse_fragment",
        '#[test] fn junk() { assert_eq!(run("parse_fragment now strict"), 0); }',
    ],
    "tests/test_prose.sh": [
        "# GHSA-q7r2-wxyz: parse_fragment accepted junk",
        'echo "parse_fragment rejects junk" >/dev/null',
    ],
}
GOLD_NAMES = patch(
    added(
        "src/fragment.py",
        [
            "GHSA = 'q7r2'",
            "wxyz = 1",
            "def parse_fragment(text):",
            "    return text",
        ],
    )
)


@pytest.mark.parametrize("path", sorted(PROSE_ONLY))
def test_words_of_comments_docstrings_and_strings_are_not_names(path: str) -> None:
    tests = patch(added(path, PROSE_ONLY[path]))
    items = coupling(tests, GOLD_NAMES, "Reject junk.", set())
    names = {(i.kind, i.name) for i in items if i.kind != "string-literal"}
    assert not {n for _, n in names} & {"parse_fragment", "GHSA", "wxyz", "q7r2"}, items
    assert not {"parse_fragment", "GHSA", "wxyz"} & set(
        candidates(tests, GOLD_NAMES, "Reject junk.")
    )


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("tests/test_use.py", "from fragment import parse_fragment; parse_fragment('x')"),
        ("test/use.test.js", "import { parse_fragment } from '../src/fragment';"),
        ("test/use.test.ts", "const f: typeof parse_fragment = parse_fragment;"),
        ("use_test.go", 'func TestUse(t *testing.T) { parse_fragment("x") }'),
        ("tests/use.rs", 'fn used() { parse_fragment("x"); }'),
        ("tests/test_use.sh", "parse_fragment x"),
    ],
)
def test_the_same_name_used_as_code_is_evidence(path: str, line: str) -> None:
    items = coupling(patch(added(path, [line])), GOLD_NAMES, "Reject junk.", set())
    assert ("gold-only-name", "parse_fragment", path, 1) in {
        (i.kind, i.name, i.test_file, i.test_line) for i in items
    }


def test_a_modified_test_file_is_read_in_its_hunk_context() -> None:
    """The hunk's context lines open the docstring the added line sits in."""
    tests = patch(
        "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n"
        "+++ b/tests/test_x.py\n@@ -1,3 +1,4 @@\n"
        ' def test_x():\n     """Checks\n+    parse_fragment, GHSA and wxyz.\n     """\n'
    )
    assert [i for i in coupling(tests, GOLD_NAMES, "", set()) if i.kind != "string-literal"] == []
