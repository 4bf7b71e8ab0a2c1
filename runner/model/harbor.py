"""One model of the bundle's `task.toml` (Harbor schema 1.4), used to write it at compile time
and to read it back at verify time.

Reading is strict: a bundle on disk may be forged, so unknown keys, wrong types, non-finite or
out-of-range numbers are refused with the field named. Field names, defaults and allowed values
follow Harbor 0.26's `harbor.models.task.config` (network modes `no-network | public |
allowlist`; verifier environment mode `separate`).
"""

from __future__ import annotations

import json
import tomllib
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from runner.base import validation as v
from runner.base.errors import InvalidInputError, InvalidTaskError, Problem
from runner.base.safeio import read_regular
from runner.model.layout import BundleLayout
from runner.model.task import Difficulty, Toolchain, format_location

SCHEMA_VERSION = "1.4"
TASK_NAME_PREFIX = "selfbench/"
AGENT_PATCH = "/opt/selfbench/agent.patch"
BASE_GIT = "/opt/selfbench/base.git"
COLLECT_COMMAND = (
    f"git --git-dir={BASE_GIT} --work-tree=/app add -A"
    f" && git --git-dir={BASE_GIT} --work-tree=/app diff --cached --binary HEAD > {AGENT_PATCH}"
)
MAX_TOML_BYTES = 256 * 1024


class NetworkMode(StrEnum):
    NO_NETWORK = "no-network"
    PUBLIC = "public"
    ALLOWLIST = "allowlist"


def _seconds(value: float) -> float:
    return v.finite_number(value, low=0.0, high=float(v.MAX_TIMEOUT_SECONDS))


def _cpus(value: float) -> float:
    v.finite_number(value, low=0.0, high=v.MAX_CPUS)
    if value < v.MIN_CPUS:
        raise ValueError(f"must be at least {v.MIN_CPUS} (Docker's smallest CPU quota)")
    return value


def _single_line(value: str) -> str:
    return v.require_text(value, max_length=v.MAX_SHORT_TEXT)


def _host(value: str) -> str:
    message = v.host_problem(value)
    if message:
        raise ValueError(message)
    return value


Seconds = Annotated[float, AfterValidator(_seconds)]
Line = Annotated[str, AfterValidator(_single_line)]
Command = Annotated[str, AfterValidator(partial(v.require_text, max_length=v.MAX_COMMAND))]
Host = Annotated[str, AfterValidator(_host)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PackageInfo(_Table):
    name: Line
    version: Line = "1.0.0"
    description: Annotated[str, Field(max_length=v.MAX_SHORT_TEXT)] = ""
    keywords: list[Line] = Field(default_factory=list, max_length=64)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not name.startswith(TASK_NAME_PREFIX):
            raise ValueError(f"must be {TASK_NAME_PREFIX}<taskId>")
        message = v.check_task_id(name.removeprefix(TASK_NAME_PREFIX))
        if message:
            raise ValueError(f"task id {message}")
        return name


class Metadata(_Table):
    selfbench_task_id: Line
    difficulty: Difficulty
    repo: Line
    base_commit: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{40}$")]
    workdir: Line
    source_pr: int = Field(ge=1, le=v.MAX_SOURCE_PR)
    source_url: Line
    toolchains: list[Toolchain] = Field(min_length=1, max_length=16)
    compiler_revision: Line

    @field_validator("selfbench_task_id")
    @classmethod
    def _task_id(cls, task_id: str) -> str:
        message = v.check_task_id(task_id)
        if message:
            raise ValueError(message)
        return task_id

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, workdir: str) -> str:
        v.normalize_repo_path(workdir)
        return workdir


class AgentConfig(_Table):
    timeout_sec: Seconds
    user: Literal["agent"] = "agent"
    network_mode: NetworkMode = NetworkMode.PUBLIC
    allowed_hosts: list[Host] | None = Field(default=None, max_length=256)


class CollectConfig(_Table):
    service: Literal["main"] = "main"
    user: Literal["root"] = "root"
    timeout_sec: Seconds
    command: Command


class EnvironmentConfig(_Table):
    network_mode: NetworkMode = NetworkMode.PUBLIC
    build_timeout_sec: Seconds
    cpus: Annotated[float, AfterValidator(_cpus)]
    memory_mb: int = Field(ge=v.MIN_MEMORY_MB, le=v.MAX_MEMORY_MB)
    storage_mb: int = Field(ge=1, le=v.MAX_STORAGE_MB)

    @property
    def cpus_value(self) -> int | float:
        """Whole numbers as integers, as Harbor normalizes them."""
        return int(self.cpus) if float(self.cpus).is_integer() else self.cpus


class VerifierConfig(_Table):
    timeout_sec: Seconds
    user: Literal["root"] = "root"
    environment_mode: Literal["separate"] = "separate"
    network_mode: NetworkMode = NetworkMode.PUBLIC
    collect: list[CollectConfig] = Field(min_length=1, max_length=1)
    environment: EnvironmentConfig


_ARTIFACTS: tuple[Literal["/opt/selfbench/agent.patch"], ...] = ("/opt/selfbench/agent.patch",)


class TaskToml(_Table):
    schema_version: Literal["1.4"] = "1.4"
    artifacts: list[Literal["/opt/selfbench/agent.patch"]] = Field(
        default_factory=lambda: list(_ARTIFACTS)
    )
    task: PackageInfo
    metadata: Metadata
    agent: AgentConfig
    verifier: VerifierConfig
    environment: EnvironmentConfig

    @property
    def task_id(self) -> str:
        return self.metadata.selfbench_task_id

    def to_toml(self) -> str:
        document = self.model_dump(mode="json", exclude_none=True)
        for table in (document["environment"], document["verifier"]["environment"]):
            table["cpus"] = self.environment.cpus_value
        return tomli_w.dumps(document)


def _problems(error: ValidationError, path: Path) -> list[Problem]:
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        kind = item.get("type")
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        if kind == "extra_forbidden":
            message = "unknown field (selfbench-runner cannot honour it)"
        elif kind == "missing":
            message = "missing required field"
        problems.append(
            Problem(file=str(path), field=format_location(tuple(item["loc"])), message=message)
        )
    return problems


def parse_task_toml(raw: bytes, path: Path) -> TaskToml:
    try:
        data: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidTaskError("task.toml is not UTF-8 text", path=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidTaskError(f"invalid TOML: {exc}", path=str(path)) from None
    except RecursionError:
        raise InvalidTaskError("invalid TOML: nested too deeply", path=str(path)) from None
    try:
        # JSON-mode validation: TOML's types are JSON's plus dates (which no field takes, so
        # they arrive as strings and fail where a number is expected).
        model = TaskToml.model_validate_json(json.dumps(data, default=str))
    except ValidationError as exc:
        raise InvalidInputError(_problems(exc, path)) from None
    if model.task.name != TASK_NAME_PREFIX + model.metadata.selfbench_task_id:
        raise InvalidTaskError(
            f"task.name must be {TASK_NAME_PREFIX}{model.metadata.selfbench_task_id}",
            path=str(path),
            field="task.name",
        )
    if model.verifier.environment != model.environment:
        raise InvalidTaskError(
            "[verifier.environment] must equal [environment] in a selfbench bundle",
            path=str(path),
            field="verifier.environment",
        )
    return model


def read_task_toml(root: Path) -> TaskToml:
    path = BundleLayout(root).task_toml
    return parse_task_toml(read_regular(path, limit=MAX_TOML_BYTES), path)
