"""tests/selfbench-task.json: what the verifier's helper (dockerfiles/verifier/verifier.pl) knows
of a task (pure). Data only, never code: JSON::PP reads it and no value of it reaches a shell.
tests/unit/test_verifier_evidence.py checks that every key the helper reads is a field here."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class VerifierTask(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    schema_version: Literal[1] = 1
    task_id: str
    workdir: str  # normalised: "." or a relative path under /app
    held_out: list[str]  # the held-out test files (repository paths)
    test_dirs: list[str]  # their directories
    command_files: list[str]  # the repository files the test command runs
    selector_files: list[str]  # the files the selectors name
    harness_allow: list[str]  # the environment contract's harness rules
    harness_protect: list[str]
    gold_files: list[str]  # what the gold patch changes
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    expected_runners: list[str]  # the known runners the test command starts

    def to_json(self) -> str:
        """The document's bytes: two-space indented, ASCII, in the fields' order."""
        return json.dumps(self.model_dump(by_alias=True), indent=2, ensure_ascii=True) + "\n"
