"""What every real-shaped task shares: the project (its repository at the base commit, the
held-out tests, the real fix, a broken fix, a test of the base that fails) and how a task
directory is made of it, in three variants: the task, its nop-red variant (a pass-to-pass
selector that already fails on the base) and its broken-gold variant (a gold patch that does not
fix). The three share one repository and base commit, so the images built for one serve the
others: the failing test is in the base of all three, and only the nop-red variant selects it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.helpers import definition as base_definition
from tests.helpers import diff_of, make_repo, write_task

Files = dict[str, str | bytes | None]


@dataclass(frozen=True)
class Project:
    """A real-shaped task: the repository at the base commit, the held-out tests, the gold
    patch's files, and what a verification needs."""

    name: str
    base: Files
    tests: Files
    gold: Files
    broken_gold: Files  # a gold patch that implements the feature wrongly
    failing: Files  # a test of the base that fails: the nop-red variant's pass-to-pass
    failing_selector: str
    overrides: dict[str, Any]
    options: list[str] = field(default_factory=list)
    # The nop-red variant's pass-to-pass selectors, where appending the failing selector to the
    # task's would not do (a runner that takes one selector: `go test ./... -run {tests}`).
    nop_red_pass_to_pass: list[str] | None = None
    # What the rejections say (the start of the stage's detail).
    nop_red: str = "pass-to-pass tests fail on the base snapshot (exit 1)"
    broken: str = "fail-to-pass tests still fail with the gold patch (exit 1)"
    # What a red gate quotes of the failing run: the evidence's failed test, or (a custom runner,
    # judged by exit codes) the runner's last line.
    failed_words: str = "test(s) failed"
    evidence: str = "per-test"
    # The census's runners of the fail-to-pass selection ((): exit codes).
    runners: tuple[str, ...] = ()
    # The gold patch's files the verifier must take from the dependency-setup pass (manifests).
    gold_manifests: tuple[str, ...] = ()
    # As its family's PROJECTS lists it (shaped()): its test id in test_real_projects.py, whether
    # it proves its runners there (its hack gate on, every exploit graded through a bundle that
    # keeps it: tests.integration.proofs.PROVED), and whether its forgers are graded there.
    shape: str = ""
    proves: bool = False
    forged: bool = False


def shaped(project: Project, shape: str, *, proves: bool = False, forged: bool = False) -> Project:
    """A project as test_real_projects.py runs it (its family's PROJECTS)."""
    return replace(project, shape=shape, proves=proves, forged=forged)


@dataclass(frozen=True)
class Built:
    task: Path
    repo: Path
    project: Project


VARIANTS = ("", "nop-red", "broken-gold")


def build(tmp: Path, project: Project, variant: str = "") -> Built:
    """The task directory of `project` (variant "", "nop-red" or "broken-gold")."""
    assert variant in VARIANTS, variant
    name = project.name + (f"-{variant}" if variant else "")
    repo, commit = make_repo(tmp / f"{name}-repo", {**project.base, **project.failing})
    overrides = dict(project.overrides)
    if variant == "nop-red":
        overrides["passToPass"] = (
            list(project.nop_red_pass_to_pass)
            if project.nop_red_pass_to_pass is not None
            else [*overrides["passToPass"], project.failing_selector]
        )
    gold = project.broken_gold if variant == "broken-gold" else project.gold
    doc = base_definition(taskId=name, baseCommit=commit, repo=str(repo), **overrides)
    directory = write_task(
        tmp / name,
        doc,
        test_patch=diff_of(repo, project.tests),
        gold_patch=diff_of(repo, gold),
    )
    return Built(task=directory, repo=repo, project=project)


def steps(count: int, comment: str = "#") -> str:
    """Filler lines: the easy profile asks 20 changed lines of a gold patch."""
    return "".join(f"{comment} step {i}\n" for i in range(count))
