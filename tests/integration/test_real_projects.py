"""Tasks shaped like real pull requests (tests/realistic/), on a real engine, one per test runner
the verifier knows and the exit-code fallback: each is accepted, and its nop-red and
broken-gold variants are rejected at the right stage with the right reason.

- pytest: a uv project in a monorepo subdirectory, its virtualenv inside the repository and
  git-ignored (`uv sync`'s default), the package installed editable;
- unittest: a pip project with an in-tree venv whose gold patch changes requirements.txt (the
  verifier's dependencies come from the dependency-setup pass), with its hack gate, which
  proves the runner (every exploit's patch through a bundle that keeps it: reward 0);
- jest and vitest (with its hack gate, which proves the runner) with node_modules; mocha with
  its lockfile (npm ci), with its hack gate;
- node --test under pnpm, TypeScript by type stripping, a test that starts an HTTP server, with
  its hack gate;
- bun, with its hack gate;
- go: a module with a vendored package selected by package, and a module of several packages
  (one vendored) selected by `go test ./... -run`, where the packages without the test say
  "no tests to run";
- a bash runner script (judged by exit codes).

Besides, gold patches that change dependency files the verifier must take from its
dependency-setup pass (setup.cfg and setup.py, pyproject.toml and pdm.lock, go.work and a new
module's go.mod): accepted, with nothing of the reference solution undone at the oracle.

The hack gates of the pytest, jest and go shapes run in test_verdicts.py, which proves those
runners the same way and grades every exploit class of them under the task's policy too."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runner.model.canaries import CANARY_RULE
from tests.helpers import diff_of
from tests.integration.conftest import Run, grade, run_verify
from tests.integration.proofs import (
    PROVED,
    assert_proved_outcomes,
    patched,
    proved_by_the_evidence_alone,
)
from tests.realistic import MANIFEST_PROJECTS as MANIFEST_SHAPES
from tests.realistic import PROJECTS as SHAPES
from tests.realistic import Built, Project, build
from tests.realistic.forgers import forgers

# One or more per runner, by test id, as the families list them (tests/realistic): those that
# prove their runner (tests.integration.proofs.PROVED) keep their hack gate (the default gate
# proves what the patch policy leaves in the tree, and every exploit's patch goes through a
# bundle that keeps it whole); those with forgers have them graded against the accepted task
# (the honest fix keeps reward 1, and every forger earns 0 with the in-process checks off, the
# canaries alone judging; the others' canaries are checked at the oracle alone).
PROJECTS = {project.shape: project for project in SHAPES}
# Gold patches that change dependency files: the task alone.
MANIFEST_PROJECTS = {project.shape: project for project in MANIFEST_SHAPES}


def verify(tmp_path: Path, project: Project, options: list[str], variant: str, *extra: str) -> Run:
    return verify_built(tmp_path, build(tmp_path, project, variant), options, variant, *extra)


def verify_built(
    tmp_path: Path, built: Built, options: list[str], variant: str, *extra: str
) -> Run:
    project = built.project
    return run_verify(
        built.task,
        [*options, *project.options],
        tmp_path / f"run-{variant or 'task'}",
        "--repeat",
        "0",
        *extra,
    )


def assert_accepted(run: Run, project: Project) -> None:
    assert run.report["verdict"] == "accepted", run.report["reason"]
    assert run.report["census"]["failToPass"] == project.evidence
    if project.evidence == "per-test":
        oracle = run.stage("oracle")["data"]["evidence"]
        f2p = [s for s in oracle["selectors"] if s["kind"] == "failToPass"]
        assert f2p and all(s["passed"] and not s["failed"] for s in f2p), f2p
    # The reference solution is graded whole: the patch policy undid none of it (a manifest it
    # changes is the version the dependency-setup pass installed from).
    assert run.stage("oracle")["data"]["discarded"] == [], run.stage("oracle")["data"]["undone"]


def assert_canaries(run: Run, project: Project) -> None:
    """Canaries were made from the held-out tests and the gold killed them at the oracle (a
    custom runner: its one exit-code canary, one more run)."""
    canaries = run.report["census"]["canaries"]
    oracle = {r["name"]: r for r in run.stage("oracle")["data"]["evidence"]["runs"]}
    if project.evidence == "exit-code":
        assert (canaries["kept"], canaries["exitCode"]) == (1, 1), canaries
        assert oracle["canary"]["exitCode"] != 0
        return
    # At least 7 copies of a task's one copyable test (1/k: the centre of its copies is known
    # to be a canary), or fewer of each of several.
    assert canaries["kept"] >= 3 and canaries["guess"] <= 1 / 7, canaries
    assert canaries["dropped"] == [], canaries["dropped"]
    first = oracle["fail_to_pass"]["canaries"]
    assert first["ran"] == first["failed"] == canaries["kept"], first


def assert_forgers_earn_nothing(tmp_path: Path, built: Built, run: Run, options: list[str]) -> None:
    """The honest fix keeps reward 1 with its canaries; each forger earns 0 with the in-process
    checks off, and one that passes the held-out tests is caught by the canaries' rule."""
    project = built.project
    logs = tmp_path / "grades"
    fix = tmp_path / "fix.patch"
    fix.write_bytes(diff_of(built.repo, project.gold))
    code, graded = grade(run.run_dir, fix, options, logs)
    assert (code, graded["reward"]["reward"]) == (0, 1), graded["detail"]
    (runner,) = project.runners or ("exit-code",)
    found = forgers(project, runner)
    assert found, runner
    options_alone = [*options, "--evidence-checks", "canaries"]
    patches = {}
    for name, forger in found.items():
        patches[name] = tmp_path / f"{name}.patch"
        patches[name].write_bytes(diff_of(built.repo, forger.files))
    # Two at a time: each is a fresh verifier of its own.
    with ThreadPoolExecutor(max_workers=2) as pool:
        graded_all = dict(
            zip(
                patches,
                pool.map(
                    lambda n: grade(run.run_dir, patches[n], options_alone, logs / n), patches
                ),
                strict=True,
            )
        )
    for name, (code, graded) in graded_all.items():
        assert (code, graded["reward"]["reward"]) == (1, 0), (name, graded["detail"])
        if found[name].passes_held_out:
            assert CANARY_RULE in graded["detail"], (name, graded["detail"])


