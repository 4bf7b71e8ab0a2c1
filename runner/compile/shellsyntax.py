"""Where `{tests}` sits in a test command, as the shell parses it (pure).

The seed's rule is that `{tests}` expands as an unquoted shell argument list: the compiler puts
the selectors there, each single-quoted, so the command must take them as the arguments of one
command it runs. Anything else (inside quotes of any kind, a here-document, a comment, a
command or process substitution, an assignment, a redirection target, a loop's word list, a
test expression, glued to other characters, in the place of a program or of a script the shell
evaluates) changes what the selectors mean. The command is parsed by tree-sitter's bash grammar
(the grammar editors and GitHub use), not by a regular expression.
"""

from __future__ import annotations

import posixpath

from tree_sitter import Node

from runner.model.task import TESTS_PLACEHOLDER
from runner.runners.syntax import node_text, parse

# Statements that run the command they hold, once, as it is written.
_CARRIERS = frozenset(
    {
        "program",
        "list",
        "pipeline",
        "redirected_statement",
        "subshell",
        "compound_statement",
        "if_statement",
        "elif_clause",
        "else_clause",
        "negated_command",
    }
)
# Commands whose arguments are shell code or a script to read.
_EVALUATORS = frozenset({"eval", "source", "."})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "posh", "yash"})
# Commands that run their first operand as a program (timeout: its second).
_WRAPPERS = {
    "exec": 0,
    "command": 0,
    "builtin": 0,
    "env": 0,
    "nohup": 0,
    "nice": 0,
    "time": 0,
    "xargs": 0,
    "sudo": 0,
    "setsid": 0,
    "stdbuf": 0,
    "chronic": 0,
    "timeout": 1,
}


def _sentinel(command: str) -> str:
    """A plain word the command does not hold, to stand for the placeholder while parsing (the
    braces of `{tests}` mean something else to a shell before substitution)."""
    n = 0
    while True:
        word = f"SELFBENCHTESTS{n}"
        if word not in command:
            return word
        n += 1


def _covering(node: Node, start: int, end: int) -> Node:
    """The smallest node that holds bytes [start, end)."""
    while True:
        inner = next(
            (c for c in node.children if c.start_byte <= start and end <= c.end_byte), None
        )
        if inner is None:
            return node
        node = inner


def placement_problem(command: str) -> str | None:
    """Why the one `{tests}` of `command` (the caller checked there is one) does not expand as
    an argument list, or None when it does."""
    sentinel = _sentinel(command)
    source = command.replace(TESTS_PLACEHOLDER, sentinel).encode("utf-8", "surrogateescape")
    tree = parse("bash", source)
    if tree is None:
        return "the command could not be parsed in time"
    root = tree.root_node
    if root.has_error:
        return "the command is not valid shell syntax"
    start = source.index(sentinel.encode())
    node = _covering(root, start, start + len(sentinel))
    if node.type != "word" or node_text(node, source) != sentinel:
        return f"it is part of a {node.type.replace('_', ' ')}"
    command_node = node.parent
    if command_node is None or command_node.type != "command":
        where = command_node.type if command_node is not None else "nothing"
        return f"it is a word of a {where.replace('_', ' ')}"
    ancestor = command_node.parent
    while ancestor is not None:
        if ancestor.type not in _CARRIERS:
            return f"it is inside a {ancestor.type.replace('_', ' ')}"
        ancestor = ancestor.parent
    return _runs_as_code(command_node, node, source)


def _runs_as_code(command_node: Node, placeholder: Node, source: bytes) -> str | None:
    name_node = command_node.child_by_field_name("name")
    if name_node is None:
        return "it has no command to pass the selectors to"
    name = posixpath.basename(node_text(name_node, source, "surrogateescape"))
    arguments = [c for c in command_node.children_by_field_name("argument") if c.type != "comment"]
    index = next((i for i, c in enumerate(arguments) if c.id == placeholder.id), None)
    if index is None:
        return "it is not an argument of the command"
    before = [node_text(a, source, "surrogateescape") for a in arguments[:index]]
    if name in _EVALUATORS:
        return f"`{name}` runs its arguments as shell code"
    if name in _SHELLS:
        option_c = next(
            (i for i, word in enumerate(before) if _is_option(word) and "c" in word[1:]), None
        )
        if option_c is not None and not any(not _is_option(w) for w in before[option_c + 1 :]):
            return f"`{name} -c` runs its first operand as a script"
        if option_c is None and not any(not _is_option(w) for w in before):
            return f"`{name}` reads its first operand as a script"
    operand = _WRAPPERS.get(name)
    if operand is not None:
        operands = [w for w in before if not _is_option(w) and not (name == "env" and "=" in w)]
        if len(operands) == operand:
            return f"`{name}` runs its operand as a program"
    return None


def _is_option(word: str) -> bool:
    return len(word) > 1 and word[0] in "-+"
