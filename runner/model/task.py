"""The schemaVersion 1 task definition, exactly as the seed's field table describes it, with the
input boundary's rules (runner/validation.py) applied to every field that reaches a Dockerfile,
a script, a path or a container setting."""

from __future__ import annotations

import re
from enum import StrEnum
from functools import partial
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AnyUrl,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from runner.base import validation as v
from runner.model.contract import EnvironmentContract

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


def _exactly_one(value: Any) -> Any:
    # JSON `true` and `1.0` compare equal to 1 in Python; the contract says the integer 1.
    if type(value) is not int or value != 1:
        raise ValueError("must be the integer 1 (the only schemaVersion)")
    return value


def _task_id(value: str) -> str:
    message = v.check_task_id(value)
    if message:
        raise ValueError(message)
    return value


def _text(max_length: int, *, newlines: bool = False) -> AfterValidator:
    return AfterValidator(partial(v.require_text, max_length=max_length, allow_newlines=newlines))


def _single_path(value: str) -> str:
    v.normalize_repo_path(value)
    return value


def _unique(values: list[str]) -> list[str]:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} is listed twice")
        seen.add(value)
    return values


ShortText = Annotated[str, _text(v.MAX_SHORT_TEXT)]
Selector = Annotated[str, _text(v.MAX_SHORT_TEXT)]
SelectorList = Annotated[list[Selector], Field(max_length=v.MAX_LIST), AfterValidator(_unique)]
Seconds = Annotated[int, Field(ge=1, le=v.MAX_TIMEOUT_SECONDS)]


def _finite_cpus(value: float) -> float:
    v.finite_number(value, low=0.0, high=v.MAX_CPUS)
    if value < v.MIN_CPUS:
        raise ValueError(f"must be at least {v.MIN_CPUS} (Docker's smallest CPU quota)")
    return value


def check_prose(value: str) -> str:
    """Markdown for the agent: any text but NUL and other control characters (CR allowed)."""
    if not value.strip():
        raise ValueError("must not be empty or blank")
    if len(value) > v.MAX_PROMPT:
        raise ValueError(f"is too long ({len(value)} characters; at most {v.MAX_PROMPT})")
    message = v.control_character(value.replace("\r", ""), allow_newlines=True)
    if message:
        raise ValueError(message)
    return value


class _Strict(BaseModel):
    # Only the camelCase names of the contract are accepted: `setup_command` is an unknown key.
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )


class Timeouts(_Strict):
    setup_seconds: Seconds
    agent_seconds: Seconds
    tests_seconds: Seconds


class Resources(_Strict):
    cpus: Annotated[float, AfterValidator(_finite_cpus)]
    memory_mb: int = Field(ge=v.MIN_MEMORY_MB, le=v.MAX_MEMORY_MB)
    storage_mb: int = Field(ge=1, le=v.MAX_STORAGE_MB)


class TaskDefinition(_Strict):
    schema_version: Annotated[int, BeforeValidator(_exactly_one)]
    difficulty: Difficulty
    task_id: Annotated[str, AfterValidator(_task_id)]
    repo: ShortText
    base_commit: Annotated[str, Field(pattern=SHA_PATTERN)]
    workdir: Annotated[str, AfterValidator(_single_path)]
    setup_command: Annotated[str, _text(v.MAX_COMMAND, newlines=True)]
    test_command: Annotated[
        str, _text(v.MAX_TEST_COMMAND, newlines=True), AfterValidator(_contains_placeholder)
    ]
    fail_to_pass: Annotated[SelectorList, Field(min_length=1)]
    pass_to_pass: SelectorList
    test_paths: Annotated[list[ShortText], Field(min_length=1, max_length=v.MAX_LIST)]
    toolchains: Annotated[list[Toolchain], Field(min_length=1, max_length=16)]
    source_pr: int = Field(ge=1, le=v.MAX_SOURCE_PR)
    source_url: Annotated[str, _text(v.MAX_SHORT_TEXT), AfterValidator(_is_url)]
    prompt: Annotated[str, AfterValidator(check_prose)]
    timeouts: Timeouts
    resources: Resources
    environment: EnvironmentContract | None = None

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.environment is not None:
            data["environment"] = self.environment.as_json()
        return data

    @property
    def workdir_path(self) -> str:
        """The workdir normalized ("." for the repository root)."""
        return v.normalize_repo_path(self.workdir)


def cross_field_problems(definition: TaskDefinition) -> list[tuple[str, str]]:
    """(field, message) for the rules that need more than one field."""
    problems: list[tuple[str, str]] = []
    workdir = definition.workdir_path
    for index, path in enumerate(definition.test_paths):
        field = f"testPaths[{index}]"
        try:
            normalized = v.normalize_repo_path(path, base=definition.workdir)
        except ValueError as exc:
            problems.append((field, str(exc)))
            continue
        if v.covers(normalized, workdir):
            problems.append((field, f"held-out path {path!r} covers the whole workdir ({workdir})"))
    return problems


_FIELD_ORDER = re.compile(r"\.(\d+)")


def format_location(loc: tuple[int | str, ...]) -> str:
    """pydantic's location tuple as a dotted path with list indices in brackets."""
    text = ".".join(str(part) for part in loc)
    return _FIELD_ORDER.sub(r"[\1]", text)
