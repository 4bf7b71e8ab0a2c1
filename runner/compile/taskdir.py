"""Load an authored task directory: definition.json, test.patch, gold.patch, instruction.md.

Every problem in every file is collected and raised together as one InvalidInputError (exit
code 2), each naming its file and field, so an author fixes them all in one round.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from runner.base import validation as v
from runner.base.errors import InvalidInputError, InvalidTaskError, Problem
from runner.base.safeio import optional_regular, read_regular, require_directory, size_words
from runner.compile.patches import (
    PatchInfo,
    PatchParseError,
    is_git_patch,
    parse_patch,
    patch_problems,
)
from runner.model.task import TaskDefinition, check_prose, cross_field_problems, format_location

DEFINITION = "definition.json"
TEST_PATCH = "test.patch"
GOLD_PATCH = "gold.patch"
INSTRUCTION = "instruction.md"
MAX_PROBLEMS = 200


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


def decode_text(raw: bytes, path: Path | str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidTaskError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", path=str(path)
        ) from None


class _DuplicateKeyError(ValueError):
    pass


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in items:
        if key in result:
            raise _DuplicateKeyError(f"key {key!r} appears twice in one object")
        result[key] = value
    return result


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth_exceeds(document: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return False


def parse_json_object(raw: bytes, path: Path | str) -> dict[str, Any]:
    """A JSON object from untrusted bytes: strict JSON (no NaN/Infinity, no duplicate keys),
    bounded nesting, every failure an InvalidTaskError naming the file."""
    text = decode_text(raw, path)
    try:
        document = json.loads(text, parse_constant=_constant, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        raise InvalidTaskError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", path=str(path)
        ) from None
    except RecursionError:
        raise InvalidTaskError(
            f"invalid JSON: nested more than {v.MAX_JSON_DEPTH} levels deep", path=str(path)
        ) from None
    except ValueError as exc:  # too many digits, NaN/Infinity, duplicate keys
        raise InvalidTaskError(f"invalid JSON: {exc}", path=str(path)) from None
    if not isinstance(document, dict):
        raise InvalidTaskError("must be a JSON object", path=str(path))
    if _depth_exceeds(document, v.MAX_JSON_DEPTH):
        raise InvalidTaskError(
            f"invalid JSON: nested more than {v.MAX_JSON_DEPTH} levels deep", path=str(path)
        )
    return document


_KNOWN_FIELDS = {to_camel(name) for name in TaskDefinition.model_fields}


def _describe(error: dict[str, Any]) -> tuple[str, str]:
    loc = error.get("loc", ())
    field = format_location(tuple(loc))
    kind = error.get("type")
    if kind == "extra_forbidden":
        last = str(loc[-1]) if loc else ""
        hint = to_camel(last)
        if len(loc) == 1 and hint != last and hint in _KNOWN_FIELDS:
            return field, f"unknown field (the contract spells it `{hint}`)"
        return field, "unknown field (not part of schemaVersion 1)"
    if kind == "missing":
        return field, "missing required field"
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return field, message


def definition_problems(
    document: dict[str, Any], path: Path | str
) -> tuple[TaskDefinition | None, list[Problem]]:
    """Validate a definition object; every schema error becomes a Problem."""
    try:
        # JSON-mode validation: strict JSON types (a string is never an int), enums from
        # strings. The document was already parsed safely; re-encoding it is cheap (<= 1 MiB).
        definition = TaskDefinition.model_validate_json(json.dumps(document))
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            field, message = _describe(dict(error))
            problems.append(Problem(file=str(path), field=field, message=message))
        return None, problems
    return definition, [
        Problem(file=str(path), field=field, message=message)
        for field, message in cross_field_problems(definition)
    ]


def parse_definition(raw: bytes, path: Path | str) -> TaskDefinition:
    definition, problems = definition_problems(parse_json_object(raw, path), path)
    if problems or definition is None:
        raise InvalidInputError(problems[:MAX_PROBLEMS])
    return definition


def check_patch(raw: bytes, path: Path | str, *, label: str) -> tuple[PatchInfo | None, list[str]]:
    """label is "test" or "gold"; the seed's messages are kept word for word."""
    if not is_git_patch(raw):
        return None, [f"{label}.patch is not a Git patch"]
    try:
        info = parse_patch(raw)
    except PatchParseError as exc:
        if label == "test":
            return None, ["test.patch changes no files"]
        return None, [f"gold.patch cannot be parsed: {exc}"]
    if not info.changes and label == "test":
        return None, ["test.patch changes no files"]
    return info, patch_problems(info)


