"""The schemaVersion 1 task definition, exactly as the seed's field table describes it."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AnyUrl,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)
from pydantic.alias_generators import to_camel

TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
SHA_PATTERN = r"^[0-9a-fA-F]{40}$"
TESTS_PLACEHOLDER = "{tests}"


class Difficulty(StrEnum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


class Toolchain(StrEnum):
    UV = "uv"
    BUN = "bun"
    GO = "go"
    NODE = "node"
    PYTHON = "python"
    RUST = "rust"


_URL = TypeAdapter(AnyUrl)


def _is_url(value: str) -> str:
    try:
        _URL.validate_python(value)
    except ValidationError as exc:
        raise ValueError("must be a URL") from exc
    return value


def _contains_placeholder(value: str) -> str:
    if TESTS_PLACEHOLDER not in value:
        raise ValueError('must contain the "{tests}" placeholder')
    return value


NonEmpty = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
    )


class Timeouts(_Strict):
    setup_seconds: int = Field(ge=1)
    agent_seconds: int = Field(ge=1)
    tests_seconds: int = Field(ge=1)


class Resources(_Strict):
    cpus: float = Field(gt=0)
    memory_mb: int = Field(ge=1)
    storage_mb: int = Field(ge=1)


class EnvironmentContract(BaseModel):
    """The optional 0.3.8 environment contract. Carried as given; the runner reads only the
    fields it acts on (the smoke command and environment variables)."""

    model_config = ConfigDict(
        extra="allow", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    smoke_command: str | None = None
    environment_variables: dict[str, str] = Field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_defaults=True)


class TaskDefinition(_Strict):
    schema_version: Literal[1]
    difficulty: Difficulty
    task_id: Annotated[str, Field(pattern=TASK_ID_PATTERN)]
    repo: NonEmpty
    base_commit: Annotated[str, Field(pattern=SHA_PATTERN)]
    workdir: NonEmpty
    setup_command: NonEmpty
    test_command: Annotated[str, AfterValidator(_contains_placeholder)]
    fail_to_pass: Annotated[list[str], Field(min_length=1)]
    pass_to_pass: list[str]
    test_paths: Annotated[list[NonEmpty], Field(min_length=1)]
    toolchains: Annotated[list[Toolchain], Field(min_length=1)]
    source_pr: int = Field(ge=1)
    source_url: Annotated[str, AfterValidator(_is_url)]
    prompt: NonEmpty
    timeouts: Timeouts
    resources: Resources
    environment: EnvironmentContract | None = None

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.environment is not None:
            data["environment"] = self.environment.as_json()
        return data


_FIELD_ORDER = re.compile(r"\.(\d+)")


def format_location(loc: tuple[int | str, ...]) -> str:
    """pydantic's location tuple as a dotted path with list indices in brackets."""
    text = ".".join(str(part) for part in loc)
    return _FIELD_ORDER.sub(r"[\1]", text)
