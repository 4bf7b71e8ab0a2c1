"""The expected values of shell test scripts (pure), read by tree-sitter's bash grammar: a
`[ ... ]`, `[[ ... ]]` or `test` comparison (`=`, `==`, `-eq`) of what the code printed (a
command substitution or an expansion) with a literal. The exit-code canary changes one."""

from __future__ import annotations

from random import Random

from tree_sitter import Node

from runner.runners.canaries.core import Scalar, Site
from runner.runners.canaries.literals import mutate_number, mutate_string, mutate_text
from runner.runners.syntax import node_text, parse

_EQUALS = frozenset({"=", "==", "-eq"})
_DYNAMIC = frozenset({"command_substitution", "expansion", "simple_expansion"})


def _word(text: str, rng: Random) -> str | None:
    changed = mutate_text(text, rng)
    return changed if changed and changed != text else None


def _dynamic(node: Node) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type in _DYNAMIC:
            return True
        stack.extend(current.children)
    return False


def _scalar(node: Node, source: bytes) -> Scalar | None:
    if _dynamic(node):
        return None
    text = node_text(node, source)
    if node.type == "number":
        return Scalar(node.start_byte, node.end_byte, "number", text, mutate_number)
    if node.type in ("string", "raw_string"):
        return Scalar(node.start_byte, node.end_byte, "string", text, mutate_string)
    if node.type == "word" and text.isascii() and text.replace("-", "").replace(".", "").isalnum():
        return Scalar(node.start_byte, node.end_byte, "string", text, _word)
    return None


def shell_sites(text: bytes, added: frozenset[int]) -> list[Site]:
    tree = parse("bash", text)
    if tree is None:
        return []
    sites: list[Site] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.named_children)
        line = node.start_point.row + 1
        if line not in added:
            continue
        sides: list[Node] = []
        if (
            node.type == "binary_expression"
            and node.parent is not None
            and node.parent.type == "test_command"
        ):
            operator = node.child_by_field_name("operator")
            if operator is not None and node_text(operator, text) in _EQUALS:
                sides = [c for c in node.named_children if c is not operator]
        elif node.type == "command":
            name = node.child_by_field_name("name")
            parts = [c for c in node.children if c is not name]
            if (
                name is not None
                and node_text(name, text) == "test"
                and len(parts) == 3
                and node_text(parts[1], text) in _EQUALS
            ):
                sides = [parts[0], parts[2]]
        if len(sides) != 2:
            continue
        dynamic = [s for s in sides if _dynamic(s)]
        scalars = [_scalar(s, text) for s in sides]
        literal = [s for s in scalars if s is not None]
        if len(dynamic) == 1 and len(literal) == 1:
            sites.append(Site(slots=((literal[0],),), line=line))
    return sorted(sites, key=lambda s: s.line)
