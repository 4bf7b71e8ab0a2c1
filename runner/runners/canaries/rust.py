"""Canaries of Rust tests (pure), read by tree-sitter's Rust grammar: `#[test] fn name()`. An
expected value is a literal one side of a top-level `assert_eq!(got, 5)` compares with (the
macro's arguments are tokens: one argument of a single literal token, or `-` and a number)."""

from __future__ import annotations

from random import Random

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
from runner.runners.syntax import node_text, parse, texts_of

_MACROS = frozenset({"assert_eq", "pretty_assert_eq"})


def _string(text: str, rng: Random) -> str | None:
    return None if text.startswith(("r", "b'")) else mutate_string(text, rng)


def _argument_scalar(tokens: list[Node], source: bytes) -> Scalar | None:
    """The literal an argument of single tokens is, if it is one."""
    if len(tokens) == 2 and tokens[0].type == "-":
        tokens = tokens[1:]
    if len(tokens) != 1:
        return None
    token = tokens[0]
    text = node_text(token, source)
    if token.type in ("integer_literal", "float_literal"):
        return Scalar(token.start_byte, token.end_byte, "number", text, mutate_number)
    if token.type == "boolean_literal":
        return Scalar(token.start_byte, token.end_byte, "bool", text, flip_bool)
    if token.type == "string_literal":
        return Scalar(token.start_byte, token.end_byte, "string", text, _string)
    return None


def _sites(body: Node, source: bytes, added: frozenset[int]) -> list[Site]:
    sites = []
    for statement in body.named_children:
        macro = (
            statement.named_children[0]
            if statement.type == "expression_statement" and statement.named_child_count
            else None
        )
        if macro is None or macro.type != "macro_invocation":
            continue
        name = macro.child_by_field_name("macro")
        tree = next((c for c in macro.named_children if c.type == "token_tree"), None)
        if name is None or tree is None or node_text(name, source) not in _MACROS:
            continue
        if statement.start_point.row + 1 not in added:
            continue
        arguments: list[list[Node]] = [[]]
        for token in tree.children[1:-1]:
            if token.type == ",":
                arguments.append([])
            else:
                arguments[-1].append(token)
        if len(arguments) < 2:
            continue
        scalars = [_argument_scalar(a, source) for a in arguments[:2]]
        literal = [s for s in scalars if s is not None]
        if len(literal) == 1:
            sites.append(Site(slots=((literal[0],),), line=statement.start_point.row + 1))
    return sites


def rust_tests(path: str, text: bytes, added: frozenset[int]) -> FileTests:
    found = FileTests()
    tree = parse("rust", text)
    if tree is None or tree.root_node.has_error:
        found.why_none = "the grammar does not read it without errors"
        return found
    lines = split_lines(text)

    def walk(node: Node, containers: tuple[str, ...]) -> None:
        previous: Node | None = None
        for child in node.named_children:
            if child.type == "mod_item":
                name = child.child_by_field_name("name")
                body = child.child_by_field_name("body")
                if name is not None and body is not None:
                    walk(body, (*containers, node_text(name, text)))
            elif child.type == "function_item":
                _function(child, previous, containers)
            previous = child if child.type == "attribute_item" else None

    def _function(function: Node, attribute: Node | None, containers: tuple[str, ...]) -> None:
        name_node = function.child_by_field_name("name")
        body = function.child_by_field_name("body")
        if name_node is None or body is None:
            return
        name = node_text(name_node, text)
        found.names.add(name)
        if attribute is None or node_text(attribute, text).replace(" ", "") != "#[test]":
            return
        first, last = attribute.start_point.row, function.end_point.row
        if not any(first + 1 <= line <= last + 1 for line in added):
            return
        sites = _sites(body, text, added)
        if not sites:
            return
        found.units.append(
            Unit(
                file=path,
                name=name,
                name_span=(name_node.start_byte, name_node.end_byte),
                containers=containers,
                first_line=first,
                end_line=last + 1,
                gap=spacing(lines, first, last + 1, 1),
                sites=tuple(sites),
                style="snake",
                prefix="test_" if name.startswith("test_") else "",
            )
        )

    walk(tree.root_node, ())
    found.words = words_of(texts_of(tree.root_node, text, {"identifier"}))
    if not found.units:
        found.why_none = (
            "no test that test.patch wrote compares a value with a literal at its top level"
        )
    return found
