"""Canaries of JavaScript and TypeScript tests (pure), read by tree-sitter's grammars: `test()`
and `it()` calls (jest, vitest, mocha, node --test, bun), inside `describe()` blocks or not. An
expected value is a literal the test's top-level statements compare for equality:
`expect(got).toBe(5)`, `.toEqual([1, 2])`, `.toStrictEqual`, chai's `expect(got).to.equal('a')`
and `.to.deep.equal`/`.eql`, node's `assert.equal(got, 3)`, `assert.strictEqual`,
`assert.deepStrictEqual` (a literal on either side)."""

from __future__ import annotations

from tree_sitter import Node

from runner.runners.canaries.core import (
    FileTests,
    Scalar,
    Site,
    Unit,
    spacing,
    split_lines,
    words_of,
)
from runner.runners.canaries.literals import flip_bool, mutate_number, mutate_string
from runner.runners.syntax import grammar_of, node_text, parse, texts_of

TEST_CALLS = frozenset({"test", "it"})
BLOCK_CALLS = frozenset({"describe", "suite", "context"})
MATCHERS = frozenset({"toBe", "toEqual", "toStrictEqual", "equal", "equals", "eql", "strictEqual"})
ASSERTS = frozenset({"equal", "strictEqual", "deepEqual", "deepStrictEqual", "is", "same"})
# A test that records what it sees under its own name, or reads its name, behaves differently as
# a copy (a snapshot is written under the copy's name).
_SELF_AWARE = ("toMatchSnapshot", "toMatchInlineSnapshot", "toMatchFileSnapshot", "expect.getState")
_NAMES = frozenset({"identifier", "property_identifier", "shorthand_property_identifier"})
_FUNCTIONS = frozenset({"arrow_function", "function_expression", "function"})


def _is_literal(node: Node) -> bool:
    kind = node.type
    if kind in ("number", "true", "false"):
        return True
    if kind == "string":
        return True
    if kind == "template_string":
        return not any(c.type == "template_substitution" for c in node.children)
    if kind == "unary_expression":
        return (
            node.child_count == 2
            and node.children[0].type in ("-", "+")
            and node.children[1].type == "number"
        )
    if kind == "array":
        items = node.named_children
        return bool(items) and all(_is_literal(i) for i in items)
    if kind == "object":
        pairs = node.named_children
        return bool(pairs) and all(
            p.type == "pair"
            and p.child_by_field_name("value") is not None
            and _is_literal(p.child_by_field_name("value"))  # type: ignore[arg-type]
            for p in pairs
        )
    if kind == "parenthesized_expression" and node.named_child_count == 1:
        return _is_literal(node.named_children[0])
    return False


def _scalars(node: Node, source: bytes) -> list[Scalar]:
    kind = node.type
    if kind in ("array",):
        return [s for item in node.named_children for s in _scalars(item, source)]
    if kind == "object":
        out: list[Scalar] = []
        for pair in node.named_children:
            value = pair.child_by_field_name("value")
            if value is not None:
                out += _scalars(value, source)
        return out
    if kind == "parenthesized_expression":
        return [s for c in node.named_children for s in _scalars(c, source)]
    if kind == "unary_expression":
        return _scalars(node.children[1], source)
    text = node_text(node, source)
    if kind == "number":
        return [Scalar(node.start_byte, node.end_byte, "number", text, mutate_number)]
    if kind in ("true", "false"):
        return [Scalar(node.start_byte, node.end_byte, "bool", text, flip_bool)]
    if kind in ("string", "template_string"):
        return [Scalar(node.start_byte, node.end_byte, "string", text, mutate_string)]
    return []


def _call_name(call: Node, source: bytes) -> str:
    function = call.child_by_field_name("function")
    return node_text(function, source) if function is not None else ""


def _arguments(call: Node) -> list[Node]:
    arguments = call.child_by_field_name("arguments")
    return list(arguments.named_children) if arguments is not None else []


def _chain(call: Node, source: bytes) -> tuple[str, list[str], Node | None] | None:
    """`expect(X).a.b.m(L)`: (m, [a, b], the expect call), when the callee is such a chain."""
    function = call.child_by_field_name("function")
    if function is None or function.type != "member_expression":
        return None
    prop = function.child_by_field_name("property")
    method = node_text(prop, source) if prop is not None else ""
    middle: list[str] = []
    at = function.child_by_field_name("object")
    while at is not None and at.type == "member_expression":
        inner = at.child_by_field_name("property")
        middle.insert(0, node_text(inner, source) if inner is not None else "")
        at = at.child_by_field_name("object")
    if at is not None and at.type == "call_expression" and _call_name(at, source) == "expect":
        return method, middle, at
    obj = node_text(at, source) if at is not None else ""
    if at is not None and obj in ("assert", "t", "t.assert", "assert.strict"):
        return method, ["<assert>"], None
    return None


