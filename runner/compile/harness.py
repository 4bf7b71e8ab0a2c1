"""The test harness of a task (pure): the files its test command runs or that configure the test
runner. A reference solution that changes them is judged by a harness it rewrote (seen: a gold
patch that implemented nothing and rewrote the runner script to print PASS was accepted), so
the audit blocks it.
"""

from __future__ import annotations

import fnmatch
import posixpath

from runner.base import validation as v
from runner.compile.patches import FileChange, PatchInfo, repository_path
from runner.model.task import TaskDefinition
from runner.runners.command import command_files, selector_files
from runner.runners.vocabulary import VOCABULARY


def is_harness_name(path: str) -> bool:
    """A file that configures or hooks into a test runner wherever it is (the vocabulary's
    runnerConfigs)."""
    return VOCABULARY.is_runner_config(path)


def matches(path: str, patterns: list[str]) -> bool:
    """A contract pattern against a repository path: `*` crosses `/` (bash's [[ == ]])."""
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def _changed_lines(change: FileChange) -> list[str]:
    lines = []
    for raw in change.raw.decode("utf-8", "replace").splitlines():
        if raw.startswith(("+++", "---")):
            continue
        if raw.startswith(("+", "-")):
            lines.append(raw[1:])
    return lines


def harness_changes(definition: TaskDefinition, gold: PatchInfo) -> list[str]:
    """Audit blockers: each gold file that the test command runs or that configures the test
    runner (for mixed files, only when the changed lines are the test runner's)."""
    named = set(command_files(definition.test_command, definition.workdir))
    held_out = [repository_path(definition.workdir, p) for p in definition.test_paths]
    selected = {
        path
        for path in selector_files(
            [*definition.fail_to_pass, *definition.pass_to_pass], definition.workdir
        )
        if not any(v.covers(held, path) for held in held_out)
    }
    contract = definition.environment
    allow = list(contract.harness_allow) if contract else []
    protect = list(contract.harness_protect) if contract else []
    blockers = []
    for change in gold.changes:
        for path in change.paths:
            normalized = v.normalize_repo_path(path)
            name = posixpath.basename(normalized)
            why = None
            if matches(normalized, allow):
                continue
            if normalized in named:
                why = "which the test command runs"
            elif normalized in selected:
                why = "which a test selector names"
            elif matches(normalized, protect):
                why = "which the environment contract's harnessProtect lists"
            elif is_harness_name(normalized):
                why = "which configures the test runner"
            elif name in VOCABULARY.files.runner_configs.keys:
                keys = VOCABULARY.files.runner_configs.keys[name]
                if any(k in line for line in _changed_lines(change) for k in keys):
                    why = "in the lines that configure the test runner"
            if why is not None:
                blockers.append(
                    f"gold.patch changes {path}, {why}: a reference solution must not change "
                    "the test harness"
                )
                break
    return blockers
