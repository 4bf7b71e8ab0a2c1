"""The sidecar's documents, one format for both ways in (mailbox and HTTP): the verification
request, the response, a job's status and the error body. Pure: no files, no Docker.

Names that become path components (the id, run, stage and candidate) match
`^[A-Za-z0-9._-]{1,128}$` and are never `.` or `..`, so no request can reach outside its
mailbox or archive.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from runner.base import validation as v

# `^[A-Za-z0-9._-]{1,128}$`, and never dots only (`.`, `..` would be path tricks).
NAME_PATTERN = r"^(?!\.+$)[A-Za-z0-9._-]{1,128}$"
# A repository: some non-space character and no control characters (it becomes one argv
# element, never a shell word; the check keeps logs and errors one line).
_C = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
REPO_PATTERN = rf"^[^{_C}]*[^ {_C}][^{_C}]*$"
MAX_REPO_CHARS = 4096
MAX_ROUND = 1_000_000
# Where every verification is archived, under the archive root (archive_path): one directory
# per verification, ARCHIVE_GLOB below ARCHIVES (run/stage/candidate/round-N/verify-N).
ARCHIVES = "runs"
ARCHIVE_GLOB = "*/*/*/*/*"


def _no_final_newline(value: str) -> str:
    # Python's `$` also matches before a final newline; the JSON Schema's (ECMA) does not.
    if value.endswith("\n"):
        raise ValueError("must not end with a newline")
    return value


Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN), AfterValidator(_no_final_newline)]


class _Document(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        regex_engine="python-re",  # NAME_PATTERN's look-ahead
    )

    def to_json(self) -> str:
        """ASCII JSON: a request may carry lone surrogates (JSON allows them), which neither
        UTF-8 files nor SQLite text can hold unescaped."""
        return json.dumps(
            self.model_dump(mode="json", by_alias=True, exclude_none=True),
            ensure_ascii=True,
            separators=(",", ":"),
        )


class TaskPayload(_Document):
    """The authored task: the files an authoring agent writes to /work/task/."""

    definition: dict[str, Any] = Field(
        description="definition.json: the schemaVersion 1 object with its environment contract"
    )
    instruction: str | None = Field(
        default=None,
        description="instruction.md; optional, as in a task directory (the definition's prompt "
        "stands for it)",
    )
    test_patch: str = Field(description="test.patch (held out from the agent)")
    gold_patch: str = Field(description="gold.patch (the reference solution)")


class RequestOptions(_Document):
    """Per-request settings that do not touch trust (the sidecar's own options set the base
    image, CA, toolchain sources and networks)."""

    pids_limit: Annotated[int, Field(ge=v.MIN_PIDS_LIMIT, le=v.MAX_PIDS_LIMIT)] | None = None
    max_log_bytes: Annotated[int, Field(ge=v.MIN_LOG_BYTES, le=v.MAX_LOG_BYTES)] | None = None


class VerificationRequest(_Document):
    id: Name = Field(description="The request id; a repeated id is answered, never run twice")
    run: Name
    stage: Name
    candidate: Name
    round: Annotated[int, Field(ge=0, le=MAX_ROUND)]
    verify: Annotated[int, Field(ge=0, le=MAX_ROUND)]
    task: TaskPayload
    repo: (
        Annotated[
            str,
            StringConstraints(max_length=MAX_REPO_CHARS, pattern=REPO_PATTERN),
            AfterValidator(_no_final_newline),
        ]
        | None
    ) = Field(
        default=None,
        description="Overrides definition.repo: a git URL, or a local path under an "
        "--allow-repo-root directory",
    )
    options: RequestOptions = Field(default_factory=RequestOptions)
    fix_of: Name | None = Field(
        default=None,
        description="A verification round: the id of the green verification this task fixes. "
        "The fix is checked against that request's task before anything is built (it may "
        "change only the held-out tests and the environment contract)",
    )

    fix_of_task: TaskPayload | None = Field(
        default=None,
        description="The green task fixOf names, as the orchestrator recorded it: when given, "
        "it must be that verification's task as this service knows it (its own store, or the "
        "fleet's published run). Never the reference the fix is checked against",
    )

    def archive_path(self) -> PurePosixPath:
        """Where this verification is archived, relative to the archive root."""
        return PurePosixPath(
            ARCHIVES,
            self.run,
            self.stage,
            self.candidate,
            f"round-{self.round}",
            f"verify-{self.verify}",
        )

    def body_digest(self) -> str:
        """The request's content (id included): a repeated id with another body is a conflict."""
        return _digest(self.model_dump(mode="json", by_alias=True))

    def task_id(self) -> str | None:
        value = self.task.definition.get("taskId")
        return value if isinstance(value, str) else None

    def definition_repo(self) -> str | None:
        value = self.task.definition.get("repo")
        return value if isinstance(value, str) else None

    def base_commit(self) -> str | None:
        value = self.task.definition.get("baseCommit")
        return value if isinstance(value, str) else None


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def payload_digest(
    request: VerificationRequest, *, base_tree: str, runner_version: str, settings: dict[str, Any]
) -> str:
    """What decides a verification's outcome: the task (definition, instruction, both patches),
    the base commit's tree (not its repository's address), the runner (which is the compiler)
    and the settings that change images or limits. Equal digests, equal reports."""
    return _digest(
        {
            "task": request.task.model_dump(mode="json", by_alias=True),
            "options": request.options.model_dump(mode="json", by_alias=True),
            "baseTree": base_tree,
            "runner": runner_version,
            "settings": settings,
        }
    )


