"""The report's stages, in order: the one list of their names (a module of its own: the CLI
needs them at import time, without the report's models)."""

from enum import StrEnum


class StageName(StrEnum):
    COMPILE = "compile"
    AUDIT = "audit"
    BUILD = "build"
    SMOKE = "smoke"
    NOP = "nop"
    ORACLE = "oracle"
    DETERMINISM = "determinism"
    HACK = "hack"


STAGE_NAMES: tuple[str, ...] = tuple(name.value for name in StageName)
# The stages a verification runs on Docker (after compile and audit).
DOCKER_STAGES: tuple[str, ...] = STAGE_NAMES[2:]
# The stages `debug` can recreate the state of (a gate's container, or the last build layer).
DEBUGGABLE_STAGES: tuple[str, ...] = tuple(
    name.value
    for name in (
        StageName.BUILD,
        StageName.SMOKE,
        StageName.NOP,
        StageName.ORACLE,
        StageName.HACK,
    )
)
