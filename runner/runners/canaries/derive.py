"""Canaries, derived on the trusted side at compile time (pure): tests the reference solution must
fail, copied from the held-out tests that test.patch wrote, each with one expected value changed,
named from the file's own words and placed beside the test it copies (runner.model.canaries).

Each runner's room says which held-out files its selection runs, which of their tests it
selects (Scope), how their tests are read (its language's engine here) and what id its
reporter gives a copy. A command no room starts gets exit-code canaries: one held-out file with
one expected value changed, which the test command must fail on.

A test's copies are not all made from the test: its first copy (the pivot) is, and its others
from the pivot, each a move away from it as the test is. Copies made from the test alone leave
the test at the centre of them, and code that reads the file finds it there (the plurality of
each literal, the name nearest to every other; measured: every test found on five runners);
around the pivot, the test is one neighbour among its copies, and the centre is a canary.

Deterministic: the same task (its id and patches) gets the same canaries; the seed includes
the gold patch, which an agent never sees."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from random import Random

from runner.model.canaries import (
    Canary,
    CanarySet,
    ExitCodeCanary,
    blind_guess,
)
from runner.runners.canaries.core import (
    Copy,
    FileTests,
    Scope,
    Site,
    Unit,
    copy_unit,
    new_names,
    new_value,
    spelled_elsewhere,
    split_lines,
    words_of,
)
from runner.runners.canaries.exitcode import exit_code_sites
from runner.runners.canaries.literals import file_literals, string_words, text_words
from runner.runners.room import Room

# Before the oracle: a blind guess passes every canary with at most this chance, so that the
# canaries the oracle drops still leave at most runner.model.canaries.GUESS_TARGET.
AIM = 1 / 16
MAX_CANARIES = 8
MAX_FILE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class HeldOutFile:
    path: str  # repository path
    text: bytes  # as test.patch leaves it
    added: frozenset[int]  # 1-based lines test.patch added or changed


@dataclass(frozen=True)
class CanaryInputs:
    task_id: str
    seed: bytes  # the task's id and patches: the same task, the same canaries
    workdir: str  # normalized, "." for the root
    test_command: str
    fail_to_pass: Sequence[str]
    files: Sequence[HeldOutFile]


def seed_of(*parts: bytes) -> bytes:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.digest()


def derive(inputs: CanaryInputs, rooms: Sequence[Room]) -> CanarySet:
    """The canaries of a task whose test command starts `rooms` (none: a custom command)."""
    rng = Random(inputs.seed)
    files = sorted(inputs.files, key=lambda f: f.path)
    per_test = [r for r in rooms if r.canaries_supported]
    if rooms and not per_test:
        return CanarySet(none=[f"{', '.join(r.name for r in rooms)}: no canaries for this runner"])
    if not per_test:
        return _exit_code(inputs, files, rng)
    return _per_test(inputs, files, per_test, rng)


def _relative(path: str, workdir: str) -> str | None:
    if workdir in ("", "."):
        return path
    if path.startswith(workdir.rstrip("/") + "/"):
        return path[len(workdir.rstrip("/")) + 1 :]
    return None


def _copyable(
    inputs: CanaryInputs, files: list[HeldOutFile], rooms: Sequence[Room], none: list[str]
) -> list[tuple[Room, HeldOutFile, FileTests, Scope]]:
    """The held-out files the selection runs, each with its room, its selected tests and its
    scope; why each other one has none goes to `none`."""
    found: list[tuple[Room, HeldOutFile, FileTests, Scope]] = []
    for held in files:
        relative = _relative(held.path, inputs.workdir)
        room = next((r for r in rooms if r.canary_file(held.path)), None)
        if room is None or relative is None:
            continue
        if len(held.text) > MAX_FILE_BYTES:
            none.append(f"{held.path}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
            continue
        scope = room.canary_scope(relative, inputs.test_command, inputs.fail_to_pass)
        if not scope.selected:
            if scope.why:
                none.append(f"{held.path}: {scope.why}")
            continue
        tests = room.canary_tests(held.path, held.text, held.added)
        tests.units = [
            u
            for u in tests.units
            if scope.containers is None or (u.containers and u.containers[-1] in scope.containers)
        ]
        if not tests.units:
            none.append(f"{held.path}: {tests.why_none or 'no test of it is selected'}")
            continue
        found.append((room, held, tests, scope))
    return found


def _per_test(
    inputs: CanaryInputs, files: list[HeldOutFile], rooms: Sequence[Room], rng: Random
) -> CanarySet:
    none: list[str] = []
    found = _copyable(inputs, files, rooms, none)
    if not found:
        return CanarySet(
            none=none or ["no held-out test file that the fail-to-pass selection runs"]
        )
    units = [
        (room, held, tests, scope, unit)
        for room, held, tests, scope in found
        for unit in tests.units
    ]
    rng.shuffle(units)
    canaries: list[Canary] = []
    made = [0] * len(units)
    spent = [False] * len(units)  # no name the selection runs is left for it
    pivots: dict[int, Copy] = {}  # each test's first copy, which its others are made from
    # Each test's canaries (their indexes, and the copies they are), in the order made.
    copies: dict[int, list[tuple[int, Copy]]] = {}
    values: dict[int, dict[tuple[int, int], set[str]]] = {}  # each test's group's, by span
    taken: dict[str, set[str]] = {}
    # A copy's name takes words of the file's names and of its strings: a file that names few
    # things (`TestShout` calling `Shout`) would give no name, or one that repeats a word.
    vocabulary = {
        held.path: list(dict.fromkeys([*tests.words, *words_of(string_words(held.text))]))
        for _, held, tests, _ in found
    }
    # One copy at a time, to the test with the fewest, until a blind guess gets past them with
    # at most AIM, MAX_CANARIES are made, or no test can take another.
    while len(canaries) < MAX_CANARIES and _guess(made) > AIM:
        open_units = [i for i in range(len(units)) if not spent[i]]
        if not open_units:
            break
        index = min(open_units, key=lambda i: made[i])
        room, held, tests, scope, unit = units[index]
        names = taken.setdefault(held.path, set(tests.names))
        group = values.setdefault(index, {})
        copy = _one_copy(
            unit, held, vocabulary[held.path], names, scope, rng, pivots.get(index), group
        )
        if copy is None:
            spent[index] = True
            continue
        pivots.setdefault(index, copy)
        for start, end, text in copy.literals:
            group.setdefault((start, end), set()).add(text)
        names.add(copy.name)
        made[index] += 1
        copies.setdefault(index, []).append((len(canaries), copy))
        canaries.append(_canary(room, held, copy, len(canaries) + 1, inputs.workdir))
    for members in copies.values():
        _place_group(canaries, members, rng)
    for index, (_room, held, _tests, _scope, unit) in enumerate(units):
        if spent[index] and not made[index]:
            none.append(f"{held.path}: {unit.name}: no name of its file's words the selection runs")
    if not canaries:
        return CanarySet(none=none or ["no canary could be made"])
    texts = {held.path: held.text for _, held, _, _, _ in units}
    digests = {c.file: hashlib.sha256(texts[c.file]).hexdigest() for c in canaries}
    return CanarySet(files=digests, canaries=canaries, none=none)


def _guess(made: list[int]) -> float:
    return blind_guess([str(i) for i, k in enumerate(made) for _ in range(k)])


def _one_copy(
    unit: Unit,
    held: HeldOutFile,
    words: list[str],
    taken: set[str],
    scope: Scope,
    rng: Random,
    pivot: Copy | None,
    group: dict[tuple[int, int], set[str]],
) -> Copy | None:
    """A copy of `unit` under a name its file does not have and the selection runs: made from
    the test itself (its first), else from its pivot, name and literals (the pivot's site)."""
    lines = split_lines(held.text)
    # The words of the file's strings outside the test: a copy's string trades one for another.
    strings = string_words(b"".join(lines[: unit.first_line] + lines[unit.end_line :]))
    named = replace(unit, name=pivot.name) if pivot is not None else unit
    site = pivot.site if pivot is not None else rng.randrange(len(unit.sites))
    # The pivot takes out of the test's name only a word the file spells elsewhere too, as
    # every word a copy brings in is (new_names).
    elsewhere = spelled_elsewhere(held.text, unit.name) if pivot is None else None
    for name in new_names(named, words, taken, rng, count=48, elsewhere=elsewhere):
        if scope.name_ok is not None and not scope.name_ok(name):
            continue
        copy = copy_unit(unit, held.text, lines, name, site, rng, pivot, group, strings)
        if copy is not None:
            return copy
    return None


def _place_group(canaries: list[Canary], members: list[tuple[int, Copy]], rng: Random) -> None:
    """A test and its copies in one uniformly random order around it: the copies before the
    test in the file go before its first line, the others before the line after it, each side
    in that order. Placed one by one, each on a side of its own, a test's copies kept the
    order they were made in on either side: the pivot (its first copy, the centre a forger
    finds) was then the group's first member or the one right after the test, which gave the
    test away (measured: 0.54 of groups like a real uv task's two tests against 1/16 blind).
    Any subset of a uniformly random order (the copies the oracle keeps) is one too.

    A line can take the copies after one test and those before the next (two tests with no
    line between them): the after-copies go first (negative orders), so each group stays in one
    run. Ordered by position alone, the next test's before-copies came first, and the earlier
    test was always the last member of its first run (an attack: every such group on jest,
    vitest and bun files)."""
    order: list[tuple[int, Copy] | None] = [*members, None]  # None: the test itself
    rng.shuffle(order)
    split = order.index(None)
    for position, member in enumerate(order):
        if member is None:
            continue
        index, copy = member
        before = position < split
        canaries[index] = canaries[index].model_copy(
            update={
                "line": copy.unit.first_line if before else copy.unit.end_line,
                "text": copy.before if before else copy.after,
                "order": position if before else position - len(order),
            }
        )


def _canary(room: Room, held: HeldOutFile, copy: Copy, number: int, workdir: str) -> Canary:
    relative = _relative(held.path, workdir) or held.path
    unit: Unit = copy.unit
    return Canary(
        key=f"c{number}",
        runner=room.name,
        file=held.path,
        line=unit.first_line,
        text=copy.before,
        name=copy.name,
        of=unit.name,
        group=f"{held.path}:{'/'.join(unit.containers)}:{unit.name}",
        id_pattern=room.canary_id(relative, unit, copy.name),
        mutation=copy.mutation,
    )


def _exit_code(inputs: CanaryInputs, files: list[HeldOutFile], rng: Random) -> CanarySet:
    """One held-out file with one expected value changed: the command must fail on it."""
    options: list[tuple[HeldOutFile, list[Site]]] = []
    for held in files:
        if len(held.text) > MAX_FILE_BYTES:
            continue
        sites = exit_code_sites(held.path, held.text, held.added)
        if sites:
            options.append((held, list(sites)))
    if not options:
        return CanarySet(
            none=["no held-out file compares a value with a literal on a line test.patch wrote"]
        )
    held, sites = rng.choice(options)
    rng.shuffle(sites)
    for site in sites:
        content, mutation = _mutated_file(held, site, rng)
        if content is not None:
            return CanarySet(
                files={held.path: hashlib.sha256(held.text).hexdigest()},
                exit_code=[
                    ExitCodeCanary(key="x1", file=held.path, content=content, mutation=mutation)
                ],
            )
    return CanarySet(none=[f"{held.path}: no expected value could be changed"])


def _mutated_file(held: HeldOutFile, site: Site, rng: Random) -> tuple[str | None, str]:
    """The file with one literal of every slot of `site` changed, as a per-test canary changes
    it (runner.runners.canaries.core.new_value: a literal the file spells, or a move that reads
    as the project's own)."""
    text = held.text
    natural = file_literals(text)
    changes: list[str] = []
    edits: list[tuple[int, int, str]] = []
    for slot in site.slots:
        for scalar in rng.sample(list(slot), len(slot)):
            # Words the file spells outside this value: a word it has only there would read
            # as made up where the file is read without it.
            words = text_words(text[: scalar.start] + text[scalar.end :])
            changed = new_value(scalar, scalar.text, {scalar.text}, natural, rng, words)
            if changed is not None and changed != scalar.text:
                edits.append((scalar.start, scalar.end, changed))
                changes.append(f"{scalar.text} -> {changed}")
                break
        else:
            return None, ""
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new.encode() + text[end:]
    return text.decode("utf-8", "surrogateescape"), f"line {site.line}: " + "; ".join(changes[:3])
