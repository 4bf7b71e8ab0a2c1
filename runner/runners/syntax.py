"""Source code read by its language's own grammar (pure): tree-sitter's grammars from PyPI, one
parser per language, and a deadline on hostile text. The coupling evidence reads the held-out
tests' names with it (runner.compile.codetokens), the audit a test command as bash reads it, and
the rooms' canaries find the tests and assertions they copy with it (runner.runners.canaries)."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from functools import cache

import tree_sitter_bash
import tree_sitter_go
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_rust
import tree_sitter_typescript
from tree_sitter import Language, Node, Parser, Tree

PARSE_SECONDS = 5.0  # per piece of text; past it, the caller falls back or gives up

_GRAMMARS: dict[str, Callable[[], object]] = {
    "python": tree_sitter_python.language,
    "javascript": tree_sitter_javascript.language,
    "typescript": tree_sitter_typescript.language_typescript,
    "tsx": tree_sitter_typescript.language_tsx,
    "go": tree_sitter_go.language,
    "rust": tree_sitter_rust.language,
    "bash": tree_sitter_bash.language,
}
SUFFIXES = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".sh": "bash",
    ".bash": "bash",
    ".bats": "bash",
}


def grammar_of(path: str) -> str | None:
    """The grammar for `path` by its extension, or None."""
    return SUFFIXES.get(posixpath.splitext(path)[1].lower())


@cache
def _parser(language: str) -> Parser:
    return Parser(Language(_GRAMMARS[language]()))


def parse(language: str, source: bytes) -> Tree | None:
    """The tree of `source` in `language` (a key of the grammars here, "bash" included), or
    None when the grammar takes longer than PARSE_SECONDS (its error recovery on hostile text
    can be slow: 13 s for 20 MiB of diff lines read as Python). Read a node's text with
    node_text: the tree keeps none of its own."""
    deadline = time.monotonic() + PARSE_SECONDS
    parser = _parser(language)
    try:
        return parser.parse(
            lambda offset, _point: source[offset : offset + 65536],
            progress_callback=lambda _offset, _error: time.monotonic() > deadline,
        )
    except ValueError:  # cancelled by the callback
        parser.reset()
        return None


def node_text(node: Node, source: bytes, errors: str = "replace") -> str:
    # Sliced from the source: a tree parsed through a read callback has no text of its own
    # (Node.text re-reads it, 0.1 ms a node).
    return source[node.start_byte : node.end_byte].decode("utf-8", errors)


def texts_of(root: Node, source: bytes, types: frozenset[str] | set[str]) -> list[str]:
    """The text of every node of these types under `root`, depth first."""
    found: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in types:
            found.append(node_text(node, source))
        stack.extend(reversed(node.children))
    return found
