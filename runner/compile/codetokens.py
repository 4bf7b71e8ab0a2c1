"""The names and string literals of a piece of source code, read by its language's own grammar
(pure).

Coupling evidence asks which names the held-out tests use. A word in a comment or a docstring
(a piece of a security advisory id, a word of prose) is not a name the tests use, and a word
inside a string literal is part of that string, not a reference. So each language with a
tree-sitter grammar (Python, JavaScript, TypeScript, Go, Rust, shell) is parsed by it: comments
are skipped, docstrings too, a string literal is one string token, and only identifiers count
as names. Source in other languages falls back to a plain scan of words and quoted strings;
data files (fixtures, snapshots, prose) give only their quoted strings.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from tree_sitter import Node

from runner.runners.syntax import SUFFIXES, node_text, parse

TokenKind = Literal["name", "string"]

MIN_STRING = 4
MAX_STRING = 200
_IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{2,63}\b")
_WHOLE_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,63}")
_QUOTED = re.compile(r"""(?P<q>["'`])(?P<s>[^"'`\\\n]{4,200})(?P=q)""")
_QUOTED_OR_WORD = re.compile(f"{_QUOTED.pattern}|(?P<w>{_IDENTIFIER.pattern})")
# Source in languages without a grammar here: their words still count, as a plain scan finds
# them. Any other file (data, fixtures, prose) holds no names, only its quoted strings.
_OTHER_CODE = frozenset({".rb", ".java", ".kt", ".scala", ".php", ".cs", ".c", ".h", ".cpp"})

# Node types across the grammars: string literals, and the parts of one that hold code.
_STRINGS = frozenset(
    {
        "string",
        "template_string",
        "raw_string",
        "interpreted_string_literal",
        "raw_string_literal",
        "string_literal",
        "ansi_c_string",
        "translated_string",
    }
)
_STRING_CONTENT = frozenset(
    {
        "string_content",
        "string_fragment",
        "raw_string_literal_content",
        "interpreted_string_literal_content",
        "escape_sequence",
    }
)
_DELIMITERS = frozenset({"string_start", "string_end", '"', "'", "`"})
_CODE_IN_STRINGS = frozenset(
    {
        "interpolation",
        "template_substitution",
        "command_substitution",
        "expansion",
        "simple_expansion",
        "arithmetic_expansion",
        "process_substitution",
    }
)
# A shell word is a name when it looks like one (`greet`, `calc_ops`), not its punctuation.
_SHELL_WORDS = frozenset({"word", "variable_name"})


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    row: int  # 0-based, in the text given


def language_of(path: str) -> str | None:
    """The grammar for `path`, "code" for other source, None for data."""
    suffix = posixpath.splitext(path)[1].lower()
    return SUFFIXES.get(suffix) or ("code" if suffix in _OTHER_CODE else None)


def tokens(text: str, language: str | None) -> Iterator[Token]:
    """The names and string literals of `text`, in `language` (see language_of)."""
    if language is None or language == "code":
        yield from _scan(text, names=language == "code")
        return
    source = text.encode("utf-8", "surrogateescape")
    tree = parse(language, source)
    if tree is None:
        yield from _scan(text, names=True)
        return
    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        kind = node.type
        if "comment" in kind:
            continue
        if kind in _STRINGS:
            literal = _literal(node, source)
            if literal is not None and not _is_docstring(node):
                yield Token("string", literal, node.start_point.row)
            stack.extend(c for c in node.children if c.type in _CODE_IN_STRINGS)
            continue
        if node.child_count == 0:
            if not node.is_named:
                continue  # keywords and punctuation
            word = node_text(node, source)
            if kind in _SHELL_WORDS:
                for match in _IDENTIFIER.finditer(word):
                    yield Token("name", match.group(0), node.start_point.row)
            elif kind.endswith("identifier") and _WHOLE_IDENTIFIER.fullmatch(word):
                yield Token("name", word, node.start_point.row)
            continue
        stack.extend(reversed(node.children))


def _literal(node: Node, source: bytes) -> str | None:
    """The text of a string literal with no code inside, when it is one line of a useful
    length."""
    if node.child_count == 0:  # a shell 'raw string' or a character literal: quotes included
        text = node_text(node, source)
        body = text[1:-1] if len(text) >= 2 and text[0] == text[-1] else text
    else:
        if any(c.type not in _STRING_CONTENT and c.type not in _DELIMITERS for c in node.children):
            return None
        body = "".join(node_text(c, source) for c in node.children if c.type in _STRING_CONTENT)
    if MIN_STRING <= len(body) <= MAX_STRING and "\n" not in body and "\\" not in body:
        return body
    return None


def _is_docstring(node: Node) -> bool:
    """A string that is a statement by itself: a docstring, a directive, prose."""
    parent = node.parent
    return (
        parent is not None
        and parent.type == "expression_statement"
        and parent.named_child_count == 1
    )


def _scan(text: str, *, names: bool) -> Iterator[Token]:
    """Quoted strings, and (`names`: source in a language without a grammar here) the words
    outside them."""
    row, seen = 0, 0
    pattern = _QUOTED_OR_WORD if names else _QUOTED
    for match in pattern.finditer(text):
        row += text.count("\n", seen, match.start())
        seen = match.start()
        if match.group("s") is not None:
            yield Token("string", match.group("s"), row)
        else:
            yield Token("name", match.group("w"), row)
