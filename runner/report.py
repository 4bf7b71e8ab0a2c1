"""The structured report: one document per verify, versioned, with a JSON Schema."""

from __future__ import annotations

import json
import os
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner.errors import ExitCode

STAGE_NAMES = ("compile", "audit", "build", "smoke", "nop", "oracle", "determinism")


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # the task is at fault (red)
    ERROR = "error"  # infrastructure is at fault
    SKIPPED = "skipped"


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    INFRASTRUCTURE_FAILED = "infrastructure_failed"
    INVALID = "invalid"

    @property
    def exit_code(self) -> ExitCode:
        return {
            Verdict.ACCEPTED: ExitCode.ACCEPTED,
            Verdict.REJECTED: ExitCode.REJECTED,
            Verdict.INVALID: ExitCode.INVALID,
            Verdict.INFRASTRUCTURE_FAILED: ExitCode.INFRASTRUCTURE,
        }[self]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class Stage(_Model):
    status: Status = Status.SKIPPED
    seconds: float = 0.0
    detail: str = "not run"
    logs: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)


class Stages(_Model):
    compile: Stage = Field(default_factory=Stage)
    audit: Stage = Field(default_factory=Stage)
    build: Stage = Field(default_factory=Stage)
    smoke: Stage = Field(default_factory=Stage)
    nop: Stage = Field(default_factory=Stage)
    oracle: Stage = Field(default_factory=Stage)
    determinism: Stage = Field(default_factory=Stage)

    def get(self, name: str) -> Stage:
        stage = getattr(self, name)
        assert isinstance(stage, Stage)
        return stage

    def items(self) -> list[tuple[str, Stage]]:
        return [(name, self.get(name)) for name in STAGE_NAMES]


class Report(_Model):
    schema_version: Literal[1] = 1
    task_id: str | None
    verdict: Verdict
    reason: str = ""
    stages: Stages = Field(default_factory=Stages)
    seconds: float = 0.0
    runner_version: str
    run_id: str
    started_at: str
    run_dir: str | None = None
    bundle: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


def report_schema() -> dict[str, Any]:
    return Report.model_json_schema(by_alias=True)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_report(path: Path) -> Report:
    return Report.model_validate(json.loads(path.read_text()))
