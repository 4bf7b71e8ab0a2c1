"""The schemaVersion 1 contract and loading an authored task directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.base.errors import ExitCode, InvalidTaskError
from runner.compile.taskdir import load_authored_task
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
        ({"schemaVersion": 2}, "schemaVersion", "must be the integer 1"),
        ({"schemaVersion": "1"}, "schemaVersion", "must be the integer 1"),
        ({"schemaVersion": True}, "schemaVersion", "must be the integer 1"),
        ({"schemaVersion": 1.0}, "schemaVersion", "must be the integer 1"),
        ({"difficulty": "trivial"}, "difficulty", "easy"),
        ({"taskId": "-bad"}, "taskId", "must match"),
        ({"taskId": "a" * 300}, "taskId", "too long"),
        ({"taskId": "a..b"}, "taskId", "Harbor"),
        ({"taskId": "a b"}, "taskId", "must match"),
        ({"repo": ""}, "repo", "must not be empty"),
        ({"repo": "a\nb"}, "repo", "newline"),
        ({"baseCommit": "abc"}, "baseCommit", "pattern"),
        ({"baseCommit": "g" * 40}, "baseCommit", "pattern"),
        ({"workdir": ""}, "workdir", "must not be empty"),
        ({"workdir": "a\nRUN x"}, "workdir", "newline"),
        ({"workdir": "a\u0000"}, "workdir", "NUL"),
        ({"setupCommand": ""}, "setupCommand", "must not be empty"),
        ({"setupCommand": "make\u0000"}, "setupCommand", "NUL"),
        ({"testCommand": "pytest"}, "testCommand", '"{tests}"'),
        ({"failToPass": []}, "failToPass", "at least 1 item"),
        ({"testPaths": []}, "testPaths", "at least 1 item"),
        ({"testPaths": [""]}, "testPaths[0]", "must not be empty"),
        ({"failToPass": [" "]}, "failToPass[0]", "must not be empty"),
        ({"failToPass": ["a\u0000"]}, "failToPass[0]", "NUL"),
        ({"failToPass": ["a", "a"]}, "failToPass", "listed twice"),
        ({"toolchains": []}, "toolchains", "at least 1 item"),
        ({"toolchains": ["java"]}, "toolchains[0]", "uv"),
        ({"sourcePr": 0}, "sourcePr", "greater than or equal to 1"),
        ({"sourcePr": 1.5}, "sourcePr", "integer"),
        ({"sourceUrl": "not a url"}, "sourceUrl", "must be a URL"),
        ({"prompt": ""}, "prompt", "must not be empty"),
        ({"timeouts": {"setupSeconds": 0}}, "timeouts.setupSeconds", "greater than or equal"),
        ({"timeouts": {"setupSeconds": 10**400}}, "timeouts.setupSeconds", "less than or equal"),
        ({"timeouts": {"setupSeconds": 10**20}}, "timeouts.setupSeconds", "less than or equal"),
        ({"timeouts": {"agentSeconds": 1.5}}, "timeouts.agentSeconds", "integer"),
        ({"timeouts": {"testsSeconds": -1}}, "timeouts.testsSeconds", "greater than or equal"),
        ({"resources": {"cpus": 0}}, "resources.cpus", "greater than 0"),
        ({"resources": {"cpus": 1e300}}, "resources.cpus", "at most 1024"),
        ({"resources": {"memoryMb": 10**20}}, "resources.memoryMb", "less than or equal"),
        ({"resources": {"memoryMb": 0}}, "resources.memoryMb", "greater than or equal"),
        ({"resources": {"storageMb": 0}}, "resources.storageMb", "greater than or equal"),
        ({"extra": True}, "extra", "unknown field"),
        ({"setup_command": "x"}, "setup_command", "the contract spells it `setupCommand`"),
        (
            {"environment": {"environmentVariables": {"A\nRUN x": "1"}}},
            "environment.environmentVariables",
            "not a valid name",
        ),
        (
            {"environment": {"environmentVariables": {"": "1"}}},
            "environment.environmentVariables",
            "not a valid name",
        ),
        (
            {"environment": {"environmentVariables": {"A B": "1"}}},
            "environment.environmentVariables",
            "not a valid name",
        ),
        (
            {"environment": {"environmentVariables": {"A=B": "1"}}},
            "environment.environmentVariables",
            "not a valid name",
        ),
        (
            {"environment": {"environmentVariables": {"A": "x\ny"}}},
            "environment.environmentVariables",
            "newline",
        ),
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
    assert field in [p.field for p in error.problems], error.problems
    problem = next(p for p in error.problems if p.field == field)
    assert fragment in problem.message, problem.message
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
    contract = {"smokeCommand": "make check", "environmentVariables": {"A": "1"}}
    task = load(tmp_path, definition(environment=contract))
    assert task.definition.environment is not None
    assert task.definition.environment.smoke_command == "make check"
    assert task.definition.to_json_dict()["environment"] == contract


@pytest.mark.parametrize(
    ("overrides", "message", "field"),
    [
        ({"workdir": "../up"}, "task path escapes repository: ../up", "workdir"),
        ({"workdir": "/app"}, "task path escapes repository: /app is absolute", "workdir"),
        ({"workdir": ".git"}, "path '.git' is inside the repository's .git directory", "workdir"),
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
            "path '.git/config' is inside the repository's .git directory",
            "testPaths[0]",
        ),
        ({"testPaths": ["."]}, "held-out path '.' covers the whole workdir (.)", "testPaths[0]"),
        ({"testPaths": ["./"]}, "held-out path './' covers the whole workdir (.)", "testPaths[0]"),
        (
            {"testPaths": ["tests/.."]},
            "held-out path 'tests/..' covers the whole workdir (.)",
            "testPaths[0]",
        ),
        (
            {"workdir": "pkg", "testPaths": [".."]},
            "held-out path '..' covers the whole workdir (pkg)",
            "testPaths[0]",
        ),
    ],
)
def test_task_paths_must_stay_inside(
    tmp_path: Path, overrides: dict[str, Any], message: str, field: str
) -> None:
    error = error_of(tmp_path, definition(**overrides))
    assert (field, message) in [(p.field, p.message) for p in error.problems], error.problems


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
    assert error.path is not None and error.path.endswith(f"{label}.patch")
    assert error.message.startswith(f"section 1 ({path}): ")
    assert "escapes repository" in error.message or ".git directory" in error.message


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
    with pytest.raises(InvalidTaskError, match=r"instruction\.md must not be empty"):
        load_authored_task(directory)


def test_patches_are_kept_byte_for_byte(tmp_path: Path) -> None:
    task = bash_task(tmp_path, gold={"lib.sh": "caf\xe9\n", "blob.bin": b"\x00\x01\xff"})
    loaded = load_authored_task(task.directory)
    assert loaded.gold_patch == (task.directory / "gold.patch").read_bytes()
    assert b"GIT binary patch" in loaded.gold_patch
    assert json.loads((task.directory / "definition.json").read_text())["taskId"] == "demo-task"


def test_the_bundle_manifest_is_written_and_read_through_one_model(tmp_path: Path) -> None:
    """What the compiler writes reads back whole; a hostile manifest reads leniently field by
    field (a malformed field is its default, strings are bounded, nothing crashes), and the
    environment stays raw for the strict contract check."""
    from runner.base import validation as v
    from runner.model.manifest import BundleManifest, ManifestVerification

    written = BundleManifest.model_construct(
        task_id="t",
        compiler_revision="selfbench-runner/x",
        sha256={"environment": "a" * 64},
        toolchains=["python"],
        agent_allowed_hosts=[],
        verification=ManifestVerification.model_construct(
            test_command="pytest {tests}", fail_to_pass=["a"], pass_to_pass=[], held_out=["t.py"]
        ),
        environment=None,
    ).to_json()
    assert "environment" not in json.loads(written)  # no contract: no key
    read = BundleManifest.model_validate_json(written)
    assert read.verification is not None and read.verification.test_command == "pytest {tests}"
    assert (read.task_id, read.sha256, read.verification.held_out) == (
        "t",
        {"environment": "a" * 64},
        ["t.py"],
    )
    hostile = BundleManifest.model_validate(
        {
            "taskId": ["not", "text"],
            "sha256": "nope",
            "verification": {
                "testCommand": "x" * (v.MAX_TEST_COMMAND + 1),
                "failToPass": ["ok", 7, "", "y" * (v.MAX_SHORT_TEXT + 1)],
                "heldOut": {"a": 1},
            },
            "environment": ["kept", "raw"],
            "seal": {"files": {}},
        }
    )
    assert hostile.task_id is None and hostile.sha256 == {}
    assert hostile.verification is not None
    assert hostile.verification.test_command is None
    assert hostile.verification.fail_to_pass == ["ok"] and hostile.verification.held_out == []
    assert hostile.environment == ["kept", "raw"]
    assert BundleManifest.model_validate({"verification": "x"}).verification is None
