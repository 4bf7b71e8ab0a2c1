"""One exceptions module: every error the runner raises carries its exit code.

Only the CLI turns these into output; everything below it raises.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    ACCEPTED = 0
    REJECTED = 1
    INVALID = 2
    INFRASTRUCTURE = 3


class RunnerError(Exception):
    """Base class. `path` and `field` name what was wrong, when known."""

    exit_code: ExitCode = ExitCode.INFRASTRUCTURE

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.field = field

    def one_line(self) -> str:
        where = self.path or ""
        if self.field:
            where = f"{where}: field `{self.field}`" if where else f"field `{self.field}`"
        text = self.message.replace("\n", " ")
        return f"{where}: {text}" if where else text


class InvalidTaskError(RunnerError):
    """The task (definition, patches, instruction) or the command line is unusable."""

    exit_code = ExitCode.INVALID


class UsageError(RunnerError):
    exit_code = ExitCode.INVALID


class RepositoryError(InvalidTaskError):
    """The repository or base commit named by the task cannot be used."""


class InfrastructureError(RunnerError):
    """Docker, the network or the disk failed; the task is not at fault."""

    exit_code = ExitCode.INFRASTRUCTURE


class ArtifactError(InfrastructureError):
    """A toolchain artifact could not be fetched or did not match its pinned digest."""