def assert_proved(tmp_path: Path, built: Built, run: Run, options: list[str]) -> None:
    """The shape proves its runner (tests.integration.proofs): the default gate reports every
    exploit the policy leaves in the tree proved, and each exploit's patch earns 0 through a
    bundle whose policy keeps every change but the held-out tests'."""
    project = built.project
    exploits = {e["name"]: e for e in run.stage("hack")["data"]["exploits"]}
    assert set(project.runners) <= set(PROVED), project.runners
    assert_proved_outcomes(exploits, project.runners, run.report["runnerVersion"])
    names = patched(exploits)
    # Every family of the runner's toolchain, the evidence's (the recorder) among them.
    assert {"evidence", "generic", "forger"} <= {exploits[n]["family"] for n in names}, names
    proved_by_the_evidence_alone(built.task, exploits, names, options, tmp_path)


@pytest.mark.parametrize("shape", list(PROJECTS))
def test_a_real_shaped_task_is_accepted_and_its_broken_variants_rejected(
    shape: str, tmp_path: Path, verify_options: list[str]
) -> None:
    project = PROJECTS[shape]
    gate = [] if project.proves else ["--no-hack-gate"]
    built = build(tmp_path, project)
    run = verify_built(tmp_path, built, verify_options, "", *gate)
    assert_accepted(run, project)
    assert_canaries(run, project)
    if project.forged:
        assert_forgers_earn_nothing(tmp_path, built, run, [*verify_options, *project.options])
    if project.runners:
        census = run.report["census"]
        assert census["failToPass"] == "per-test"
    if project.proves:
        assert_proved(tmp_path, built, run, [*verify_options, *project.options])

    # The nop-red variant's failing pass-to-pass test fails with the gold patch too: nop and the
    # oracle both go red, and whichever ends first settles the verdict. --keep-going runs both
    # to their end so that nop's own judgement is what is checked.
    nop_red = verify(tmp_path, project, verify_options, "nop-red", "--no-hack-gate", "--keep-going")
    assert nop_red.report["verdict"] == "rejected"
    assert nop_red.stage("nop")["status"] == "failed", nop_red.report["reason"]
    assert nop_red.stage("nop")["detail"].startswith(project.nop_red), nop_red.stage("nop")
    # The failing test is named, not a rule of the verifier's.
    assert project.failed_words in nop_red.stage("nop")["detail"]

    # The oracle goes red; nop, run beside it, must pass: --keep-going, or an oracle that ends
    # first settles the verdict and stops nop ("skipped"; CI saw it once the red oracle no
    # longer ran again online).
    broken = verify(
        tmp_path, project, verify_options, "broken-gold", "--no-hack-gate", "--keep-going"
    )
    assert broken.report["verdict"] == "rejected"
    assert broken.stage("nop")["status"] == "passed", broken.stage("nop")
    assert broken.stage("oracle")["status"] == "failed"
    assert broken.stage("oracle")["detail"].startswith(project.broken), broken.stage("oracle")
    assert project.failed_words in broken.stage("oracle")["detail"]


@pytest.mark.parametrize("shape", list(MANIFEST_PROJECTS))
def test_a_gold_patch_that_changes_dependency_files_is_graded_whole(
    shape: str, tmp_path: Path, verify_options: list[str]
) -> None:
    project = MANIFEST_PROJECTS[shape]
    run = verify(tmp_path, project, verify_options, "", "--no-hack-gate")
    assert_accepted(run, project)
    # Every one of them had the dependency-setup pass.
    bundle = run.run_dir / "bundle"
    setup_patch = (bundle / "tests" / "dependency-setup.patch").read_text()
    for path in project.gold_manifests:
        assert f"diff --git a/{path} b/{path}" in setup_patch, path
