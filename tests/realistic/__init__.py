"""Tasks shaped like real pull requests, one family a module (python, node, go, bash), for the
integration tests. Each project has its real fix, a nop-red variant and a broken-gold variant,
and knows the stage and reason each variant must be rejected with (project.py)."""

from tests.realistic.bash import BASH_RUNNER
from tests.realistic.go import GO_MULTI, GO_VENDORED, GO_WORK
from tests.realistic.node import BUN, JEST, MOCHA, NODE_TEST, VITEST
from tests.realistic.project import VARIANTS, Built, Files, Project, build, steps
from tests.realistic.python import PDM, PIP_UNITTEST, SETUPTOOLS, UV_MONOREPO

__all__ = [
    "BASH_RUNNER",
    "BUN",
    "GO_MULTI",
    "GO_VENDORED",
    "GO_WORK",
    "JEST",
    "MOCHA",
    "NODE_TEST",
    "PDM",
    "PIP_UNITTEST",
    "SETUPTOOLS",
    "UV_MONOREPO",
    "VARIANTS",
    "VITEST",
    "Built",
    "Files",
    "Project",
    "build",
    "steps",
]
