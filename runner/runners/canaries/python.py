"""Canaries of Python tests (pure), read by Python's own parser: pytest's test functions and
methods (with their parametrized cases) and unittest's TestCase methods. An expected value is a
literal compared for equality at the test's top level: `assert got == 3`, `assert 'ab' ==
got`, `self.assertEqual(got, [1, 2])`, or the parametrized column such an assertion compares
with (`assert add(a, b) == expected`, every case's `expected` changed)."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from runner.runners.canaries.core import (
    FileTests,
    Scalar,
    Site,
    Unit,
    spacing,
    split_lines,
    words_of,
)
from runner.runners.canaries.literals import flip_bool
from runner.runners.canaries.pyliterals import python_number, string_mutation

EQUAL_METHODS = frozenset(
    {
        "assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual", "assertDictEqual",
        "assertSetEqual", "assertSequenceEqual", "assertMultiLineEqual", "failUnlessEqual",
    }
)  # fmt: skip
EQUAL_FUNCTIONS = frozenset({"assert_equal", "assert_equals", "assertEqual"})
# A test that reads its own name or writes what it sees under it behaves differently as a copy.
_SELF_AWARE_ARGS = frozenset({"request", "snapshot", "snapshot_json", "data_regression"})
_SELF_AWARE_ATTRS = frozenset({"_testMethodName", "subTest", "id"})
_SKIP_MARKS = frozenset({"skip", "skipif", "xfail", "skipIf", "skipUnless", "expectedFailure"})


def _is_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None and node.value is not Ellipsis
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return isinstance(node.operand, ast.Constant) and isinstance(
            node.operand.value, int | float
        )
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return bool(node.elts) and all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return (
            bool(node.values)
            and all(k is not None and _is_literal(k) for k in node.keys)
            and all(_is_literal(v) for v in node.values)
        )
    return False


class _Offsets:
    def __init__(self, lines: Sequence[bytes]) -> None:
        self.starts = [0]
        for line in lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + col


def _scalars(node: ast.expr, source: bytes, offsets: _Offsets) -> list[Scalar]:
    """The literals of an expected value: itself, or the leaves of a container."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [s for e in node.elts for s in _scalars(e, source, offsets)]
    if isinstance(node, ast.Dict):
        return [s for v in node.values for s in _scalars(v, source, offsets)]
    target = node.operand if isinstance(node, ast.UnaryOp) else node
    if not isinstance(target, ast.Constant) or target.end_lineno is None:
        return []
    assert target.end_col_offset is not None
    start = offsets.at(target.lineno, target.col_offset)
    end = offsets.at(target.end_lineno, target.end_col_offset)
    text = source[start:end].decode("utf-8", "surrogateescape")
    value = target.value
    if isinstance(value, bool):
        return [Scalar(start, end, "bool", text, flip_bool)]
    if isinstance(value, int | float):
        return [Scalar(start, end, "number", text, python_number)]
    if isinstance(value, str | bytes):
        return [Scalar(start, end, "string", text, string_mutation)]
    return []


def _equality(statement: ast.stmt) -> tuple[ast.expr, ast.expr] | None:
    """The two sides of an equality assertion that is this whole statement."""
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            return test.left, test.comparators[0]
        return None
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        func = call.func
        name = (
            func.attr
            if isinstance(func, ast.Attribute)
            else func.id
            if isinstance(func, ast.Name)
            else ""
        )
        method = isinstance(func, ast.Attribute) and name in EQUAL_METHODS
        function = name in EQUAL_FUNCTIONS
        if (
            (method or function)
            and len(call.args) >= 2
            and not any(k.arg in ("first", "second") for k in call.keywords)
        ):
            return call.args[0], call.args[1]
    return None


def _parametrized(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
) -> dict[str, list[ast.expr]]:
    """`@pytest.mark.parametrize("a, b, expected", [...])`: each argument name's values, one
    per case, when every case is a literal row."""
    columns: dict[str, list[ast.expr]] = {}
    for decorator in function.decorator_list:
        if not (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "parametrize"
            and len(decorator.args) >= 2
        ):
            continue
        names_node, rows_node = decorator.args[0], decorator.args[1]
        if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str):
            names = [n.strip() for n in names_node.value.split(",") if n.strip()]
        elif isinstance(names_node, ast.List | ast.Tuple) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in names_node.elts
        ):
            names = [e.value for e in names_node.elts]  # type: ignore[attr-defined]
        else:
            continue
        if not isinstance(rows_node, ast.List | ast.Tuple) or not rows_node.elts:
            continue
        values: dict[str, list[ast.expr]] = {n: [] for n in names}
        ok = True
        for row in rows_node.elts:
            if (
                isinstance(row, ast.Call)
                and isinstance(row.func, ast.Attribute)
                and row.func.attr == "param"
            ):
                cells = list(row.args)
            elif len(names) == 1:
                cells = [row]
            elif isinstance(row, ast.Tuple | ast.List):
                cells = list(row.elts)
            else:
                ok = False
                break
            if len(cells) != len(names):
                ok = False
                break
            for name, cell in zip(names, cells, strict=True):
                values[name].append(cell)
        if ok:
            columns.update(values)
    return columns


