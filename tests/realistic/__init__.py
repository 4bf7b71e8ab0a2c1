"""Tasks shaped like real pull requests, one family a module (python, node, go, bash), for the
integration tests. Each project has its real fix, a nop-red variant and a broken-gold variant,
and knows the stage and reason each variant must be rejected with (project.py). Each family
lists what test_real_projects.py runs of it (PROJECTS, MANIFEST_PROJECTS): a runner's
real-shaped task is one project there."""

from tests.realistic import bash, go, node, python
from tests.realistic.bash import BASH_RUNNER
from tests.realistic.go import GO_MULTI, GO_VENDORED, GO_WORK
from tests.realistic.node import BUN, JEST, MOCHA, NODE_TEST, VITEST
from tests.realistic.project import VARIANTS, Built, Files, Project, build, shaped, steps
from tests.realistic.python import PDM, PIP_UNITTEST, SETUPTOOLS, UV_MONOREPO

_FAMILIES = (python, node, go, bash)
# Every family's, in this order: each runner's shapes, and the dependency-file gold patches.
PROJECTS: tuple[Project, ...] = tuple(p for f in _FAMILIES for p in f.PROJECTS)
MANIFEST_PROJECTS: tuple[Project, ...] = tuple(p for f in _FAMILIES for p in f.MANIFEST_PROJECTS)

__all__ = [
    "BASH_RUNNER",
    "BUN",
    "GO_MULTI",
    "GO_VENDORED",
    "GO_WORK",
    "JEST",
    "MANIFEST_PROJECTS",
    "MOCHA",
    "NODE_TEST",
    "PDM",
    "PIP_UNITTEST",
    "PROJECTS",
    "SETUPTOOLS",
    "UV_MONOREPO",
    "VARIANTS",
    "VITEST",
    "Built",
    "Files",
    "Project",
    "build",
    "shaped",
    "steps",
]
