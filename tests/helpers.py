"""Build real git repositories and authored tasks for the tests (no mocks)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.compile.compiler import compile_task
from runner.compile.taskdir import AuthoredTask
from runner.model.settings import CompileOptions

GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@localhost",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    return result.stdout.strip()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(
    port: int, process: subprocess.Popen[Any], *, what: str, seconds: float = 20
) -> None:
    """Until a server the test started answers on 127.0.0.1:port (it must not exit first)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{what} did not start on port {port}") from None
            time.sleep(0.1)


@contextlib.contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """A real git server (`git daemon`) exporting the repositories below `base` on a
    loopback port; stopped by its pid."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            "--reuseaddr",
            f"--base-path={base}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process, what="git daemon")
        yield f"git://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def write_files(root: Path, files: dict[str, str | bytes | None]) -> None:
    for relative, content in files.items():
        path = root / relative
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        if relative.endswith(".sh"):
            path.chmod(0o755)


def make_repo(root: Path, files: dict[str, str | bytes | None]) -> tuple[Path, str]:
    root.mkdir(parents=True)
    git(root, "-c", "init.defaultBranch=main", "init", "-q")
    write_files(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root, git(root, "rev-parse", "HEAD")


def diff_of(repo: Path, changes: dict[str, str | bytes | None]) -> bytes:
    """The binary git patch that `changes` make to the repo's HEAD; the tree is reset after."""
    write_files(repo, changes)
    git(repo, "add", "-A")
    patch = subprocess.run(
        ["git", "diff", "--cached", "--binary"],
        cwd=repo,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    ).stdout
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    return patch


def definition(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schemaVersion": 1,
        "difficulty": "easy",
        "taskId": "demo-task",
        "repo": "example/demo",
        "baseCommit": "0" * 40,
        "workdir": ".",
        "setupCommand": "true",
        "testCommand": "bash tests/run.sh {tests}",
        "failToPass": ["tests/test_new.sh"],
        "passToPass": ["tests/test_old.sh"],
        "testPaths": ["tests/test_new.sh"],
        "toolchains": ["uv"],
        "sourcePr": 7,
        "sourceUrl": "https://example.invalid/demo/pull/7",
        "prompt": "Add the feature.",
        "timeouts": {"setupSeconds": 120, "agentSeconds": 120, "testsSeconds": 60},
        # Room for the largest toolchain image the tests build (go + bun + uv: 1.25 GB):
        # storage_mb bounds the whole filesystem, image included.
        "resources": {"cpus": 1, "memoryMb": 512, "storageMb": 4096},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def write_task(
    directory: Path,
    definition_doc: dict[str, Any],
    *,
    test_patch: bytes,
    gold_patch: bytes,
    instruction: str | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "definition.json").write_text(json.dumps(definition_doc, indent=2) + "\n")
    (directory / "test.patch").write_bytes(test_patch)
    (directory / "gold.patch").write_bytes(gold_patch)
    if instruction is not None:
        (directory / "instruction.md").write_text(instruction)
    return directory


def files_task(
    tmp: Path,
    name: str,
    *,
    base: dict[str, str | bytes | None],
    tests: dict[str, str | bytes | None],
    gold: dict[str, str | bytes | None],
    **overrides: Any,
) -> Path:
    """A task directory: a repository of `base` files, the held-out `tests` and the `gold`
    change as patches against it, and a definition with `overrides`."""
    repo, commit = make_repo(tmp / f"{name}-repo", base)
    doc = definition(taskId=name, baseCommit=commit, repo=str(repo), **overrides)
    return write_task(
        tmp / name, doc, test_patch=diff_of(repo, tests), gold_patch=diff_of(repo, gold)
    )


RUNNER_SH = """#!/usr/bin/env bash
set -uo pipefail
failed=0
for test in "$@"; do
  if bash "$test"; then echo "PASS $test"; else echo "FAIL $test"; failed=$((failed + 1)); fi
done
[ "$failed" -eq 0 ]
"""

LIB_BASE = """#!/usr/bin/env bash
greet() { echo "hello $1"; }
"""

# 22 changed lines: enough for an easy task.
LIB_GOLD = (
    LIB_BASE
    + "".join(f'shout_{i}() {{ echo "HELLO $1" | tr a-z A-Z; }}\n' for i in range(21))
    + 'shout() { shout_0 "$@"; }\n'
)


@dataclass
class BashTask:
    """A tiny bash-only task: tests/run.sh runs test scripts; gold adds `shout`."""

    directory: Path
    repo: Path
    commit: str


def bash_task(
    tmp: Path,
    *,
    name: str = "demo-task",
    new_test: str | None = None,
    gold: dict[str, str | bytes | None] | None = None,
    extra_base: dict[str, str | bytes | None] | None = None,
    **overrides: Any,
) -> BashTask:
    repo, commit = make_repo(
        tmp / f"{name}-repo",
        {
            "lib.sh": LIB_BASE,
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
            **(extra_base or {}),
        },
    )
    test_body = new_test or '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ]\n'
    test_patch = diff_of(repo, {"tests/test_new.sh": test_body})
    gold_patch = diff_of(repo, gold or {"lib.sh": LIB_GOLD})
    doc = definition(taskId=name, baseCommit=commit, repo=str(repo), **overrides)
    directory = write_task(tmp / name, doc, test_patch=test_patch, gold_patch=gold_patch)
    return BashTask(directory=directory, repo=repo, commit=commit)


def compiled(
    task: AuthoredTask, *, repo: str | None, out: Path, options: CompileOptions | None = None
) -> Path:
    """compile_task, returning the bundle directory."""
    return compile_task(task, repo=repo, out=out, options=options or CompileOptions()).bundle


def run_cli_captured(*args: str) -> tuple[int, str, str]:
    """The real entry point (every outcome mapped to an exit code), its streams captured:
    (exit code, stdout, stderr)."""
    import sys

    from click.testing import CliRunner

    from runner.cli.main import run_cli

    with CliRunner().isolation() as (out, err, _):
        code = run_cli(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode()