def load_patch(path: Path, *, label: str) -> tuple[bytes, PatchInfo]:
    raw = read_regular(path, limit=v.MAX_PATCH_BYTES)
    info, messages = check_patch(raw, path, label=label)
    if messages or info is None:
        raise InvalidInputError([Problem(file=str(path), field=None, message=m) for m in messages])
    return raw, info


def normalize_instruction(text: str) -> str:
    return text.strip() + "\n"


def _collect(problems: list[Problem], error: InvalidTaskError) -> None:
    problems.extend(error.problems)


def load_authored_task(directory: Path) -> AuthoredTask:
    require_directory(directory)
    problems: list[Problem] = []
    definition: TaskDefinition | None = None
    definition_bytes = b""
    definition_path = directory / DEFINITION
    try:
        definition_bytes = read_regular(definition_path, limit=v.MAX_DEFINITION_BYTES)
        document = parse_json_object(definition_bytes, definition_path)
        definition, found = definition_problems(document, definition_path)
        problems.extend(found)
    except InvalidTaskError as exc:
        _collect(problems, exc)

    patches: dict[str, tuple[bytes, PatchInfo]] = {}
    for name, label in ((TEST_PATCH, "test"), (GOLD_PATCH, "gold")):
        try:
            patches[label] = load_patch(directory / name, label=label)
        except InvalidTaskError as exc:
            _collect(problems, exc)

    instruction: str | None = None
    instruction_path = directory / INSTRUCTION
    try:
        raw = optional_regular(instruction_path, limit=v.MAX_INSTRUCTION_BYTES)
        if raw is not None:
            text = decode_text(raw, instruction_path)
            try:
                check_prose(text)
            except ValueError as exc:
                raise InvalidTaskError(
                    f"instruction.md {exc}", path=str(instruction_path)
                ) from None
            instruction = normalize_instruction(text)
    except InvalidTaskError as exc:
        _collect(problems, exc)

    total = len(definition_bytes) + sum(len(raw) for raw, _ in patches.values())
    if total > v.MAX_TASK_BYTES:
        problems.append(
            Problem(
                file=str(directory),
                field=None,
                message=f"task files are too large together ({total} bytes; the limit is "
                f"{size_words(v.MAX_TASK_BYTES)})",
            )
        )
    if problems or definition is None:
        raise InvalidInputError(problems[:MAX_PROBLEMS])
    test_patch, tests = patches["test"]
    gold_patch, gold = patches["gold"]
    return AuthoredTask(
        directory=directory,
        definition=definition,
        definition_bytes=definition_bytes,
        instruction=instruction or normalize_instruction(definition.prompt),
        test_patch=test_patch,
        gold_patch=gold_patch,
        tests=tests,
        gold=gold,
    )


def write_authored(task: AuthoredTask, directory: Path) -> None:
    """The task's four files into `directory` as they were loaded (instruction.md holds the
    instruction the task was loaded with: its own file's, or the prompt)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DEFINITION).write_bytes(task.definition_bytes)
    (directory / TEST_PATCH).write_bytes(task.test_patch)
    (directory / GOLD_PATCH).write_bytes(task.gold_patch)
    (directory / INSTRUCTION).write_text(task.instruction, encoding="utf-8")
