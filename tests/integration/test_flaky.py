"""The flakiness probe (--repeat N) on a real engine: a task whose test depends on the time
zone, one on the hash seed and one on the order of its selectors are each rejected at
determinism with that perturbation named (a failed perturbed run is retried with each of its
dimensions alone); the example stays accepted."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import LIB_BASE, LIB_GOLD, RUNNER_SH, bash_task, files_task
from tests.integration.conftest import ROOT, Run, run_verify

# Every gate to its end: the hack gate runs beside the probe, and a red probe that ends first
# would otherwise stop it (seen under load: "skipped: verdict settled by determinism").
KEEP_GOING = ("--keep-going",)
SHOUT = '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ] || exit 1\n'


def assert_flaky(run: Run, perturbation: str) -> None:
    assert run.report["verdict"] == "rejected", run.report["reason"]
    for gate in ("nop", "oracle", "hack"):
        assert run.stage(gate)["status"] == "passed", run.stage(gate)["detail"]
    determinism = run.stage("determinism")
    assert determinism["status"] == "failed"
    assert determinism["data"]["perturbations"] == [perturbation], determinism["data"]
    assert f"changed by {perturbation}" in determinism["detail"]
    assert run.report["reason"].startswith("determinism: flaky: ")


def test_a_test_that_depends_on_the_time_zone(tmp_path: Path, verify_options: list[str]) -> None:
    task = bash_task(tmp_path, name="flaky-tz", new_test=SHOUT + '[ "$(date +%z)" = "+0000" ]\n')
    run = run_verify(task.directory, verify_options, tmp_path / "run", *KEEP_GOING)
    assert_flaky(run, "TZ=<+14>-14 (as Pacific/Kiritimati)")
    data = run.stage("determinism")["data"]
    assert data["selectors"] == [{"selector": "tests/test_new.sh", "passed": 0, "runs": 1}]
    assert run.stage("determinism")["detail"].startswith(
        "flaky: fail-to-pass failed in 1 of 1 perturbed run(s) (tests/test_new.sh); "
        "changed by TZ=<+14>-14 (as Pacific/Kiritimati); see "
    )
    # The run that failed with every dimension, then each dimension alone: only TZ failed.
    alone = {p["dimension"]: p["passed"] for p in data["probe"] if p["dimension"]}
    assert alone.pop("TZ=<+14>-14 (as Pacific/Kiritimati)") is False
    assert alone and all(alone.values()), alone


def test_a_test_that_depends_on_the_order_of_its_selectors(
    tmp_path: Path, verify_options: list[str]
) -> None:
    task = files_task(
        tmp_path,
        "flaky-order",
        base={
            "lib.sh": LIB_BASE,
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": '. ./lib.sh\n[ "$(greet x)" = "hello x" ]\n',
        },
        tests={
            # b needs what a leaves behind: it passes after a, and fails before it.
            "tests/test_a.sh": SHOUT + "touch /tmp/selfbench-order-state\n",
            "tests/test_b.sh": SHOUT + "[ -f /tmp/selfbench-order-state ]\n",
        },
        gold={"lib.sh": LIB_GOLD},
        failToPass=["tests/test_a.sh", "tests/test_b.sh"],
        testPaths=["tests/test_a.sh", "tests/test_b.sh"],
    )
    run = run_verify(task, verify_options, tmp_path / "run", *KEEP_GOING)
    assert_flaky(run, "the selectors in reverse order")
    first = run.stage("determinism")["data"]["probe"][0]
    # b alone fails too: every run of an exit-code task starts from the lockdown's /tmp (a's
    # file from an earlier run made b pass alone before, and the probe said "each selector
    # passes alone").
    assert first["whatFailed"] == "fail-to-pass", first


PYTHON_SETUP = "apt-get update -qq && apt-get install -y -qq python3 > /dev/null"
# Passes only under test.sh's PYTHONHASHSEED=0: a string's hash under any other seed differs
# (a set's order, tried first, matched seed 0's under one seed in CI and the probe passed).
HASH_TEST = (
    SHOUT + "probe='print(hash(\"selfbench\"))'\n"
    '[ "$(python3 -c "$probe")" = "$(PYTHONHASHSEED=0 python3 -c "$probe")" ]\n'
)


def test_a_test_that_depends_on_the_hash_seed(tmp_path: Path, verify_options: list[str]) -> None:
    task = bash_task(
        tmp_path,
        name="flaky-hash",
        new_test=HASH_TEST,
        environment={"rootSetupCommand": PYTHON_SETUP},
    )
    run = run_verify(
        task.directory,
        [*verify_options, "--build-network", "host"],
        tmp_path / "run",
        *KEEP_GOING,
    )
    seed = run.stage("determinism")["data"]["probe"][0]["perturbation"].split("PYTHONHASHSEED=")[1]
    assert_flaky(run, f"PYTHONHASHSEED={seed.split(',')[0]}")


def test_the_example_stays_accepted_under_three_perturbed_runs(
    tmp_path: Path, verify_options: list[str]
) -> None:
    run = run_verify(
        ROOT / "examples" / "bash-calc", verify_options, tmp_path / "run", "--repeat", "3"
    )
    assert run.report["verdict"] == "accepted", run.report["reason"]
    data = run.stage("determinism")["data"]
    assert [p["passed"] for p in data["probe"]] == [True, True, True]
    assert data["selectors"] == [{"selector": "tests/test_ops.sh", "passed": 3, "runs": 3}]
    assert data["perturbations"] == []
    assert "TZ=<+14>-14 (as Pacific/Kiritimati)" in data["probe"][0]["perturbation"]
    assert "the selectors in reverse order" in data["probe"][0]["perturbation"]
