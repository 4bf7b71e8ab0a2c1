"""Tasks shaped like real pull requests (tests/realistic.py), on a real engine: each is accepted,
and its nop-red and broken-gold variants are rejected at the right stage with the right reason.

- a uv project in a monorepo subdirectory, its virtualenv inside the repository and git-ignored
  (`uv sync`'s default), the package installed editable: the verifier's prepared tree is read
  from the filesystem, so the virtualenv's files are not taken for plugins planted during a run;
- a pip project with an in-tree venv, unittest, and a gold patch that changes requirements.txt
  (the verifier's dependencies come from the dependency-setup pass), with its hack gate;
- jest and vitest with node_modules (vitest with its hack gate), a go module with a vendored
  package, a bash runner script (judged by exit codes).

The hack gates of the uv, jest and go shapes run in test_verdicts.py, which grades every exploit
class of those runners through `grade` as well."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import Run, run_verify
from tests.realistic import (
    BASH_RUNNER,
    GO_VENDORED,
    JEST,
    PIP_UNITTEST,
    UV_MONOREPO,
    VITEST,
    Project,
    build,
)

# (project, with its hack gate)
PROJECTS = {
    "uv-monorepo": (UV_MONOREPO, False),
    "pip-unittest": (PIP_UNITTEST, True),
    "jest": (JEST, False),
    "vitest": (VITEST, True),
    "go-vendored": (GO_VENDORED, False),
    "bash-runner": (BASH_RUNNER, False),
}


def verify(tmp_path: Path, project: Project, options: list[str], variant: str, *extra: str) -> Run:
    built = build(tmp_path, project, variant)
    return run_verify(
        built.task,
        [*options, *project.options],
        tmp_path / f"run-{variant or 'task'}",
        "--repeat",
        "0",
        *extra,
    )


@pytest.mark.parametrize("shape", list(PROJECTS))
def test_a_real_shaped_task_is_accepted_and_its_broken_variants_rejected(
    shape: str, tmp_path: Path, verify_options: list[str]
) -> None:
    project, hack_gate = PROJECTS[shape]
    gate = [] if hack_gate else ["--no-hack-gate"]
    run = verify(tmp_path, project, verify_options, "", *gate)
    assert run.report["verdict"] == "accepted", run.report["reason"]
    assert run.report["census"]["failToPass"] == project.evidence
    if project.evidence == "per-test":
        oracle = run.stage("oracle")["data"]["evidence"]
        f2p = [s for s in oracle["selectors"] if s["kind"] == "failToPass"]
        assert f2p and all(s["passed"] and not s["failed"] for s in f2p), f2p
    if hack_gate:
        exploits = run.stage("hack")["data"]["exploits"]
        assert {e["outcome"] for e in exploits} <= {"resisted", "not-applicable", "no-effect"}, [
            (e["name"], e["outcome"], e["detail"]) for e in exploits
        ]
        assert any(e["family"] == "evidence" and e["outcome"] == "resisted" for e in exploits)

    # The nop-red variant's failing pass-to-pass test fails with the gold patch too: nop and the
    # oracle both go red, and whichever ends first settles the verdict. --keep-going runs both
    # to their end so that nop's own judgement is what is checked.
    nop_red = verify(tmp_path, project, verify_options, "nop-red", "--no-hack-gate", "--keep-going")
    assert nop_red.report["verdict"] == "rejected"
    assert nop_red.stage("nop")["status"] == "failed", nop_red.report["reason"]
    assert nop_red.stage("nop")["detail"].startswith(project.nop_red), nop_red.stage("nop")
    # The failing test is named, not a rule of the verifier's.
    assert project.failed_words in nop_red.stage("nop")["detail"]

    broken = verify(tmp_path, project, verify_options, "broken-gold", "--no-hack-gate")
    assert broken.report["verdict"] == "rejected"
    assert broken.stage("nop")["status"] == "passed", broken.stage("nop")
    assert broken.stage("oracle")["status"] == "failed"
    assert broken.stage("oracle")["detail"].startswith(project.broken), broken.stage("oracle")
    assert project.failed_words in broken.stage("oracle")["detail"]