def _marked_to_skip(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = (
            target.attr
            if isinstance(target, ast.Attribute)
            else target.id
            if isinstance(target, ast.Name)
            else ""
        )
        if name in _SKIP_MARKS:
            return True
    return False


def _self_aware(function: ast.AST) -> bool:
    """It reads its own name (`self.id()`, `request.node`) or records what it sees under it (a
    snapshot fixture)."""
    for node in ast.walk(function):
        if isinstance(node, ast.arg) and node.arg in _SELF_AWARE_ARGS:
            return True
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _SELF_AWARE_ATTRS
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            return True
    return False


def _sites(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    source: bytes,
    offsets: _Offsets,
    added: frozenset[int],
) -> list[Site]:
    columns = _parametrized(function)
    sites: list[Site] = []
    for statement in function.body:
        sides = _equality(statement)
        if sides is None:
            continue
        left, right = sides
        literal = [s for s in (left, right) if _is_literal(s)]
        if len(literal) == 1 and statement.lineno in added:
            scalars = _scalars(literal[0], source, offsets)
            if scalars:
                sites.append(Site(slots=(tuple(scalars),), line=statement.lineno))
            continue
        for side in (left, right):
            other = right if side is left else left
            if not isinstance(side, ast.Name) or side.id not in columns or _is_literal(other):
                continue
            if isinstance(other, ast.Name) and other.id in columns:
                continue  # both sides from the table: nothing the code computes
            cells = columns[side.id]
            if not all(_is_literal(c) for c in cells):
                continue
            if not any(c.lineno in added for c in cells):
                continue
            slots = tuple(tuple(_scalars(c, source, offsets)) for c in cells)
            if all(slots):
                sites.append(Site(slots=slots, line=cells[0].lineno))
    return sites


def _first_line(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([function.lineno, *(d.lineno for d in function.decorator_list)])


def _name_span(
    function: ast.FunctionDef | ast.AsyncFunctionDef, source: bytes, offsets: _Offsets
) -> tuple[int, int] | None:
    line_start = offsets.at(function.lineno, 0)
    line = source[line_start : offsets.starts[function.lineno]]
    keyword = b"async def " if isinstance(function, ast.AsyncFunctionDef) else b"def "
    at = line.find(keyword + function.name.encode())
    if at < 0:
        return None
    start = line_start + at + len(keyword)
    return start, start + len(function.name.encode())


def _is_testcase(cls: ast.ClassDef) -> bool:
    for base in cls.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if isinstance(name, str) and (name.endswith("TestCase") or name == "TestCase"):
            return True
    return False


def python_tests(path: str, text: bytes, added: frozenset[int], *, runner: str) -> FileTests:
    """The units of a held-out Python test file for `runner` (pytest: test functions and the
    methods of Test classes and TestCases; unittest: TestCase methods)."""
    found = FileTests()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        found.why_none = "it is not Python that Python's parser reads"
        return found
    lines = split_lines(text)
    offsets = _Offsets(lines)
    identifiers: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            identifiers.append(node.id)
        elif isinstance(node, ast.Attribute):
            identifiers.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            identifiers.append(node.name)
            found.names.add(node.name)
    found.words = words_of(identifiers)

    def consider(
        function: ast.FunctionDef | ast.AsyncFunctionDef, containers: tuple[str, ...], gap: int
    ) -> None:
        if not function.name.startswith("test") or _marked_to_skip(function):
            return
        if function.end_lineno is None or _self_aware(function):
            return
        span = _name_span(function, text, offsets)
        if span is None:
            return
        first = _first_line(function)
        if not any(first <= line <= function.end_lineno for line in added):
            return
        sites = _sites(function, text, offsets, added)
        if not sites:
            return
        snake = "_" in function.name or function.name == "test"
        found.units.append(
            Unit(
                file=path,
                name=function.name,
                name_span=span,
                containers=containers,
                first_line=first - 1,
                end_line=function.end_lineno,
                gap=spacing(lines, first - 1, function.end_lineno, gap),
                sites=tuple(sites),
                style="snake" if snake else "camel",
                prefix="test_" if function.name.startswith("test_") else "test",
            )
        )

    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and runner == "pytest":
            consider(node, (), 2)
        elif isinstance(node, ast.ClassDef):
            testcase = _is_testcase(node)
            if runner == "unittest" and not testcase:
                continue
            if runner == "pytest" and not (testcase or node.name.startswith("Test")):
                continue
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    consider(member, (node.name,), 1)
    if not found.units:
        found.why_none = (
            "no test that test.patch wrote compares a value with a literal at its top level"
        )
    return found


def python_script_sites(text: bytes, added: frozenset[int]) -> list[Site]:
    """Every equality assertion with a literal side on a line test.patch wrote, at any depth (a
    test script run by a custom command)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    offsets = _Offsets(split_lines(text))
    sites = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno not in added:
            continue
        sides = _equality(node)
        if sides is None:
            continue
        literal = [s for s in sides if _is_literal(s)]
        if len(literal) == 1 and (scalars := _scalars(literal[0], text, offsets)):
            sites.append(Site(slots=(tuple(scalars),), line=node.lineno))
    return sorted(sites, key=lambda s: s.line)
