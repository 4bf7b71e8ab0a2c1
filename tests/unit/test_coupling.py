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
