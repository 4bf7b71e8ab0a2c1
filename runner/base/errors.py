"""One exceptions module: every error the runner raises carries its exit code.

Only the CLI turns these into output; everything below it raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    ACCEPTED = 0
    REJECTED = 1
    INVALID = 2
    INFRASTRUCTURE = 3
    INTERRUPTED = 130


def printable(text: str) -> str:
    """`text` with control characters (and undecodable bytes) escaped, so an error about a
    hostile name stays one line and cannot drive a terminal."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or char == " ":
            out.append(char)
        else:
            out.append(char.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong with the input: which file, which field (when known), what."""

    file: str | None
    field: str | None
    message: str

    def one_line(self) -> str:
        where = printable(self.file or "")
        if self.field:
            field = printable(self.field)
            where = f"{where}: field `{field}`" if where else f"field `{field}`"
        text = printable(" ".join(self.message.split()))
        return f"{where}: {text}" if where else text

    def as_json(self) -> dict[str, str | None]:
        return {"file": self.file, "field": self.field, "message": self.message}


class RunnerError(Exception):
    """Base class. `path` and `field` name what was wrong, when known."""

    exit_code: ExitCode = ExitCode.INFRASTRUCTURE

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.field = field

    @property
    def problems(self) -> tuple[Problem, ...]:
        return (Problem(file=self.path, field=self.field, message=self.message),)

    def one_line(self) -> str:
        return self.problems[0].one_line()


class InvalidTaskError(RunnerError):
    """The task (definition, patches, instruction) or the command line is unusable."""

    exit_code = ExitCode.INVALID


class InvalidInputError(InvalidTaskError):
    """Several problems at once (every schema error of a definition, say)."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        if not problems:
            raise ValueError("InvalidInputError needs at least one problem")
        # One problem found twice (a path named by both a section's `diff --git` line and its
        # `+++` line, say) is said once.
        unique = tuple(dict.fromkeys(problems))
        first = unique[0]
        super().__init__(first.message, path=first.file, field=first.field)
        self._problems = unique

    @property
    def problems(self) -> tuple[Problem, ...]:
        return self._problems

    def one_line(self) -> str:
        more = len(self._problems) - 1
        suffix = f" (and {more} more problem{'s' if more != 1 else ''})" if more else ""
        return self._problems[0].one_line() + suffix


class TaskFailedError(RunnerError):
    """Found while running: the task is at fault (a red stage), e.g. a service of its contract
    that never gets healthy, or an image larger than its storage limit."""

    exit_code = ExitCode.REJECTED


class StorageRefusedError(TaskFailedError):
    """The engine's quota refused a container: its image alone holds the task's storage_mb."""

    def __init__(self, image_mb: int, limit_mb: int) -> None:
        super().__init__(
            f"storage limit exceeded: the image alone holds {image_mb} MB of the {limit_mb} MB "
            "of storage_mb, and the engine's quota refused the container"
        )
        self.image_mb = image_mb
        self.limit_mb = limit_mb


class UsageError(RunnerError):
    exit_code = ExitCode.INVALID


class RepositoryError(InvalidTaskError):
    """The repository or base commit named by the task cannot be used."""


class InfrastructureError(RunnerError):
    """Docker, the network or the disk failed; the task is not at fault."""

    exit_code = ExitCode.INFRASTRUCTURE


class ArtifactError(InfrastructureError):
    """A toolchain artifact could not be fetched or did not match its pinned digest."""


class EngineError(InfrastructureError):
    """The Docker engine refused or failed a request (wrapped docker.errors.*)."""


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM reached the runner. A BaseException like KeyboardInterrupt, so no
    `except Exception` on the way up swallows it."""

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
