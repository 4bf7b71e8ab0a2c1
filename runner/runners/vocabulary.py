"""The verifier's vocabulary, read from the one data file both sides read
(`dockerfiles/verifier/vocabulary.json`, shipped in every bundle beside the helper, which loads
it at start): extensions, installed and test directories, manifests, configs, test-runner hooks
and configuration, and each test runner's signals. Pure once loaded: the file is the package's
own, read once at import.

Two lists of the same names drifted before (the helper's manifests were 52 names and 7 patterns,
the compile side's 17 and 1: a gold patch that changed setup.cfg had no dependency-setup pass and
was then undone at the oracle), so no list of these is spelled anywhere else
(tests/unit/test_vocabulary.py checks it).
"""

from __future__ import annotations

import posixpath
import re
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from runner.base.resources import verifier_dir

VOCABULARY_FILE = "vocabulary.json"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


class Names(_Model):
    """File names, exactly, and patterns (regular expressions searched in a base name)."""

    names: frozenset[str]
    patterns: tuple[str, ...]
    keys: dict[str, tuple[str, ...]] = {}  # a mixed file: the lines that belong here

    @cached_property
    def _compiled(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p) for p in self.patterns)

    def matches(self, path: str) -> bool:
        name = posixpath.basename(path)
        return name in self.names or any(p.search(name) for p in self._compiled)


class Extensions(_Model):
    source: frozenset[str]
    data: frozenset[str]
    binary_data: frozenset[str]
    compiled: frozenset[str]
    packaging: frozenset[str]


class Directories(_Model):
    installed: frozenset[str]
    compiled: frozenset[str]
    packaging: tuple[str, ...]  # patterns
    tests: frozenset[str]


class Files(_Model):
    manifests: Names
    configs: Names
    hooks: Names
    tests: Names
    python: Names  # what makes a repository a Python project (init)
    makefiles: Names  # what make reads, in its order
    runner_configs: Names


class Nothing(_Model):
    """What a runner prints when a selector selected nothing; `named`: its capture is what was
    not found (else it counts only for a run of one selector in which no test ran)."""

    pattern: str
    named: bool


class Availability(_Model):
    """What an image must have for the runner's recorder."""

    program: str | None = None
    python: bool = False
    python_package: str | None = None


class Protected(_Model):
    """Code of the runner's own, by its file name: what code under test may not take frames of,
    replace or pose as."""

    contains: str | None = None
    suffix: str | None = None
    stdlib: str | None = None  # a path under the interpreter's standard library

    @model_validator(mode="after")
    def _one(self) -> Protected:
        if sum(x is not None for x in (self.contains, self.suffix, self.stdlib)) != 1:
            raise ValueError("a protected name has exactly one of contains, suffix, stdlib")
        return self


class PythonHook(_Model):
    """A runner on Python, as the verifier's evidence boot (hooks/python/) wires its recorder:
    the command lines that start it (`-m MODULE`, or a script's base name and its first
    argument), the module whose loading loads its hook, the hook module (in
    hooks/<runner>/, installed beside the boot), and its own code. The hook module is called
    (`loaded(module, emit, sessions)`) as that module loads, or, with `joins`, named in that
    module's tuple of that name without being imported then (pytest's default plugins: the
    plugin imports pytest, which is only half loaded at that point)."""

    starts: tuple[tuple[str, ...], ...]
    loads: str
    module: str
    joins: str | None = None
    protects: tuple[Protected, ...]

    @model_validator(mode="after")
    def _shapes(self) -> PythonHook:
        for start in self.starts:
            if not 1 <= len(start) <= 2 or any(not w or "\t" in w or "\n" in w for w in start):
                raise ValueError(f"a start is one or two words: {list(start)}")
        for name in (self.loads, self.module, self.joins or "_"):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
                raise ValueError(f"not a module name: {name!r}")
        return self


SelectorKind = Literal["node-id", "module", "package", "file", "file-pattern", "name"]


class RunnerSignals(_Model):
    """One test runner as the helper reads it."""

    selector: SelectorKind
    available: Availability
    python: PythonHook | None = None
    evidence: Literal["reporter", "output"]
    nothing: tuple[Nothing, ...]
    failed_line: str | None = None  # evidence "output": a failed test's line (capture: its id)


class Vocabulary(_Model):
    about: str
    schema_version: Literal[1]
    extensions: Extensions
    directories: Directories
    files: Files
    runners: dict[str, RunnerSignals]

    def is_manifest(self, path: str) -> bool:
        """A dependency manifest or lockfile, at any depth."""
        return self.files.manifests.matches(path)

    def is_runner_config(self, path: str) -> bool:
        """A file that configures or hooks into a test runner, wherever it is."""
        return self.files.runner_configs.matches(path)

    def is_test_path(self, path: str) -> bool:
        """A test or a test fixture by the policy's rules: inside a test directory, named as a
        test file, or a test-runner hook (conftest.py, setupTests.js)."""
        parts = path.split("/")
        return (
            any(part in self.directories.tests for part in parts[:-1])
            or self.files.tests.matches(path)
            or self.files.hooks.matches(path)
        )


def load() -> Vocabulary:
    text = (verifier_dir() / VOCABULARY_FILE).read_text(encoding="utf-8")
    return Vocabulary.model_validate_json(text)


VOCABULARY = load()
