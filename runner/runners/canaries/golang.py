"""Canaries of Go tests (pure), read by tree-sitter's Go grammar: `func TestXxx(t *testing.T)`.
An expected value is a literal compared at the test's top level, `if got != 6 { t.Fatal(...) }`
(an initialiser too: `if got := Mul(2, 3); got != 6`), testify's `assert.Equal(t, 6, got)`,
or a table-driven test's expected field: `for _, tc := range cases { ... got != tc.want ...}`
over a literal table, where every case's `want` is changed (each subtest then fails)."""

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
from runner.runners.syntax import node_text, parse, texts_of

_LITERALS = frozenset(
    {"int_literal", "float_literal", "interpreted_string_literal", "raw_string_literal", "true",
     "false"}
)  # fmt: skip
_NAMES = frozenset({"identifier", "field_identifier", "type_identifier"})
_REPORTS = frozenset({"Error", "Errorf", "Fatal", "Fatalf", "Fail", "FailNow"})
_TESTIFY = frozenset({"Equal", "EqualValues", "Exactly"})


def _is_literal(node: Node) -> bool:
    if node.type in _LITERALS:
        return True
    if node.type == "unary_expression" and node.child_count == 2:
        return node.children[0].type == "-" and node.children[1].type in (
            "int_literal",
            "float_literal",
        )
    if node.type == "composite_literal":
        body = node.child_by_field_name("body")
        elements = _elements(body) if body is not None else []
        return bool(elements) and all(_is_literal(e) for e in elements)
    if node.type == "parenthesized_expression" and node.named_child_count == 1:
        return _is_literal(node.named_children[0])
    return False


def _elements(literal_value: Node) -> list[Node]:
    """The values of a literal_value's elements (a keyed element's value)."""
    out = []
    for element in literal_value.named_children:
        if element.type == "keyed_element":
            parts = [c for c in element.named_children if c.type == "literal_element"]
            target = parts[-1] if parts else None
        elif element.type == "literal_element":
            target = element
        else:
            continue
        if target is None or target.named_child_count != 1:
            return []
        out.append(target.named_children[0])
    return out


def _scalars(node: Node, source: bytes) -> list[Scalar]:
    if node.type == "composite_literal":
        body = node.child_by_field_name("body")
        return [
            s for e in (_elements(body) if body is not None else []) for s in _scalars(e, source)
        ]
    if node.type == "parenthesized_expression":
        return [s for c in node.named_children for s in _scalars(c, source)]
    if node.type == "unary_expression":
        return _scalars(node.children[1], source)
    text = node_text(node, source)
    if node.type in ("int_literal", "float_literal"):
        return [Scalar(node.start_byte, node.end_byte, "number", text, mutate_number)]
    if node.type in ("true", "false"):
        return [Scalar(node.start_byte, node.end_byte, "bool", text, flip_bool)]
    if node.type in ("interpreted_string_literal", "raw_string_literal"):
        return [Scalar(node.start_byte, node.end_byte, "string", text, mutate_string)]
    return []


def _reports(block: Node | None, source: bytes) -> bool:
    """The block calls t.Error/t.Fatal (or their formats)."""
    if block is None:
        return False
    stack = [block]
    while stack:
        node = stack.pop()
        if node.type == "call_expression":
            function = node.child_by_field_name("function")
            if function is not None and function.type == "selector_expression":
                field = function.child_by_field_name("field")
                if field is not None and node_text(field, source) in _REPORTS:
                    return True
        stack.extend(node.named_children)
    return False


def _statements(block: Node) -> list[Node]:
    for child in block.named_children:
        if child.type == "statement_list":
            return list(child.named_children)
    return list(block.named_children)


def _not_equal(condition: Node | None) -> tuple[Node, Node] | None:
    if condition is None or condition.type != "binary_expression":
        return None
    operator = condition.child_by_field_name("operator")
    if operator is None or operator.type != "!=":
        return None
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    return (left, right) if left is not None and right is not None else None


def _direct_sites(body: Node, source: bytes, added: frozenset[int]) -> list[Site]:
    sites: list[Site] = []
    for statement in _statements(body):
        line = statement.start_point.row + 1
        sides: tuple[Node, Node] | None = None
        if statement.type == "if_statement" and _reports(
            statement.child_by_field_name("consequence"), source
        ):
            sides = _not_equal(statement.child_by_field_name("condition"))
        elif statement.type == "expression_statement" and statement.named_child_count == 1:
            call = statement.named_children[0]
            function = (
                call.child_by_field_name("function") if call.type == "call_expression" else None
            )
            field = (
                function.child_by_field_name("field")
                if function is not None and function.type == "selector_expression"
                else None
            )
            arguments = (
                call.child_by_field_name("arguments") if call.type == "call_expression" else None
            )
            if field is not None and node_text(field, source) in _TESTIFY and arguments is not None:
                args = list(arguments.named_children)
                if len(args) >= 3:
                    sides = (args[1], args[2])
        if sides is None or line not in added:
            continue
        literal = [s for s in sides if _is_literal(s)]
        if len(literal) == 1:
            scalars = _scalars(literal[0], source)
            if scalars:
                sites.append(Site(slots=(tuple(scalars),), line=line))
    return sites


