"""Load an authored task directory: definition.json, test.patch, gold.patch, instruction.md.

Every problem becomes an InvalidTaskError naming the file (and field), exit code 2.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from runner.errors import InvalidTaskError
from runner.models import TaskDefinition, format_location
from runner.patches import (
    PatchInfo,
    PatchParseError,
    escapes_repository,
    is_git_patch,
    parse_patch,
    touches_git_dir,
)

DEFINITION = "definition.json"
TEST_PATCH = "test.patch"
GOLD_PATCH = "gold.patch"
INSTRUCTION = "instruction.md"


@dataclass(frozen=True, kw_only=True)
class AuthoredTask:
    directory: Path
    definition: TaskDefinition
    definition_bytes: bytes
    instruction: str
    test_patch: bytes
    gold_patch: bytes
    tests: PatchInfo
    gold: PatchInfo

    def digests(self) -> dict[str, str]:
        return {
            "definition": sha256(self.definition_bytes),
            "testPatch": sha256(self.test_patch),
            "goldPatch": sha256(self.gold_patch),
            "instruction": sha256(self.instruction.encode()),
        }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InvalidTaskError("file not found", path=str(path)) from None
    except IsADirectoryError:
        raise InvalidTaskError("is a directory, expected a file", path=str(path)) from None
    except OSError as exc:
        raise InvalidTaskError(f"cannot read: {exc.strerror}", path=str(path)) from None


def decode_text(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidTaskError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", path=str(path)
        ) from None


def _describe(error: dict[str, object]) -> tuple[str, str]:
    loc = error.get("loc", ())
    assert isinstance(loc, tuple)
    field = format_location(loc)
    if error.get("type") == "extra_forbidden":
        return field, "unknown field (not part of schemaVersion 1)"
    if error.get("type") == "missing":
        return field, "missing required field"
    message = str(error.get("msg", "invalid"))
    return field, message.removeprefix("Value error, ")


def parse_definition(raw: bytes, path: Path) -> TaskDefinition:
    text = decode_text(raw, path)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidTaskError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", path=str(path)
        ) from None
    if not isinstance(document, dict):
        raise InvalidTaskError("must be a JSON object", path=str(path))
    try:
        definition = TaskDefinition.model_validate_json(text)
    except ValidationError as exc:
        errors = exc.errors()
        field, message = _describe(dict(errors[0]))
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidTaskError(f"{message}{more}", path=str(path), field=field) from None
    check_task_paths(definition, path)
    return definition


def check_task_paths(definition: TaskDefinition, path: Path) -> None:
    if escapes_repository(definition.workdir):
        raise InvalidTaskError(
            f"task path escapes repository: {definition.workdir}", path=str(path), field="workdir"
        )
    for index, test_path in enumerate(definition.test_paths):
        if escapes_repository(test_path, base=definition.workdir) or touches_git_dir(test_path):
            raise InvalidTaskError(
                f"task path escapes repository: {test_path}",
                path=str(path),
                field=f"testPaths[{index}]",
            )


def load_patch(path: Path, *, label: str) -> tuple[bytes, PatchInfo]:
    """label is "test" or "gold"; messages follow the seed word for word."""
    raw = read_bytes(path)
    if not is_git_patch(raw):
        raise InvalidTaskError(f"{label}.patch is not a Git patch", path=str(path))
    try:
        info = parse_patch(raw)
    except PatchParseError as exc:
        if label == "test":
            raise InvalidTaskError("test.patch changes no files", path=str(path)) from None
        raise InvalidTaskError(f"gold.patch cannot be parsed: {exc}", path=str(path)) from None
    if not info.changes and label == "test":
        raise InvalidTaskError("test.patch changes no files", path=str(path))
    for file_path in info.files:
        if escapes_repository(file_path) or touches_git_dir(file_path):
            raise InvalidTaskError(
                f"{label} patch path escapes repository: {file_path}", path=str(path)
            )
    return raw, info


def normalize_instruction(text: str) -> str:
    return text.strip() + "\n"


def load_authored_task(directory: Path) -> AuthoredTask:
    if not directory.exists():
        raise InvalidTaskError("task directory not found", path=str(directory))
    if not directory.is_dir():
        raise InvalidTaskError("not a directory", path=str(directory))
    definition_path = directory / DEFINITION
    definition_bytes = read_bytes(definition_path)
    definition = parse_definition(definition_bytes, definition_path)
    test_patch, tests = load_patch(directory / TEST_PATCH, label="test")
    gold_patch, gold = load_patch(directory / GOLD_PATCH, label="gold")
    instruction_path = directory / INSTRUCTION
    if instruction_path.exists():
        text = decode_text(read_bytes(instruction_path), instruction_path)
        if not text.strip():
            raise InvalidTaskError("instruction.md is empty", path=str(instruction_path))
        instruction = normalize_instruction(text)
    else:
        instruction = normalize_instruction(definition.prompt)
    return AuthoredTask(
        directory=directory,
        definition=definition,
        definition_bytes=definition_bytes,
        instruction=instruction,
        test_patch=test_patch,
        gold_patch=gold_patch,
        tests=tests,
        gold=gold,
    )
