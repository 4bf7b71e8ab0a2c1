"""The expected values an exit-code canary can change in a held-out file (pure): by its
language, the same equality assertions the per-test engines copy (Python's at any depth of a
script too), or a shell script's comparisons."""

from __future__ import annotations

from runner.runners.canaries.core import Site
from runner.runners.canaries.golang import go_tests
from runner.runners.canaries.javascript import javascript_tests
from runner.runners.canaries.python import python_script_sites
from runner.runners.canaries.rust import rust_tests
from runner.runners.canaries.shell import shell_sites
from runner.runners.syntax import grammar_of


def exit_code_sites(path: str, text: bytes, added: frozenset[int]) -> list[Site]:
    language = grammar_of(path)
    if language == "python":
        return python_script_sites(text, added)
    if language in ("javascript", "typescript", "tsx"):
        found = javascript_tests(path, text, added, language=language)
    elif language == "go":
        found = go_tests(path, text, added)
    elif language == "rust":
        found = rust_tests(path, text, added)
    elif language == "bash" or (text.startswith(b"#!") and b"sh" in text.split(b"\n", 1)[0]):
        return shell_sites(text, added)
    else:
        return []
    return [site for unit in found.units for site in unit.sites]
