"""The report's stages, in order, and the gates that run the task's tests: the one place their
names are spelled (a module of its own: the CLI needs them at import time, without the report's
models). Everything else names a stage or a gate through these enums; tests/unit/
test_architecture.py keeps it so."""

from enum import StrEnum


class Stage(StrEnum):
    COMPILE = "compile"
    AUDIT = "audit"
    BUILD = "build"
    SMOKE = "smoke"
    NOP = "nop"
    ORACLE = "oracle"
    DETERMINISM = "determinism"
    HACK = "hack"


class Gate(StrEnum):
    """A gate: one verdict from the task's tests in a fresh verifier (each its own directory of
    a run). nop and the oracle are stages of their own; the hack gate's exploits and the
    probe's runs are gates below their stage (`hack/<exploit>`, `determinism/probe-N`); grade
    is `grade`'s one gate."""

    NOP = "nop"
    ORACLE = "oracle"
    HACK = "hack"
    DETERMINISM = "determinism"
    GRADE = "grade"

    def below(self, name: str) -> str:
        """The gate of one exploit or probe run below this stage's gate: `hack/<name>`."""
        return f"{self.value}/{name}"


STAGE_NAMES: tuple[str, ...] = tuple(name.value for name in Stage)
# The stages a verification runs on Docker (after compile and audit).
DOCKER_STAGES: tuple[str, ...] = STAGE_NAMES[2:]
# The stages `debug` can recreate the state of (a gate's container, or the last build layer).
DEBUGGABLE_STAGES: tuple[str, ...] = tuple(
    name.value for name in (Stage.BUILD, Stage.SMOKE, Stage.NOP, Stage.ORACLE, Stage.HACK)
)
