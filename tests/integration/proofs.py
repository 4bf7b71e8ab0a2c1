"""What the default hack gate's `proved` rests on, on a real engine: for each runner of
PROVEN_RUNNERS, a task of that runner whose every canned exploit's patch earns reward 0 through
a fresh verifier of a bundle whose patch policy keeps every change but the held-out tests'
(`harnessAllow: *`), so that the runner's per-test evidence alone stands between the patch and
a reward. PROVED names the test that proves each runner; `tests/integration/test_verdicts.py`
checks that it is exactly PROVEN_RUNNERS."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.integration.conftest import FAST, grade, run_verify
from tests.realistic import PROJECTS

# The runner and the test that proves it (each of them calls `proved_by_the_evidence_alone`):
# test_verdicts.py's cases, and the real-shaped tasks that prove theirs (Project.proves).
PROVED = {
    "pytest": "test_verdicts.py::test_no_exploit_earns_a_reward_and_the_real_fix_does[pytest]",
    "jest": "test_verdicts.py::test_no_exploit_earns_a_reward_and_the_real_fix_does[jest-npm]",
    "go": "test_verdicts.py::test_no_exploit_earns_a_reward_and_the_real_fix_does[go]",
    **{
        runner: f"test_real_projects.py::test_a_real_shaped_task_is_accepted_...[{p.shape}]"
        for p in PROJECTS
        if p.proves
        for runner in p.runners
    },
}


def grade_patches(
    target: Path, exploits: dict[str, Any], names: list[str], options: list[str], logs: Path
) -> list[tuple[str, tuple[int, dict[str, Any]]]]:
    """Each named exploit's collected patch through `grade` (two at a time: each is a fresh
    verifier of its own), by name. Options may ask `--reward-only`: what `proved` claims is the
    reward, and the hack gate's own verifiers take it so."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        graded = pool.map(
            lambda name: grade(target, Path(exploits[name]["patch"]), options, logs / name), names
        )
        return list(zip(names, graded, strict=True))


def patched(exploits: dict[str, Any]) -> list[str]:
    """The exploits the gate collected a patch of (run on the task, or proved)."""
    return sorted(n for n, e in exploits.items() if e["outcome"] in ("resisted", "proved"))


def assert_proved_outcomes(
    exploits: dict[str, Any], runners: tuple[str, ...], version: str
) -> None:
    """The default gate on a task of proved runners: each exploit the policy leaves in the tree
    is proved for those runners by this runner version, and none of them ran on the task."""
    outcomes = {e["outcome"] for e in exploits.values()}
    assert outcomes <= {"resisted", "proved", "not-applicable", "no-effect"}, outcomes
    assert "proved" in outcomes, outcomes
    for name, exploit in exploits.items():
        if exploit["outcome"] == "proved":
            assert exploit["scope"] == "runner", (name, exploit["detail"])
            assert exploit["provedFor"] == list(runners), (name, exploit["provedFor"])
            assert f"by selfbench-runner {version}" in exploit["detail"], exploit["detail"]
        elif exploit["outcome"] == "resisted":
            # Only what the patch policy decides: undone whole, nop's tree, no test run.
            assert exploit["scope"] == "task", (name, exploit["detail"])
            assert exploit.get("reward") is None, (name, exploit["detail"])


def proved_by_the_evidence_alone(
    task: Path, exploits: dict[str, Any], names: list[str], options: list[str], tmp: Path
) -> None:
    """The same task with a contract whose patch policy keeps every change but the held-out
    tests' (harnessAllow: *): each named exploit's patch must still earn 0, on the sealed
    census."""
    allow_all = tmp / "allow-all"
    shutil.copytree(task, allow_all)
    definition = json.loads((allow_all / "definition.json").read_text())
    definition.setdefault("environment", {})["harnessAllow"] = ["*"]
    (allow_all / "definition.json").write_text(json.dumps(definition, indent=2) + "\n")
    run = run_verify(allow_all, options, tmp / "allow-all-run", *FAST)
    assert run.report["verdict"] == "accepted", run.report["reason"]
    graded_all = grade_patches(
        run.run_dir, exploits, names, [*options, "--reward-only"], tmp / "allow-all-grades"
    )
    for name, (code, graded) in graded_all:
        assert graded["rewardOnly"] is True
        assert graded["undone"] == [] or all(
            c["verdict"] == "held-out" for c in graded["undone"]
        ), (name, graded["undone"])
        assert (code, graded["verdict"]) == (1, "not-rewarded"), (name, graded["detail"])
        assert graded["reward"]["reward"] == 0
        assert graded["census"] == "sealed"
