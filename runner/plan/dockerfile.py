"""A generated Dockerfile cut where the task's own code runs (pure).

`docker build` (the classic builder of engine 20.10) gives a step's container only memory, swap
and a CPU set: a task's setup could start any number of processes and fill any amount of disk
(measured: 605 processes under `pidsLimit 64`, 2.5 GB under `storageMb 1024`). So the runner
builds a task image in pieces: the instructions between two task steps as ordinary builds (their
layer cache intact), and each task step (`RUN` of the setup script, the root setup, the
dependency-setup pass, the verifier's image preparation, which runs the task's interpreters) in
a container under every limit of the task, committed as the next piece's base.

Only the Dockerfiles this runner renders are read: one build stage, shell- or JSON-form RUN,
backslash continuations, `#` comment lines.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from runner.plan.inimage import LIMITED_BUILD_STEPS

# The proxy variables every RUN sees without an ARG (Docker's predefined build arguments).
PREDEFINED_ARGS = frozenset(
    name
    for base in ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
    for name in (base, base.lower())
)

_KEYWORD = re.compile(r"^\s*([A-Za-z]+)(?:\s+|$)")


# Changes when what a task step's image stands for changes (its cache key and the image tags).
STEP_RECIPE = "limited-1"


class DockerfileError(ValueError):
    """The text is not a Dockerfile of the shape this runner renders."""


@dataclass(frozen=True)
class Instruction:
    step: int  # 1-based, as the builder numbers it
    keyword: str  # upper case
    text: str  # as the builder shows it: continuations joined (backslash and line break gone)
    raw: str  # as written: its lines, continuations included, comment lines left out

    @property
    def rest(self) -> str:
        """What follows the keyword."""
        return self.text[len(self.keyword) :].lstrip()


@dataclass(frozen=True)
class Chunk:
    """Instructions built by the engine's builder, FROM the previous piece's image (the first
    chunk: from the Dockerfile's own FROM). `args` are the ARG instructions in scope before it,
    declared again at its top."""

    instructions: tuple[Instruction, ...]
    args: tuple[str, ...]
    first: bool

    def dockerfile(self, parent: str | None) -> str:
        """Its Dockerfile: the first chunk as written, any other FROM `parent`."""
        lines = [] if self.first else [f"FROM {parent}", *self.args]
        return "\n".join([*lines, *(i.raw for i in self.instructions)]) + "\n"

    @property
    def header_steps(self) -> int:
        """Steps the builder counts before this chunk's own instructions."""
        return 0 if self.first else 1 + len(self.args)

    def step_of(self, builder_step: int) -> Instruction | None:
        """The instruction the builder's step number (in this chunk's Dockerfile) stands for;
        None for the FROM and ARG lines the runner put at its top."""
        index = builder_step - self.header_steps - 1
        return self.instructions[index] if 0 <= index < len(self.instructions) else None

    def sources(self) -> list[str] | None:
        """The build-context paths its COPY and ADD instructions read; None when one of them
        names a pattern or a URL (then the whole context goes)."""
        found: list[str] = []
        for instruction in self.instructions:
            if instruction.keyword not in ("COPY", "ADD"):
                continue
            words = _words(instruction.rest)
            words = [w for w in words if not w.startswith("--")]
            if len(words) < 2:
                raise DockerfileError(
                    f"step {instruction.step}: {instruction.text!r} has no source"
                )
            for source in words[:-1]:
                if any(c in source for c in "*?[") or "://" in source:
                    return None
                found.append(source.rstrip("/") or ".")
        return found


@dataclass(frozen=True)
class LimitedRun:
    """A RUN of the task's code: run in a container under the task's limits, then committed."""

    instruction: Instruction
    argv: tuple[str, ...]
    # The ARGs in scope, (name, default or None): the build's value of each, or its default,
    # is in the command's environment, as the builder gives it to a RUN.
    args: tuple[tuple[str, str | None], ...]


Piece = Chunk | LimitedRun


@dataclass(frozen=True)
class SteppedDockerfile:
    pieces: tuple[Piece, ...]
    total_steps: int

    @property
    def limited(self) -> bool:
        return any(isinstance(p, LimitedRun) for p in self.pieces)


def instructions(text: str) -> list[Instruction]:
    """The instructions of `text`, in order."""
    found: list[Instruction] = []
    pending: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue  # a comment, also between continuation lines (the builder drops those)
        if not pending and not line.strip():
            continue
        pending.append(line)
        if line.rstrip().endswith("\\"):
            continue
        raw = "\n".join(pending)
        logical = "".join(part.rstrip()[:-1] for part in pending[:-1]) + pending[-1]
        pending = []
        match = _KEYWORD.match(logical)
        if match is None:
            raise DockerfileError(f"{logical!r} does not start with an instruction")
        found.append(Instruction(len(found) + 1, match.group(1).upper(), logical.strip(), raw))
    if pending:
        raise DockerfileError("the last instruction ends with a continuation")
    return found


def split(text: str, markers: tuple[str, ...] = LIMITED_BUILD_STEPS) -> SteppedDockerfile:
    """Cut `text` before and after every RUN naming one of `markers`."""
    parsed = instructions(text)
    froms = [i for i in parsed if i.keyword == "FROM"]
    if len(froms) != 1:
        raise DockerfileError(f"expected one build stage, found {len(froms)} FROM instructions")
    pieces: list[Piece] = []
    current: list[Instruction] = []
    in_scope: list[str] = []  # ARG instructions after FROM
    current_args: tuple[str, ...] = ()
    seen_from = False
    for instruction in parsed:
        if instruction.keyword == "FROM":
            seen_from = True
        if instruction.keyword == "RUN" and any(m in instruction.text for m in markers):
            if current:
                pieces.append(Chunk(tuple(current), current_args, first=not pieces))
                current = []
            if not pieces:
                raise DockerfileError("a task step before the build stage's FROM")
            pieces.append(
                LimitedRun(instruction, _run_argv(instruction), tuple(_arg(a) for a in in_scope))
            )
            current_args = tuple(in_scope)
            continue
        if instruction.keyword == "ARG" and seen_from:
            in_scope.append(instruction.text)
        current.append(instruction)
    if current:
        pieces.append(Chunk(tuple(current), current_args, first=not pieces))
    return SteppedDockerfile(tuple(pieces), len(parsed))


def _run_argv(instruction: Instruction) -> tuple[str, ...]:
    command = instruction.rest.strip()
    if command.startswith("["):
        try:
            argv = json.loads(command)
        except ValueError:
            argv = None
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            return tuple(argv)
    return ("/bin/sh", "-c", command)


def _arg(instruction: str) -> tuple[str, str | None]:
    """An ARG instruction's name and default (None without one)."""
    words = _words(instruction[3:])
    if len(words) != 1:
        raise DockerfileError(f"{instruction!r}: one ARG per instruction is what this runner reads")
    name, equals, default = words[0].partition("=")
    return name, default if equals else None


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, posix=True)
    except ValueError as exc:
        raise DockerfileError(f"{text!r}: {exc}") from None
