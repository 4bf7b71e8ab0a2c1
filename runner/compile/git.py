"""How the runner runs git (a side effect): a fixed configuration on every command line (no
system or global file, every command-running setting off), no inherited `GIT_*` variable, and
never inside a repository the runner did not make (see runner.compile.repository)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from runner.base.errors import InfrastructureError, RepositoryError
from runner.model.settings import cache_root

GIT_TIMEOUT_SECONDS = 600

# The user's own environment may choose how to reach a remote (an ssh command, a CA bundle);
# every other GIT_* variable (GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_INDEX_FILE, ...) would change
# what a call reads or runs, so none is inherited.
_PASSED_GIT_VARIABLES = frozenset(
    {"GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH"}
)
# Legacy shapes real histories carry (fsck warns; `transfer.fsckObjects` would refuse them).
# Errors that matter (a `.git` entry in a tree, a broken link) stay errors.
_FSCK_IGNORED = (
    "badDate",
    "badTimezone",
    "missingSpaceBeforeDate",
    "missingSpaceBeforeEmail",
    "zeroPaddedDate",
    "zeroPaddedFilemode",
    "badFilemode",
    "emptyName",
    "fullPathname",
    "largePathname",
)
# Given on every call's command line, where they outrank any file: nothing git reads from a
# repository or a configuration file can name a command for it to run.
FIXED_CONFIG: tuple[str, ...] = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.attributesFile=/dev/null",
    "core.pager=cat",
    "core.editor=false",
    "core.askPass=",
    "core.gitProxy=",
    "core.alternateRefsCommand=",
    "core.autocrlf=false",
    "core.symlinks=true",
    "credential.helper=",
    "diff.external=",
    "gc.auto=0",
    "maintenance.auto=false",
    "fetch.writeCommitGraph=false",
    "fetch.recurseSubmodules=false",
    "submodule.recurse=false",
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.http.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "protocol.file.allow=always",
    "transfer.fsckObjects=true",
    *(f"fetch.fsck.{name}=ignore" for name in _FSCK_IGNORED),
    "tar.umask=0022",
)
# Written into every repository the runner makes (its store, a lending repository): upload-pack
# runs with a lending repository's own file, never the command line above.
REPOSITORY_CONFIG = """\
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = true
\thooksPath = /dev/null
\tfsmonitor = false
[gc]
\tauto = 0
[maintenance]
\tauto = false
[uploadpack]
\tallowAnySHA1InWant = true
"""
# What shapes an archive besides the commit: bump when the archive command changes.
ARCHIVE_SETTINGS = "git-archive tar umask=0022 gzip level=6 mtime=0 v2"


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GIT_") or key in _PASSED_GIT_VARIABLES
    }
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_SYSTEM": os.devnull,
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_PAGER": "cat",
            "GIT_EDITOR": "false",
            "GIT_ASKPASS": "",
            "GIT_PROTOCOL_FROM_USER": "0",
            **(extra or {}),
        }
    )
    return env


def git_command(args: Sequence[str], *, git_dir: Path | None = None) -> list[str]:
    fixed = [part for setting in FIXED_CONFIG for part in ("-c", setting)]
    where = ["--git-dir", str(git_dir)] if git_dir is not None else []
    return ["git", *fixed, *where, *args]


def run_git(
    args: Sequence[str],
    *,
    git_dir: Path | None = None,
    cwd: Path | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
) -> subprocess.CompletedProcess[bytes]:
    try:
        result = subprocess.run(
            git_command(args, git_dir=git_dir),
            # Never inside a repository the runner did not make (git would discover it).
            cwd=cwd if cwd is not None else git_root(),
            capture_output=True,
            check=False,
            input=stdin,
            timeout=timeout,
            env=git_environment(env),
        )
    except FileNotFoundError:
        raise InfrastructureError("git is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise InfrastructureError(f"git {' '.join(args[:2])} took longer than {timeout}s") from None
    if check and result.returncode != 0:
        raise RepositoryError(f"git {' '.join(args[:2])} failed: {last_error(result)}")
    return result


class OutputTooLargeError(RepositoryError):
    """A git command printed more than its caller's limit (and was stopped there)."""


def git_output_bounded(
    args: Sequence[str], *, git_dir: Path, limit: int, timeout: float = GIT_TIMEOUT_SECONDS
) -> bytes:
    """What a git command prints, read a chunk at a time and stopped past `limit` bytes
    (OutputTooLargeError): a diff of a huge change is never held whole before it is refused
    (a 500 MB change took 4.8 GB and 143 s to be refused at the patch limit). Like run_git,
    a command still running after `timeout` seconds is killed, printing or not."""
    what = f"git {' '.join(args[:2])}"
    with tempfile.TemporaryFile() as errors:
        try:
            process = subprocess.Popen(
                git_command(args, git_dir=git_dir),
                cwd=git_root(),
                stdout=subprocess.PIPE,
                stderr=errors,
                stdin=subprocess.DEVNULL,
                env=git_environment(None),
            )
        except FileNotFoundError:
            raise InfrastructureError("git is not installed on this machine") from None
        assert process.stdout is not None
        # A kill ends the read below, whether git prints or waits.
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            process.kill()

        deadline = threading.Timer(timeout, expire)
        deadline.start()
        chunks: list[bytes] = []
        size = 0
        try:
            with process:
                while chunk := process.stdout.read(1 << 20):
                    size += len(chunk)
                    if size > limit:
                        process.kill()
                        raise OutputTooLargeError(f"{what} printed over {limit} bytes")
                    chunks.append(chunk)
                code = process.wait()
        finally:
            deadline.cancel()
        if expired.is_set():
            raise InfrastructureError(f"{what} took longer than {timeout}s")
        if code != 0:
            errors.seek(0)
            failed = subprocess.CompletedProcess(list(args), code, b"", errors.read(64 * 1024))
            raise RepositoryError(f"{what} failed: {last_error(failed)}")
    return b"".join(chunks)


def last_error(result: subprocess.CompletedProcess[bytes]) -> str:
    lines = [ln.strip() for ln in (result.stderr or b"").decode(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else f"exit {result.returncode}"


@cache
def git_version() -> str:
    return run_git(["--version"]).stdout.decode().strip()


def git_root() -> Path:
    root = cache_root() / "git"
    root.mkdir(parents=True, exist_ok=True)
    return root
