"""The example CI workflow and the composite action, run end to end by a local runner
(tests/actions.py) on a repository of tasks: every task a change touches is verified however
many there are, and the workflow fails when fewer were verified than the matrix counted.

The runner's own `matrix` command builds the matrix; `verify` is a stand-in that writes the
report a real one would (the action's part is what is under test here, the runner's own
verification is tested on a real engine elsewhere), and so are pip, docker and the venv the
action installs into."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.actions import Runner, environ, stand_in
from tests.helpers import git

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "selfbench.yml"

VERIFY = f"""#!/bin/bash
# selfbench-runner: the real `matrix`; `verify` writes the report of the verdict the test chose
# (tasks named in $RED are rejected; those in $CRASH end before any report, as a killed job).
if [ "$1" = matrix ]; then exec {sys.executable} -m runner "$@"; fi
[ "$1" = verify ] || exit 2
task=$2; shift 2
while [ $# -gt 0 ]; do
  case $1 in --run-dir) run=$2; shift 2 ;; --report) report=$2; shift 2 ;; *) shift ;; esac
done
id=$(basename "$task")
if grep -qx "$id" "$CRASH" 2>/dev/null; then exit 3; fi
verdict=accepted code=0
if grep -qx "$id" "$RED" 2>/dev/null; then verdict=rejected code=1; fi
mkdir -p "$run"
printf '{{"taskId": "%s", "verdict": "%s", "reason": "stand-in"}}\\n' "$id" "$verdict" \\
  > "$run/report.json"
cp "$run/report.json" "$report"
exit $code
"""
# `python3 -m venv DIR` (the action's install step) makes a venv of stand-ins; anything else is
# the real Python (the workflow's scripts read JSON with it).
PYTHON = f"""#!/bin/bash
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/pip"
  cp "$(dirname "$0")/selfbench-runner" "$3/bin/selfbench-runner"
  chmod 755 "$3/bin/pip" "$3/bin/selfbench-runner"
  exit 0
fi
exec {sys.executable} "$@"
"""


def tasks_repo(tmp_path: Path, count: int) -> tuple[Path, str]:
    """A repository of `count` tasks with the workflow and the action, and a change that
    touches every task; returns it and the base commit."""
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "selfbench.yml").write_bytes(WORKFLOW.read_bytes())
    (repo / "action.yml").write_bytes((ROOT / "action.yml").read_bytes())
    for index in range(count):
        task = repo / "tasks" / f"t{index:03d}"
        task.mkdir(parents=True)
        (task / "definition.json").write_text(json.dumps({"taskId": f"t{index:03d}"}))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    for index in range(count):
        (repo / "tasks" / f"t{index:03d}" / "gold.patch").write_text("change\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change every task")
    return repo, base


def runner_for(tmp_path: Path, repo: Path, base: str, red: str = "", crash: str = "") -> Runner:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "selfbench-runner", VERIFY)
    stand_in(bin_dir, "python3", PYTHON)
    stand_in(bin_dir, "pip", "#!/bin/sh\nexit 0\n")
    stand_in(bin_dir, "docker", "#!/bin/sh\nexit 0\n")  # `docker info`: an engine answers
    (tmp_path / "red").write_text(red)
    (tmp_path / "crash").write_text(crash)
    env = {**environ(bin_dir), "RED": str(tmp_path / "red"), "CRASH": str(tmp_path / "crash")}
    return Runner(
        repo=repo,
        env=env,
        scratch=tmp_path / "runner",
        event={"pull_request": {"base": {"sha": base}}},
    )


def test_a_300_task_change_is_verified_whole(tmp_path: Path) -> None:
    """More tasks than GitHub's 256 legs per matrix: legs take two tasks each where they must,
    and every one of the 300 is verified and in the summary."""
    repo, base = tasks_repo(tmp_path, 300)
    runner = runner_for(tmp_path, repo, base)
    jobs = runner.run_workflow(repo / ".github" / "workflows" / "selfbench.yml")
    assert jobs["matrix"]["outputs"]["count"] == "300"
    legs = json.loads(jobs["matrix"]["outputs"]["matrix"])["include"]
    assert len(legs) == 256
    assert sorted(len(leg["tasks"].splitlines()) for leg in legs) == [1] * 212 + [2] * 44
    summary = "".join(runner.summaries)
    assert {k: v["result"] for k, v in jobs.items()} == {
        "matrix": "success",
        "verify": "success",
        "report": "success",
    }, unreported(runner, summary, 300)
    assert "300 of 300 task(s) verified." in summary
    rows = [line for line in summary.splitlines() if re.match(r"\| t\d{3} ", line)]
    assert sorted(rows) == [f"| t{i:03d} | accepted | stand-in |" for i in range(300)]


def unreported(runner: Runner, summary: str, count: int) -> str:
    """What a failed run says of the tasks without a report: each one's lines in every step's
    log (the Verify step prints `selfbench: TASK: VERDICT (exit N)`), and the last log."""
    missing = [
        f"t{i:03d}" for i in range(count) if f"| t{i:03d} | accepted | stand-in |" not in summary
    ]
    lines = [
        line
        for log in runner.logs
        for line in log.splitlines()
        if any(task in line for task in missing)
    ]
    return f"no report: {missing}\n" + "\n".join(lines[:40]) + "\n--- last log:\n" + runner.logs[-1]


def test_a_red_leg_fails_and_a_missing_report_fails_the_run(tmp_path: Path) -> None:
    """A rejected task fails its leg (the others still run); a task that left no report (its
    job killed, say) fails the report job, which names how many were verified."""
    repo, base = tasks_repo(tmp_path, 5)
    runner = runner_for(tmp_path, repo, base, red="t001\n", crash="t003\n")
    jobs = runner.run_workflow(repo / ".github" / "workflows" / "selfbench.yml")
    assert jobs["verify"]["result"] == "failure"
    assert jobs["report"]["result"] == "failure"
    summary = "".join(runner.summaries)
    assert "4 of 5 task(s) verified." in summary
    assert "| t001 | rejected | stand-in |" in summary
    assert "4 of 5 task(s) have a report" in runner.logs[-1]


@pytest.mark.parametrize("changed", ["README.md", None])
def test_no_task_changed_is_said_and_passes(tmp_path: Path, changed: str | None) -> None:
    repo, _ = tasks_repo(tmp_path, 2)
    head = git(repo, "rev-parse", "HEAD")
    if changed:
        (repo / changed).write_text("docs\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "docs only")
    runner = runner_for(tmp_path, repo, head)
    jobs = runner.run_workflow(repo / ".github" / "workflows" / "selfbench.yml")
    assert jobs["matrix"]["outputs"]["count"] == "0"
    assert jobs["verify"]["result"] == "skipped"
    assert jobs["report"]["result"] == "success"
    assert "No task changed: nothing to verify." in "".join(runner.summaries)
