"""`init`'s rules, pure: which changed files are tests, what the repository's files say about its
setup and test commands, the selectors a runner takes for the held-out tests, and the
difficulty the audit would give. runner.compile.init reads the repository and writes the task.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping, Sequence

import pathspec

from runner.compile.audit import PROFILES
from runner.model.task import Difficulty
from runner.runners import Proposal, room_of
from runner.runners import propose as propose_by_rooms
from runner.runners.cifiles import CI_FILE, CI_FOLDERS
from runner.runners.setups import PYTHON_TEST_FOLDERS, ROOT_CONFIGS, TEST_REQUIREMENTS
from runner.runners.vocabulary import VOCABULARY

PR_NUMBER = re.compile(r"(?:Merge pull request #|\(#)(\d{1,9})\b")


@functools.lru_cache(maxsize=64)
def _globs(globs: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(globs)


def is_test_path(path: str, globs: Sequence[str] = ()) -> bool:
    """Whether a changed file is a test (or a test fixture): it goes to test.patch. By the
    author's globs when given, read as .gitignore reads its lines (pathspec): `*` stays within a
    path component and `**` spans them, a glob without `/` matches a name at any depth, and one
    that matches a directory takes what is below it (so `src/test_utils/helpers.py` is no match
    for `**/test_*.py`, where fnmatch's `*` crossed `/`); else by the vocabulary the patch
    policy judges tests by: a file inside a test directory, named as a test file, or a
    test-runner hook (conftest.py)."""
    if globs:
        return _globs(tuple(globs)).match_file(path)
    return VOCABULARY.is_test_path(path)


# The folders whose files a proposal reads besides the root's (their listing is recursive).
PROPOSAL_FOLDERS = (*CI_FOLDERS, *PYTHON_TEST_FOLDERS)
# The most files a proposal reads (each bounded by runner.compile.init's MAX_PROPOSAL_FILE).
MAX_PROPOSAL_FILES = 64


def proposal_files(names: Iterable[str]) -> list[str]:
    """The files of the head commit a proposal reads: the root's dependency manifests and
    lockfiles (the vocabulary's) and test-runner configuration, whatever the ecosystem; its CI
    files; and the test requirements kept in a tests or requirements folder."""
    wanted = sorted(
        {
            name
            for name in names
            if ("/" not in name and (VOCABULARY.is_manifest(name) or name in ROOT_CONFIGS))
            or CI_FILE.match(name)
            or TEST_REQUIREMENTS.match(name)
        }
    )
    return wanted[:MAX_PROPOSAL_FILES]


def propose(files: Mapping[str, bytes]) -> Proposal | None:
    """Commands from the repository's own files at the head commit, from the first room whose
    runner they suggest (runner.runners.propose), or None when none says anything."""
    proposal = propose_by_rooms(files)
    if proposal is None:
        return None
    return dataclasses.replace(proposal, found=sorted(files))


def selectors(paths: Iterable[str], runner: str) -> list[str]:
    """The selectors naming `paths` (test files) for `runner`: Go takes packages (`./dir`),
    cargo an integration test's name, the others the files (each room says)."""
    return room_of(runner).init_selectors(list(paths))


def is_test_file(path: str, runner: str) -> bool:
    """Whether a path (held-out or at the base) is a file the runner runs as tests, not a
    fixture beside them."""
    return room_of(runner).is_test_file(path)


def difficulty(implementation_files: int, changed_lines: int, pass_to_pass: int) -> Difficulty:
    """The highest difficulty whose minimums (runner.compile.audit.PROFILES) the change meets;
    easy when it meets none (the audit then says what is short)."""
    for level in (Difficulty.HARD, Difficulty.MEDIUM):
        profile = PROFILES[level]
        if (
            implementation_files >= profile.min_files
            and changed_lines >= profile.min_changed_lines
            and pass_to_pass >= profile.min_pass_to_pass
        ):
            return level
    return Difficulty.EASY


def pull_request_number(messages: str) -> int | None:
    """The pull request a change came from, as its merge or squash commit names it."""
    found = PR_NUMBER.search(messages)
    return int(found.group(1)) if found else None