def _equality(call: Node, source: bytes) -> tuple[Node, Node] | None:
    chain = _chain(call, source)
    if chain is None:
        return None
    method, middle, expect = chain
    args = _arguments(call)
    if expect is not None:
        if method not in MATCHERS or "not" in middle or len(args) != 1:
            return None
        if any(m not in ("to", "deep", "be", "strict") for m in middle):
            return None
        got = _arguments(expect)
        return (got[0], args[0]) if len(got) == 1 else None
    if method in ASSERTS and len(args) >= 2:
        return args[0], args[1]
    return None


def _statement_calls(body: Node) -> list[Node]:
    """The calls that are whole top-level statements of a test's function (an arrow function's
    expression body is one)."""
    if body.type == "call_expression":
        return [body]
    calls = []
    for statement in body.named_children:
        if statement.type != "expression_statement":
            continue
        expression = statement.named_children[0] if statement.named_child_count else None
        if expression is not None and expression.type == "await_expression":
            expression = expression.named_children[0] if expression.named_child_count else None
        if expression is not None and expression.type == "call_expression":
            calls.append(expression)
    return calls


def javascript_tests(path: str, text: bytes, added: frozenset[int], *, language: str) -> FileTests:
    found = FileTests()
    tree = parse(language, text)
    if tree is None or tree.root_node.has_error:
        found.why_none = "the grammar does not read it without errors"
        return found
    lines = split_lines(text)
    identifiers = texts_of(tree.root_node, text, _NAMES)

    def walk(node: Node, containers: tuple[str, ...]) -> None:
        for child in node.named_children:
            call = (
                child.named_children[0]
                if child.type == "expression_statement" and child.named_child_count
                else None
            )
            if call is None or call.type != "call_expression":
                continue
            name = _call_name(call, text)
            args = _arguments(call)
            if len(args) < 2 or args[0].type not in ("string", "template_string"):
                continue
            title = _title(args[0], text)
            if title is None:
                continue
            body = args[1].child_by_field_name("body") if args[1].type in _FUNCTIONS else None
            if name in BLOCK_CALLS and body is not None:
                walk(body, (*containers, title[0]))
                continue
            if name not in TEST_CALLS:
                continue
            found.names.add(title[0])
            identifiers.append(title[0])
            if body is None:
                continue
            unit = _unit(path, child, call, body, title, containers, text, lines, added)
            if unit is not None:
                found.units.append(unit)

    walk(tree.root_node, ())
    found.words = words_of(identifiers)
    if not found.units:
        found.why_none = (
            "no test that test.patch wrote compares a value with a literal at its top level"
        )
    return found


def _title(node: Node, source: bytes) -> tuple[str, tuple[int, int]] | None:
    """A test's name and the bytes of it between the quotes (a string without escapes or
    substitutions)."""
    if node.type == "template_string" and any(
        c.type == "template_substitution" for c in node.children
    ):
        return None
    inner = node_text(node, source)
    if len(inner) < 2 or "\\" in inner:
        return None
    return inner[1:-1], (node.start_byte + 1, node.end_byte - 1)


def _unit(
    path: str,
    statement: Node,
    call: Node,
    body: Node,
    title: tuple[str, tuple[int, int]],
    containers: tuple[str, ...],
    source: bytes,
    lines: list[bytes],
    added: frozenset[int],
) -> Unit | None:
    first, last = statement.start_point.row, statement.end_point.row
    # Whole lines only: the statement starts its first line and ends its last one.
    if lines[first][: statement.start_point.column].strip():
        return None
    if lines[last][statement.end_point.column :].strip() not in (b"", b";"):
        return None
    block = node_text(statement, source)
    if any(marker in block for marker in _SELF_AWARE):
        return None
    if not any(first + 1 <= line <= last + 1 for line in added):
        return None
    sites = []
    for inner in _statement_calls(body):
        sides = _equality(inner, source)
        if sides is None or inner.start_point.row + 1 not in added:
            continue
        literal = [s for s in sides if _is_literal(s)]
        if len(literal) != 1:
            continue
        scalars = _scalars(literal[0], source)
        if scalars:
            sites.append(Site(slots=(tuple(scalars),), line=inner.start_point.row + 1))
    if not sites:
        return None
    return Unit(
        file=path,
        name=title[0],
        name_span=title[1],
        containers=containers,
        first_line=first,
        end_line=last + 1,
        gap=spacing(lines, first, last + 1, 1),
        sites=tuple(sites),
        style="prose",
    )


def script_tests(path: str, text: bytes, added: frozenset[int]) -> FileTests:
    """A held-out JavaScript or TypeScript file's tests, by its extension's grammar."""
    language = grammar_of(path)
    if language not in ("javascript", "typescript", "tsx"):
        return FileTests(why_none="not JavaScript or TypeScript")
    return javascript_tests(path, text, added, language=language)


def is_script(path: str) -> bool:
    return grammar_of(path) in ("javascript", "typescript", "tsx")


class ScriptCanaries:
    """The canaries of a runner whose tests are JavaScript or TypeScript files (its room mixes
    this in before Room, and says its name-selecting options in `name_options`)."""

    canaries_supported = True

    def canary_file(self, path: str) -> bool:
        return is_script(path)

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        return script_tests(path, text, added)
