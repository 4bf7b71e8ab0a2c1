"""The report's stages, in order, and the gates that run the task's tests: the one place their
names are spelled (a module of its own: the CLI needs them at import time, without the report's
models), and why a stage did not run (`Skip`). Everything else names a stage or a gate through
these enums; tests/unit/test_architecture.py keeps it so."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema


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

    def below(self, name: str) -> GateId:
        """The gate of one exploit or probe run below this stage's gate: `hack/<name>`."""
        return GateId(f"{self.value}/{name}")


class GateId(str):
    """One trial's gate as a run names it (and the directory it logs to): a Gate (`nop`), or one
    run below it (`hack/<exploit>`, `determinism/probe-2`). A string, so a path and a log line
    take it as it is; `kind` is the Gate whose rules judge it."""

    __slots__ = ()

    def __new__(cls, value: str) -> GateId:
        head, slash, run = str(value).partition("/")
        if head not in Gate.__members__.values() or "/" in run or (slash and not run):
            raise ValueError(f"{value!r} is not a gate (<gate> or <gate>/<run>)")
        return super().__new__(cls, value)

    @property
    def kind(self) -> Gate:
        return Gate(self.partition("/")[0])

    @property
    def run(self) -> str | None:
        """The run below the gate (`<exploit>` of `hack/<exploit>`), None for a gate itself."""
        return self.partition("/")[2] or None

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(
            cls,
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )


class Skip(StrEnum):
    """Why a stage did not run (its detail says it in these words): what the verdict and the
    report decide from, never the detail's text."""

    NOT_RUN = "not run"
    INTERRUPTED = "skipped: interrupted"
    BUILD_RED = "skipped: build did not pass"
    SMOKE_RED = "skipped: smoke did not pass"
    ORACLE_RED = "skipped: oracle did not pass"
    # A red gate decided the verdict while this one waited or ran (its detail names the gate).
    SETTLED = "skipped: verdict settled by"
    BUNDLE = "skipped: compiled bundle (no definition.json to audit)"
    # A hack stage skipped for one of these does not keep a task from being accepted.
    HACK_DISABLED = "skipped: --no-hack-gate"
    HACK_NONE = "skipped: no canned exploit applies to this task"
    # Another stage's own words (e.g. why the census is missing): `skipped: <why>`.
    OTHER = "skipped"

    @property
    def optional(self) -> bool:
        return self in (Skip.HACK_DISABLED, Skip.HACK_NONE)

    @property
    def on_another(self) -> bool:
        """Skipped because a stage it builds on did not pass: a reason more precise than a
        settled verdict."""
        return self in (Skip.BUILD_RED, Skip.SMOKE_RED, Skip.ORACLE_RED)


STAGE_NAMES: tuple[str, ...] = tuple(name.value for name in Stage)
# The stages a verification runs on Docker (after compile and audit).
DOCKER_STAGES: tuple[str, ...] = STAGE_NAMES[2:]
# The stages `debug` can recreate the state of (a gate's container, or the last build layer).
DEBUGGABLE_STAGES: tuple[str, ...] = tuple(
    name.value for name in (Stage.BUILD, Stage.SMOKE, Stage.NOP, Stage.ORACLE, Stage.HACK)
)
