"""What a runner's selection runs of a held-out file (pure): pytest's node ids, unittest's
dotted names, go's packages and `-run` patterns. The rooms ask these for their canaries."""

from __future__ import annotations

from collections.abc import Sequence

from runner.model.shell import words
from runner.model.task import TESTS_PLACEHOLDER
from runner.runners.canaries.core import ALL, Scope


def node_id_scope(path: str, selectors: Sequence[str]) -> Scope:
    """What `file`, `dir`, `file::Class` and `file::test` selectors run of `path`."""
    why = None
    for selector in selectors:
        if selector.startswith("-"):
            continue
        file, _, rest = selector.partition("::")
        target = file.rstrip("/")
        if target in ("", ".") or path.startswith(target + "/"):
            return ALL
        if path != target:
            continue
        names = [n.split("[", 1)[0] for n in rest.split("::")] if rest else []
        if not names:
            return ALL
        if len(names) == 1 and names[0][:1].isupper():
            return Scope(selected=True, containers=frozenset(names))
        why = f"selector {selector} runs single tests (a copy cannot join them)"
    return Scope(selected=False, why=why)


def module_scope(path: str, selectors: Sequence[str]) -> Scope:
    """What unittest's selectors run of `path`: a module (`pkg.test_x`, or its file) its
    TestCases, a package every module under it, `pkg.test_x.Case` that class, and
    `pkg.test_x.Case.test_y` one test alone."""
    if not selectors:
        return ALL
    module = path.removesuffix(".py").split("/")
    why = None
    for selector in selectors:
        if selector.startswith("-"):
            continue
        if selector.endswith(".py"):
            if selector.lstrip("./") == path:
                return ALL
            continue
        parts = selector.split(".")
        if parts[: len(module)] != module:
            if module[: len(parts)] == parts:  # a package: every module under it
                return ALL
            continue
        rest = parts[len(module) :]
        if not rest:
            return ALL
        if len(rest) == 1:
            return Scope(selected=True, containers=frozenset(rest))
        why = f"selector {selector} runs single tests (a copy cannot join them)"
    return Scope(selected=False, why=why)


def go_selection(command: str, selectors: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the -run patterns, the packages) a go test command and its selectors name."""
    patterns: list[str] = []
    packages: list[str] = []
    listed = list(words(command))
    index = 0
    while index < len(listed):
        word = listed[index]
        following = listed[index + 1] if index + 1 < len(listed) else ""
        if word in ("-run", "-test.run", "--run"):
            if TESTS_PLACEHOLDER in following:
                patterns += [s for s in selectors if not s.startswith("-")]
            elif following:
                patterns.append(following)
            index += 2
            continue
        if word.startswith(("-run=", "-test.run=")):
            patterns.append(word.split("=", 1)[1])
        elif TESTS_PLACEHOLDER in word:
            packages += [s for s in selectors if not s.startswith("-")]
        elif word == "." or word.startswith(("./", "../")) or word == "...":
            packages.append(word)
        index += 1
    return patterns, packages


def package_runs(package: str, directory: str) -> bool:
    """Whether a package pattern (`./...`, `./x/...`, `./x`, `.`, an import path) runs the
    package in `directory` (relative to the workdir); an import path cannot be told here."""
    if not (package in (".", "...") or package.startswith(("./", "../"))):
        return True
    wild = package.endswith("...")
    base = package.removesuffix("...").rstrip("/").removeprefix("./") or "."
    if base in (".", ""):
        return wild or directory == "."
    return directory == base or (wild and directory.startswith(base + "/"))