def _table(statement: Node, source: bytes) -> tuple[str, Node, list[str]] | None:
    """`name := []struct{...}{ rows }`: (name, its literal_value of rows, the struct's field
    names in order)."""
    if statement.type != "short_var_declaration":
        return None
    left, right = statement.child_by_field_name("left"), statement.child_by_field_name("right")
    if left is None or right is None or left.named_child_count != 1 or right.named_child_count != 1:
        return None
    literal = right.named_children[0]
    if literal.type != "composite_literal":
        return None
    kind, body = literal.child_by_field_name("type"), literal.child_by_field_name("body")
    if kind is None or body is None or kind.type != "slice_type":
        return None
    element = kind.child_by_field_name("element")
    if element is None or element.type != "struct_type":
        return None
    fields: list[str] = []
    for declarations in element.named_children:
        for declaration in declarations.named_children:
            if declaration.type == "field_declaration":
                fields += [
                    node_text(n, source)
                    for n in declaration.named_children
                    if n.type == "field_identifier"
                ]
    return node_text(left.named_children[0], source), body, fields


def _table_sites(body: Node, source: bytes, added: frozenset[int]) -> list[Site]:
    statements = _statements(body)
    tables = {t[0]: t for t in (_table(s, source) for s in statements) if t is not None}
    sites: list[Site] = []
    for statement in statements:
        if statement.type != "for_statement":
            continue
        clause = next((c for c in statement.named_children if c.type == "range_clause"), None)
        if clause is None:
            continue
        over = clause.child_by_field_name("right")
        names = clause.child_by_field_name("left")
        if over is None or names is None or node_text(over, source) not in tables:
            continue
        variables = [node_text(n, source) for n in names.named_children]
        if len(variables) != 2:
            continue
        case = variables[1]
        _name, rows, fields = tables[node_text(over, source)]
        for field in _compared_fields(statement, case, source):
            slots = []
            for row in rows.named_children:
                if row.type != "literal_element" or row.named_child_count != 1:
                    break
                value = _cell(row.named_children[0], field, fields, source)
                if value is None or not _is_literal(value):
                    break
                scalars = _scalars(value, source)
                if not scalars:
                    break
                slots.append((value, tuple(scalars)))
            else:
                if slots and any(v.start_point.row + 1 in added for v, _ in slots):
                    sites.append(
                        Site(
                            slots=tuple(s for _, s in slots),
                            line=slots[0][0].start_point.row + 1,
                        )
                    )
    return sites


def _compared_fields(loop: Node, case: str, source: bytes) -> list[str]:
    """Fields `case.F` the loop's body compares with `!=` in an if that reports a failure."""
    found: list[str] = []
    stack = [loop]
    while stack:
        node = stack.pop()
        if node.type == "if_statement" and _reports(
            node.child_by_field_name("consequence"), source
        ):
            sides = _not_equal(node.child_by_field_name("condition"))
            if sides is not None:
                mine = [s for s in sides if _field_of(s, case, source)]
                if len(mine) == 1:
                    other = sides[1] if mine[0] is sides[0] else sides[0]
                    if not _field_of(other, case, source) and not _is_literal(other):
                        found.append(_field_of(mine[0], case, source))
        stack.extend(node.named_children)
    return list(dict.fromkeys(found))


def _field_of(node: Node, case: str, source: bytes) -> str:
    if node.type != "selector_expression":
        return ""
    operand, field = node.child_by_field_name("operand"), node.child_by_field_name("field")
    if operand is None or field is None or node_text(operand, source) != case:
        return ""
    return node_text(field, source)


def _cell(row: Node, field: str, fields: list[str], source: bytes) -> Node | None:
    if row.type != "literal_value":
        return None
    elements = list(row.named_children)
    if elements and all(e.type == "keyed_element" for e in elements):
        for element in elements:
            parts = [c for c in element.named_children if c.type == "literal_element"]
            if len(parts) == 2 and node_text(parts[0], source) == field:
                return parts[1].named_children[0] if parts[1].named_child_count == 1 else None
        return None
    if field in fields and len(elements) == len(fields):
        element = elements[fields.index(field)]
        return element.named_children[0] if element.named_child_count == 1 else None
    return None


def go_tests(path: str, text: bytes, added: frozenset[int]) -> FileTests:
    found = FileTests()
    tree = parse("go", text)
    if tree is None or tree.root_node.has_error:
        found.why_none = "the grammar does not read it without errors"
        return found
    lines = split_lines(text)
    found.words = words_of(texts_of(tree.root_node, text, _NAMES))
    for declaration in tree.root_node.named_children:
        if declaration.type != "function_declaration":
            continue
        name_node = declaration.child_by_field_name("name")
        body = declaration.child_by_field_name("body")
        if name_node is None or body is None:
            continue
        name = node_text(name_node, text)
        found.names.add(name)
        if not _is_test_name(name) or "testing.T" not in node_text(
            declaration.child_by_field_name("parameters") or body, text
        ):
            continue
        if ".Name()" in node_text(body, text):
            continue  # it reads its own name (golden files, temporary names)
        first, last = declaration.start_point.row, declaration.end_point.row
        if not any(first + 1 <= line <= last + 1 for line in added):
            continue
        sites = _direct_sites(body, text, added) + _table_sites(body, text, added)
        if not sites:
            continue
        found.units.append(
            Unit(
                file=path,
                name=name,
                name_span=(name_node.start_byte, name_node.end_byte),
                containers=(),
                first_line=first,
                end_line=last + 1,
                gap=spacing(lines, first, last + 1, 1),
                sites=tuple(sites),
                style="camel",
                prefix="Test",
            )
        )
    if not found.units:
        found.why_none = (
            "no test that test.patch wrote compares a value with a literal at its top level"
        )
    return found


def _is_test_name(name: str) -> bool:
    return name.startswith("Test") and (len(name) == 4 or not name[4].islower())