# ---- what goes back ------------------------------------------------------------------------


class ErrorDetail(_Document):
    field: str | None = Field(default=None, description="The request field at fault, if any")
    message: str


class ErrorBody(_Document):
    code: str = Field(description="A stable, machine-readable reason")
    message: str
    problems: list[ErrorDetail] = Field(default_factory=list)


class ErrorEnvelope(_Document):
    """What every 4xx of the HTTP API carries."""

    error: ErrorBody


class VerificationResponse(_Document):
    """What the mailbox writes to responses/<id>.json and HTTP returns when a job ends. `report`
    is exactly what `verify --json` prints."""

    id: str
    status: Literal["done", "error"]
    report: dict[str, Any] | None = None
    reused: bool = False
    reused_from: str | None = Field(default=None, description="The run id whose report this is")
    archive: str | None = None
    error: ErrorBody | None = None


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.ERROR, JobState.CANCELLED)


class StageProgress(_Document):
    status: str
    detail: str = ""
    seconds: float | None = None
    # While it runs: what it does now (the selection under test and its tests so far, the
    # exploit the hack gate is on), its last progress line.
    progress: str = ""


class VerificationStatus(_Document):
    id: str
    status: JobState
    stages: dict[str, StageProgress] = Field(default_factory=dict)
    verdict: str | None = None
    queued_at: str
    started_at: str | None = None
    finished_at: str | None = None
    attempts: int = 0
    response: VerificationResponse | None = Field(
        default=None, description="Set once the job has finished"
    )

    def document(self) -> dict[str, Any]:
        """The JSON document: every key of the status itself present (null until known), the
        nested documents without their unset keys (as report.json is)."""
        body = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        for name, field in type(self).model_fields.items():
            body.setdefault(field.alias or name, None)
        return body


class Accepted(_Document):
    id: str
    status: JobState
    location: str


class Health(_Document):
    status: Literal["ok", "degraded", "stopping"]
    engine: bool = Field(description="The Docker engine answered a ping")
    queue_depth: int
    running: int


def request_schema() -> dict[str, Any]:
    return VerificationRequest.model_json_schema(by_alias=True)


def response_schema() -> dict[str, Any]:
    return VerificationResponse.model_json_schema(by_alias=True)
