"""The schemaVersion 1 contract and loading an authored task directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.errors import ExitCode, InvalidTaskError
from runner.taskdir import load_authored_task
from tests.helpers import bash_task, definition, write_task

PATCH = (
    b"diff --git a/x.txt b/x.txt\nnew file mode 100644\n--- /dev/null\n+++ b/x.txt\n"
    b"@@ -0,0 +1 @@\n+x\n"
)
GOLD = (
    b"diff --git a/y.txt b/y.txt\nnew file mode 100644\n--- /dev/null\n+++ b/y.txt\n"
    b"@@ -0,0 +1 @@\n+y\n"
)


def load(
    tmp_path: Path, doc: dict[str, Any], *, test_patch: bytes = PATCH, gold_patch: bytes = GOLD
) -> Any:
    return load_authored_task(
        write_task(tmp_path / "task", doc, test_patch=test_patch, gold_patch=gold_patch)
    )


def error_of(tmp_path: Path, doc: dict[str, Any], **kwargs: bytes) -> InvalidTaskError:
    with pytest.raises(InvalidTaskError) as info:
        load(tmp_path, doc, **kwargs)
    assert info.value.exit_code is ExitCode.INVALID
    return info.value


def test_valid_definition_loads(tmp_path: Path) -> None:
    task = load(tmp_path, definition())
    assert task.definition.task_id == "demo-task"
    assert task.instruction == "Add the feature.\n"
    assert task.tests.files == ("x.txt",)


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"schemaVersion": 2}, "schemaVersion", "Input should be 1"),
        ({"schemaVersion": "1"}, "schemaVersion", "Input should be 1"),
        ({"difficulty": "trivial"}, "difficulty", "easy"),
        ({"taskId": "-bad"}, "taskId", "pattern"),
        ({"taskId": "a b"}, "taskId", "pattern"),
        ({"repo": ""}, "repo", "at least 1 character"),
        ({"baseCommit": "abc"}, "baseCommit", "pattern"),
        ({"baseCommit": "g" * 40}, "baseCommit", "pattern"),
        ({"workdir": ""}, "workdir", "at least 1 character"),
        ({"setupCommand": ""}, "setupCommand", "at least 1 character"),
        ({"testCommand": "pytest"}, "testCommand", '"{tests}"'),
        ({"failToPass": []}, "failToPass", "at least 1 item"),
        ({"testPaths": []}, "testPaths", "at least 1 item"),
        ({"testPaths": [""]}, "testPaths[0]", "at least 1 character"),
        ({"toolchains": []}, "toolchains", "at least 1 item"),
        ({"toolchains": ["java"]}, "toolchains[0]", "uv"),
        ({"sourcePr": 0}, "sourcePr", "greater than or equal to 1"),
        ({"sourcePr": 1.5}, "sourcePr", "integer"),
        ({"sourceUrl": "not a url"}, "sourceUrl", "must be a URL"),
        ({"prompt": ""}, "prompt", "at least 1 character"),
        ({"timeouts": {"setupSeconds": 0}}, "timeouts.setupSeconds", "greater than or equal"),
        ({"timeouts": {"agentSeconds": 1.5}}, "timeouts.agentSeconds", "integer"),
        ({"timeouts": {"testsSeconds": -1}}, "timeouts.testsSeconds", "greater than or equal"),
        ({"resources": {"cpus": 0}}, "resources.cpus", "greater than 0"),
        ({"resources": {"memoryMb": 0}}, "resources.memoryMb", "greater than or equal"),
        ({"resources": {"storageMb": 0}}, "resources.storageMb", "greater than or equal"),
        ({"extra": True}, "extra", "unknown field"),
        (
            {"timeouts": {"setupSeconds": 1, "agentSeconds": 1, "testsSeconds": 1, "x": 1}},
            "timeouts.x",
            "unknown field",
        ),
    ],
)
def test_schema_errors_name_the_field(
    tmp_path: Path, overrides: dict[str, Any], field: str, fragment: str
) -> None:
    error = error_of(tmp_path, definition(**overrides))
    assert error.field == field
    assert fragment in error.message
    assert error.path is not None and error.path.endswith("definition.json")
    assert "\n" not in error.one_line()


def test_missing_field_is_named(tmp_path: Path) -> None:
    doc = definition()
    del doc["resources"]
    error = error_of(tmp_path, doc)
    assert (error.field, error.message) == ("resources", "missing required field")


def test_fractional_cpus_are_valid(tmp_path: Path) -> None:
    task = load(tmp_path, definition(resources={"cpus": 0.5}))
    assert task.definition.resources.cpus == 0.5


def test_environment_contract_is_carried(tmp_path: Path) -> None:
    contract = {"smokeCommand": "make check", "environmentVariables": {"A": "1"}, "services": []}
    task = load(tmp_path, definition(environment=contract))
    assert task.definition.environment is not None
    assert task.definition.environment.smoke_command == "make check"
    assert task.definition.to_json_dict()["environment"] == contract


@pytest.mark.parametrize(
    ("overrides", "message", "field"),
    [
        ({"workdir": "../up"}, "task path escapes repository: ../up", "workdir"),
        ({"workdir": "/app"}, "task path escapes repository: /app", "workdir"),
        (
            {"testPaths": ["../../etc/passwd"]},
            "task path escapes repository: ../../etc/passwd",
            "testPaths[0]",
        ),
        (
            {"workdir": "sub", "testPaths": ["../../x"]},
            "task path escapes repository: ../../x",
            "testPaths[0]",
        ),
        (
            {"testPaths": [".git/config"]},
            "task path escapes repository: .git/config",
            "testPaths[0]",
        ),
    ],
)
def test_task_paths_must_stay_inside(
    tmp_path: Path, overrides: dict[str, Any], message: str, field: str
) -> None:
    error = error_of(tmp_path, definition(**overrides))
    assert error.message == message
    assert error.field == field


def test_subdirectory_workdir_and_relative_test_path_are_fine(tmp_path: Path) -> None:
    task = load(tmp_path, definition(workdir="pkg", testPaths=["../pkg/tests/x.py"]))
    assert task.definition.workdir == "pkg"


def test_not_a_git_patch_word_for_word(tmp_path: Path) -> None:
    assert error_of(tmp_path, definition(), test_patch=b"--- a\n+++ b\n").message == (
        "test.patch is not a Git patch"
    )
    assert error_of(tmp_path, definition(), gold_patch=b"").message == (
        "gold.patch is not a Git patch"
    )


def test_test_patch_without_files(tmp_path: Path) -> None:
    error = error_of(tmp_path, definition(), test_patch=b"diff --git nonsense\n")
    assert error.message == "test.patch changes no files"


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("../outside.txt", "test"),
        (".git/hooks/pre-commit", "test"),
        ("sub/.git/config", "gold"),
        ("../../x", "gold"),
    ],
)
def test_patch_paths_must_stay_inside(tmp_path: Path, path: str, label: str) -> None:
    patch = (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
        f"+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
    ).encode()
    kwargs = {"test_patch": patch} if label == "test" else {"gold_patch": patch}
    error = error_of(tmp_path, definition(), **kwargs)
    assert error.message == f"{label} patch path escapes repository: {path}"


def test_malformed_json_is_one_line(tmp_path: Path) -> None:
    directory = write_task(tmp_path / "t", definition(), test_patch=PATCH, gold_patch=GOLD)
    (directory / "definition.json").write_text('{"schemaVersion": 1,\n  oops}')
    with pytest.raises(InvalidTaskError) as info:
        load_authored_task(directory)
    assert info.value.message.startswith("invalid JSON at line 2 column 3")


def test_json_that_is_not_an_object(tmp_path: Path) -> None:
    directory = write_task(tmp_path / "t", definition(), test_patch=PATCH, gold_patch=GOLD)
    (directory / "definition.json").write_text("[1, 2]")
    with pytest.raises(InvalidTaskError, match="must be a JSON object"):
        load_authored_task(directory)


def test_non_utf8_definition(tmp_path: Path) -> None:
    directory = write_task(tmp_path / "t", definition(), test_patch=PATCH, gold_patch=GOLD)
    (directory / "definition.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(InvalidTaskError, match=r"not UTF-8 text \(byte 0xff at offset 7\)"):
        load_authored_task(directory)


@pytest.mark.parametrize("missing", ["definition.json", "test.patch", "gold.patch"])
def test_missing_files(tmp_path: Path, missing: str) -> None:
    directory = write_task(tmp_path / "t", definition(), test_patch=PATCH, gold_patch=GOLD)
    (directory / missing).unlink()
    with pytest.raises(InvalidTaskError) as info:
        load_authored_task(directory)
    assert info.value.message == "file not found"
    assert info.value.path == str(directory / missing)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidTaskError, match="task directory not found"):
        load_authored_task(tmp_path / "nope")


def test_instruction_md_is_authoritative_and_normalized(tmp_path: Path) -> None:
    directory = write_task(
        tmp_path / "t",
        definition(prompt="from prompt"),
        test_patch=PATCH,
        gold_patch=GOLD,
        instruction="\n\n  Do the thing.\n\n\n",
    )
    assert load_authored_task(directory).instruction == "Do the thing.\n"


def test_empty_instruction_md_is_an_error(tmp_path: Path) -> None:
    directory = write_task(
        tmp_path / "t", definition(), test_patch=PATCH, gold_patch=GOLD, instruction="  \n"
    )
    with pytest.raises(InvalidTaskError, match=r"instruction\.md is empty"):
        load_authored_task(directory)


def test_patches_are_kept_byte_for_byte(tmp_path: Path) -> None:
    task = bash_task(tmp_path, gold={"lib.sh": "caf\xe9\n", "blob.bin": b"\x00\x01\xff"})
    loaded = load_authored_task(task.directory)
    assert loaded.gold_patch == (task.directory / "gold.patch").read_bytes()
    assert b"GIT binary patch" in loaded.gold_patch
    assert json.loads((task.directory / "definition.json").read_text())["taskId"] == "demo-task"
