"""A task's canaries at compile time: its held-out files as test.patch leaves them at the base
commit (read from a temporary index of the repository, never a work tree), the lines test.patch
wrote, and the runners its test command starts (a package script's, for `npm test`), handed to
the rooms (runner.runners.canaries.derive). Written to the bundle's tests/canaries.json."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from runner.compile.git import run_git
from runner.compile.patches import added_lines
from runner.compile.taskdir import AuthoredTask
from runner.model.canaries import CanarySet
from runner.model.shell import words
from runner.runners import ROOMS, expected_runners, room_of
from runner.runners.canaries.derive import (
    MAX_FILE_BYTES,
    CanaryInputs,
    HeldOutFile,
    derive,
    seed_of,
)
from runner.runners.syntax import grammar_of

_PACKAGE_MANAGERS = ("npm", "pnpm", "yarn", "bun")
MAX_FILES = 500


def task_canaries(task: AuthoredTask, repository: Path) -> CanarySet:
    """The canaries of an authored task whose repository is at hand."""
    definition = task.definition
    command = definition.test_command
    held = {
        change.new_path: change
        for change in task.tests.changes
        if change.new_path is not None and not change.binary and grammar_of(change.new_path)
    }
    # The files a room's engine reads, in path order, up to a bound (a patch of thousands of
    # fixtures has its tests among them).
    held = dict(sorted(held.items())[:MAX_FILES])
    contents = _after_test_patch(repository, definition.base_commit, task.test_patch, list(held))
    files = [
        HeldOutFile(path=path, text=text, added=added_lines(held[path]))
        for path, text in sorted(contents.items())
    ]
    runners = expected_runners(command)
    if not runners:
        script = _package_script(
            repository, definition.base_commit, definition.workdir_path, command
        )
        runners = expected_runners(script) if script else []
    inputs = CanaryInputs(
        task_id=definition.task_id,
        # Not the command: a validation repair of it (refresh) keeps the canaries as they are.
        seed=seed_of(definition.task_id.encode(), task.test_patch, task.gold_patch),
        workdir=definition.workdir_path,
        test_command=command,
        fail_to_pass=list(definition.fail_to_pass),
        files=files,
    )
    return derive(inputs, [room_of(name) for name in runners if room_of(name) in ROOMS])


def _after_test_patch(
    repository: Path, commit: str, test_patch: bytes, paths: list[str]
) -> dict[str, bytes]:
    """Each path's bytes at `commit` with test.patch applied (a temporary index; one listing and
    one batch read for all of them; a path too large, or that test.patch leaves no file at, is
    left out)."""
    if not paths:
        return {}
    with tempfile.TemporaryDirectory(prefix="selfbench-canaries.") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        run_git(["read-tree", commit], git_dir=repository, env=env)
        applied = run_git(
            ["apply", "--cached", "--binary", "--whitespace=nowarn", "-"],
            git_dir=repository,
            env=env,
            check=False,
            stdin=test_patch,
        )
        if applied.returncode != 0:
            return {}  # the audit says why
        listed = run_git(
            ["ls-files", "-s", "-z", "--", *paths],
            git_dir=repository,
            env={**env, "GIT_LITERAL_PATHSPECS": "1"},
            check=False,
        ).stdout
        blobs: dict[str, str] = {}
        for entry in listed.split(b"\0"):
            meta, _, name = entry.partition(b"\t")
            fields = meta.split()
            if len(fields) == 3 and fields[0].startswith(b"100"):
                blobs[name.decode("utf-8", "surrogateescape")] = fields[1].decode()
        if not blobs:
            return {}
        batch = run_git(
            ["cat-file", "--batch"],
            git_dir=repository,
            check=False,
            stdin="".join(f"{blob}\n" for blob in blobs.values()).encode(),
        ).stdout
    return _read_batch(batch, blobs)


def _read_batch(batch: bytes, blobs: dict[str, str]) -> dict[str, bytes]:
    """`git cat-file --batch` output: each blob's `<sha> blob <size>` line, then its bytes."""
    contents: dict[str, bytes] = {}
    by_blob = {blob: path for path, blob in blobs.items()}
    at = 0
    while at < len(batch):
        end = batch.find(b"\n", at)
        if end < 0:
            break
        header = batch[at:end].split()
        at = end + 1
        if len(header) != 3 or header[1] != b"blob":
            continue
        size = int(header[2])
        path = by_blob.get(header[0].decode())
        if path is not None and size <= MAX_FILE_BYTES:
            contents[path] = batch[at : at + size]
        at += size + 1
    return contents


def _package_script(repository: Path, commit: str, workdir: str, command: str) -> str | None:
    """The script `npm test` (`npm run X`, `pnpm test`, `yarn X`...) runs, from the workdir's
    package.json at the base commit."""
    listed = words(command)
    for index, word in enumerate(listed):
        if word not in _PACKAGE_MANAGERS:
            continue
        rest = [w for w in listed[index + 1 :] if not w.startswith("-")]
        if not rest:
            return None
        name = rest[1] if rest[0] in ("run", "run-script") and len(rest) > 1 else rest[0]
        path = "package.json" if workdir in ("", ".") else f"{workdir}/package.json"
        shown = run_git(["show", f"{commit}:{path}"], git_dir=repository, check=False)
        try:
            scripts = json.loads(shown.stdout).get("scripts", {}) if shown.returncode == 0 else {}
        except (ValueError, AttributeError):
            return None
        script = scripts.get(name) if isinstance(scripts, dict) else None
        return script if isinstance(script, str) else None
    return None
