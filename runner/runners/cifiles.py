"""What a repository's own CI files and test configuration say to `init` (pure): the shell lines
its CI steps run, which test runner they start, and which requirement files they install.

The files are the head commit's, read by `runner.compile.init` (bounded there). They are data: a
line is split by the shell lexer (runner.model.shell.commands, linear in its length) and looked
at, never run. A CI file is YAML; a hostile one may nest or alias without end, so the walk is
bounded and visits each node once."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping

import yaml

from runner.model.shell import commands

# The CI files init reads: GitHub Actions, GitLab CI, CircleCI, Azure Pipelines.
CI_FILE = re.compile(
    r"^(\.github/workflows/[^/]+\.ya?ml|\.gitlab-ci\.ya?ml|\.circleci/config\.ya?ml"
    r"|azure-pipelines\.ya?ml)$"
)
# The folders they sit in, for a listing of the head commit limited to them.
CI_FOLDERS = (".github/workflows", ".circleci")
# The keys whose string values are shell: GitHub's `run`, GitLab's `script` and its kin,
# CircleCI's `run` (a string or `command`), Azure's `script` and `bash`.
_SHELL_KEYS = frozenset(
    {"run", "script", "before_script", "after_script", "command", "bash", "commands"}
)
# The tools that run a command in the project's environment (`uv run pytest`), and the commands
# that install requirement files.
_PROJECT_RUNNERS = frozenset({"uv", "poetry", "pdm", "hatch", "pipenv"})
_INSTALLS = (["pip", "install"], ["pip3", "install"], ["uv", "pip", "install"])
_MAX_NODES = 20_000
_MAX_LINES = 2_000


def ci_lines(files: Mapping[str, bytes]) -> list[str]:
    """Every shell line the CI files among `files` run, in file order (at most _MAX_LINES)."""
    lines: list[str] = []
    for path in sorted(p for p in files if CI_FILE.match(p)):
        try:
            document = yaml.safe_load(files[path].decode("utf-8", "replace"))
        except yaml.YAMLError:
            continue
        for text in _shell_values(document):
            lines.extend(line.strip() for line in text.splitlines() if line.strip())
            if len(lines) >= _MAX_LINES:
                return lines[:_MAX_LINES]
    return lines


def _shell_values(document: object) -> Iterator[str]:
    """The strings under a shell key, anywhere in the document (each node once: an alias
    repeats a node, it is not walked again)."""
    seen: set[tuple[int, bool]] = set()  # a node under a shell key and elsewhere: both
    stack: list[tuple[object, bool]] = [(document, False)]
    visited = 0
    while stack and visited < _MAX_NODES:
        node, shell = stack.pop()
        visited += 1
        if isinstance(node, str):
            if shell:
                yield node
            continue
        if not isinstance(node, dict | list) or (id(node), shell) in seen:
            continue
        seen.add((id(node), shell))
        if isinstance(node, dict):
            items = [
                (v, shell or (isinstance(k, str) and k in _SHELL_KEYS)) for k, v in node.items()
            ]
        else:
            items = [(v, shell) for v in node]
        stack.extend(reversed(items))


def _program(command: list[str]) -> list[str]:
    """The command without its runners in front (`uv run`, `poetry run`, `pdm run`, `hatch run`,
    `python -m`, an environment assignment): what it starts, as words."""
    rest = [w for w in command if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)] or command
    while len(rest) > 2 and rest[0] in _PROJECT_RUNNERS and rest[1] == "run":
        rest = rest[2:]
    if rest and posixpath.basename(rest[0]).startswith("python") and len(rest) > 1:
        if rest[1] == "-m":
            return rest[2:]
        if not rest[1].startswith("-"):  # a script: `python manage.py test`
            return [posixpath.basename(rest[1]), *rest[2:]]
    return [posixpath.basename(rest[0]), *rest[1:]] if rest else []


def _programs(files: Mapping[str, bytes]) -> Iterator[tuple[list[str], list[str]]]:
    """Each simple command the CI files run, with what it starts (`_program`)."""
    for line in ci_lines(files):
        for command in commands(line):
            yield command, _program(command)


def ci_python_runner(files: Mapping[str, bytes]) -> str | None:
    """`pytest` or `unittest`, the runner the CI files start first (pytest's other name, and
    Django's `manage.py test`, count as theirs), or None when they start neither."""
    for _, program in _programs(files):
        if program[:1] in (["pytest"], ["py.test"]):
            return "pytest"
        if program[:1] == ["unittest"] or program[:2] == ["manage.py", "test"]:
            return "unittest"
    return None


def ci_requirements(files: Mapping[str, bytes]) -> list[str]:
    """The requirement files the CI files install (`pip install -r FILE`, `uv pip install -r`),
    as repository paths, in order; only plain relative paths."""
    found: list[str] = []
    for command, program in _programs(files):
        if not any(program[: len(install)] == install for install in _INSTALLS):
            continue
        for index, word in enumerate(command):
            name = None
            if word in ("-r", "--requirement") and index + 1 < len(command):
                name = command[index + 1]
            elif word.startswith("--requirement="):
                name = word.split("=", 1)[1]
            if name and (path := _plain(name)) and path not in found:
                found.append(path)
    return found


def _plain(name: str) -> str | None:
    """A plain relative path (no variable, no `..`, not absolute), normalised."""
    if not name or name.startswith(("/", "-", "~")) or any(c in name for c in "$`*?{}"):
        return None
    path = posixpath.normpath(name)
    return None if path.startswith("..") or path == "." else path
