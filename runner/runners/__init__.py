"""The test runners the verifier knows, one room each (pure): the registry the rest of the
pipeline asks. Nothing outside a room names its runner; a room is one module here, one folder
of recorder hooks (dockerfiles/verifier/hooks/<name>/), one entry of the vocabulary
(dockerfiles/verifier/vocabulary.json) and one real-shaped task (tests/realistic/). The
vocabulary's runners are the registry: each names its room (`runner.runners.<name>`, `-` as
`_`), in the order a command's runners are listed (evidence, census). Adding a runner:
docs/development.md, "Adding a test runner".

A runner the command reaches through a package script (`npm test`) is found by the evidence it
leaves instead; a command no room starts is judged by exit codes (the fallback, `exit_code`).
"""

from __future__ import annotations

import importlib
import posixpath
from collections.abc import Mapping

from runner.model.shell import words
from runner.model.task import TESTS_PLACEHOLDER
from runner.runners.exit_code import FALLBACK
from runner.runners.kit import Exploit, TaskFacts
from runner.runners.room import Proposal, Room
from runner.runners.vocabulary import VOCABULARY


def _room(name: str) -> Room:
    """The room of the vocabulary's runner `name`: the module-level ROOM of its module."""
    module = importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
    room = getattr(module, "ROOM", None)
    if not isinstance(room, Room) or room.name != name:
        raise RuntimeError(f"{module.__name__} has no ROOM named {name!r}")
    return room


# In the order a command's runners are listed (evidence, census): the vocabulary's.
ROOMS: tuple[Room, ...] = tuple(_room(name) for name in VOCABULARY.runners)
_BY_NAME = {room.name: room for room in ROOMS}
KNOWN_RUNNERS = tuple(_BY_NAME)
# The runners whose per-test evidence the project's hack corpus proves (Room.proven).
PROVEN_RUNNERS = tuple(room.name for room in ROOMS if room.proven)


def room_of(runner: str | None) -> Room:
    """A runner's room; the exit-code fallback for None or a name no room has."""
    return _BY_NAME.get(runner or "", FALLBACK)


def command_names(command: str) -> list[str]:
    """The base names of the command's words, `{tests}` left out."""
    return [posixpath.basename(w) for w in words(command) if TESTS_PLACEHOLDER not in w]


def expected_runners(command: str) -> list[str]:
    """The known runners the command starts, in the order of ROOMS."""
    names = command_names(command)
    return [room.name for room in ROOMS if any(room.starts(names, i) for i in range(len(names)))]


def selector_path(runner: str | None, selector: str) -> str | None:
    """The path a selector names for `runner` (None: a custom command), relative to the
    workdir, or None when it names none."""
    return room_of(runner).selector_path(selector)


def selector_names(runner: str | None, selector: str) -> list[str]:
    return room_of(runner).selector_names(selector)


def selector_paths(
    command: str, workdir: str, selectors: list[str]
) -> list[tuple[int, str, list[str]]]:
    """(index, repository path, names in that file) of each path-like selector of one list."""
    rooms = [_BY_NAME[name] for name in expected_runners(command)] or [FALLBACK]
    found: list[tuple[int, str, list[str]]] = []
    for index, selector in enumerate(selectors):
        for room in rooms:
            path = room.selector_path(selector)
            if path is None or posixpath.isabs(path):
                continue
            joined = posixpath.normpath(posixpath.join(workdir or ".", path))
            if joined != ".." and not joined.startswith("../"):
                found.append((index, joined, room.selector_names(selector)))
                break
    return found


def propose(files: Mapping[str, bytes]) -> Proposal | None:
    """init: the first proposal of the rooms in their init order, the fallback's last."""
    for room in sorted((*ROOMS, FALLBACK), key=lambda r: r.init_order):
        if (proposal := room.propose(files)) is not None:
            return proposal
    return None


def runner_exploits(facts: TaskFacts) -> list[Exploit]:
    """The exploits of the rooms whose runner the command starts (or whose toolchain the task
    has), in the order of ROOMS."""
    started = set(expected_runners(facts.test_command or ""))
    toolchains = set(facts.toolchains)
    return [
        exploit
        for room in ROOMS
        if room.name in started or room.exploit_toolchains & toolchains
        for exploit in room.exploits(facts)
    ]


def line_outcomes(line: str, *, partial: bool = False) -> list[str]:
    """What one line of a stage's output reports of tests' ends, by the first room that reads
    it (for the progress display only)."""
    for room in (*ROOMS, FALLBACK):
        found = room.partial_outcomes(line) if partial else room.line_outcomes(line)
        if found:
            return found
    return []


__all__ = [
    "FALLBACK",
    "KNOWN_RUNNERS",
    "PROVEN_RUNNERS",
    "ROOMS",
    "Proposal",
    "Room",
    "command_names",
    "expected_runners",
    "line_outcomes",
    "propose",
    "room_of",
    "runner_exploits",
    "selector_names",
    "selector_path",
    "selector_paths",
]
