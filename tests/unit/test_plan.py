"""The verify plan of the example, as JSON, against a golden file (UPDATE_GOLDEN=1 rewrites it):
every build, container, limit, label, collect step and exploit the executor will be given, for
fixed engine facts and a fixed run identity. A change to planning shows here as a diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

from runner.compile.bundle import load_bundle
from runner.compile.taskdir import load_authored_task
from runner.model.settings import VerifySettings
from runner.plan.labels import LABEL_INPUTS
from runner.plan.types import EngineFacts, RunIdentity, VerifyPlan
from runner.plan.verify import plan_verify
from tests.helpers import compiled

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bash-calc"
GOLDEN = ROOT / "tests" / "golden" / "plan-bash-calc.json"
FACTS = EngineFacts(ncpu=2, arch="amd64", storage_quota=False)
RUN = RunIdentity(run_id="golden-0001", owner="golden-host:1:1")


def example_plan(tmp_path: Path, settings: VerifySettings) -> str:
    """The plan's JSON, with what the bundle's bytes decide (the build contexts' digests, the
    build inputs they make, so the snapshot's tar format too) named instead of spelled out:
    the bundle has a golden test of its own (test_render)."""
    bundle = compiled(load_authored_task(EXAMPLE), repo=None, out=tmp_path / "bundle")
    plan = plan_verify(load_bundle(bundle), settings, FACTS, RUN)
    text = plan.to_json().replace(str(tmp_path), "<tmp>")
    for build in plan.builds:
        inputs = build.labels[LABEL_INPUTS]
        text = text.replace(build.context_digest, f"<context digest of {build.kind}>")
        text = text.replace(inputs, f"<inputs of {build.kind}>")
        text = text.replace(inputs[:16], f"<inputs of {build.kind}>")
    return text


def test_the_example_s_plan_is_the_golden_one(tmp_path: Path) -> None:
    text = example_plan(tmp_path, VerifySettings())
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert json.loads(text) == json.loads(GOLDEN.read_text()), (
        "the plan differs from tests/golden/plan-bash-calc.json (UPDATE_GOLDEN=1 rewrites it)"
    )


def test_the_plan_is_the_same_every_time(tmp_path: Path) -> None:
    first = example_plan(tmp_path / "a", VerifySettings())
    assert example_plan(tmp_path / "b", VerifySettings()).replace("/b/", "/a/") == first


def test_kept_containers_name_no_owner_so_no_reaper_removes_them(tmp_path: Path) -> None:
    """A container the author asked to keep outlives its runner; a stale-run reaper (any other
    run's, at its start) removes containers whose owner is dead, so a kept one names none."""
    owned = json.loads(example_plan(tmp_path / "a", VerifySettings()))
    kept = json.loads(example_plan(tmp_path / "b", VerifySettings(keep=True)))

    def owners(plan: object) -> list[str]:
        found: list[str] = []
        if isinstance(plan, dict):
            for key, value in plan.items():
                if key == "org.selfbench.owner":
                    found.append(value)
                found += owners(value)
        elif isinstance(plan, list):
            for value in plan:
                found += owners(value)
        return found

    assert owners(owned) and set(owners(owned)) == {RUN.owner}
    assert owners(kept) == []


def test_nop_hands_go_s_build_cache_to_the_side_trials_only(tmp_path: Path) -> None:
    from runner.model.harbor import AGENT_PATCH
    from runner.plan.inimage import HAND_OFF_ARCHIVE
    from tests.helpers import bash_task

    task = bash_task(tmp_path, name="go-task", toolchains=["go"])
    bundle = load_bundle(
        compiled(load_authored_task(task.directory), repo=None, out=tmp_path / "b")
    )
    plan = plan_verify(bundle, VerifySettings(repeat=1), FACTS, RUN)
    assert plan.hand_off is not None
    assert plan.hand_off.producer == "nop"
    assert plan.hand_off.directories == ["/opt/selfbench-cache/go-build"]
    pack = plan.hand_off.pack
    assert pack.user == "root"
    assert pack.argv[-3:] == [HAND_OFF_ARCHIVE, AGENT_PATCH, "/opt/selfbench-cache/go-build"]
    assert [t.handed_caches for t in plan.trials] == [False, False]  # nop and the oracle
    assert plan.hack is not None and plan.probe is not None
    assert all(e.trial.handed_caches for e in plan.hack.exploits)
    assert all(r.trial.handed_caches for r in plan.probe.runs)
    off = plan_verify(bundle, VerifySettings(hand_caches=False), FACTS, RUN)
    assert off.hand_off is None


def test_no_cache_directory_no_hand_off(tmp_path: Path) -> None:
    plan = json.loads(example_plan(tmp_path, VerifySettings()))
    assert plan["handOff"] is None


def test_debug_refuses_a_plan_the_runner_would_not_write() -> None:
    """debug hands plan.json's images, networks and directories to `docker create`: a forged
    plan asked for `--network host` and an image `--privileged`, and both were run."""
    from runner.plan.debugcheck import plan_problem

    text = GOLDEN.read_text().replace("<inputs of agent>", "0" * 16)
    document = json.loads(text.replace("<inputs of verifier>", "1" * 16))
    assert plan_problem(VerifyPlan.model_validate(document)) is None
    nop = document["trials"][0]
    for field, value, words in (
        ("network", "host", "is not one the runner uses"),
        ("image", "--privileged", "is not the plan's build"),
        ("workdir", "/app/../../etc", "is not /app or a plain directory in it"),
        ("workdir", "-v/:/host", "is not /app or a plain directory in it"),
        ("workdir", "/", "is not /app or a plain directory in it"),
        ("command", ["sh", "-c", "curl x | sh"], "is not the runner's `sleep SECONDS`"),
        ("command", ["sleep", "0"], "is not the runner's `sleep SECONDS`"),
        ("entrypoint", ["/bin/sh", "-c", "id"], "is not the image's"),
        ("env", {"HOME": "/root\n--privileged"}, "variable 'HOME'"),
        ("env", {"A B": "1"}, "variable 'A B'"),
        ("proxyEnv", ["-v/:/host"], "variable '-v/:/host'"),
    ):
        forged = json.loads(json.dumps(document))
        forged["trials"][0]["verifier"][field] = value
        problem = plan_problem(VerifyPlan.model_validate(forged))
        assert problem is not None and words in problem, (field, problem)
    assert nop["verifier"]["network"] in ("none", "bridge")
    # Limits that are none: a container debug would start without them.
    for limit in ("memoryMb", "pids", "cpus", "requestedCpus"):
        forged = json.loads(json.dumps(document))
        forged["trials"][0]["verifier"]["limits"][limit] = 0
        problem = plan_problem(VerifyPlan.model_validate(forged))
        assert problem is not None and "not a limit" in problem and "limits" in problem, limit
    # The steps debug runs: test.sh's preparation, the oracle's solve.sh, the smoke script.
    oracle = next(i for i, t in enumerate(document["trials"]) if t["solve"] is not None)
    for where, change, words in (
        (("trials", 0, "test"), {"argv": ["bash", "-c", "id"]}, "nop test: argv"),
        (("trials", oracle, "solve"), {"argv": ["bash", "/tmp/x.sh"]}, "oracle solve: argv"),
        (("trials", oracle, "solve"), {"user": "root"}, "oracle solve: user 'root'"),
        (("trials", oracle, "solve"), {"workdir": "/"}, "oracle solve: workdir '/'"),
        (("smoke", "run"), {"argv": ["bash", "-c", "id"]}, "smoke: argv"),
        (("smoke", "run"), {"env": {"X": "\x1b[2J"}}, "smoke: variable 'X'"),
    ):
        forged = json.loads(json.dumps(document))
        step = forged
        for key in where:
            step = step[key]
        step.update(change)
        problem = plan_problem(VerifyPlan.model_validate(forged))
        assert problem is not None and problem.startswith(words), (where, change, problem)


def test_a_reward_only_grade_stops_where_the_hack_gate_s_verifiers_stop(tmp_path: Path) -> None:
    """`grade --reward-only`: the grade's test.sh takes the hack gate's reward-only switches (a
    run stops at its first failed test, pass-to-pass only after fail-to-pass passed), and
    nothing else of its verifier changes; a plain grade takes neither."""
    plain = json.loads(example_plan(tmp_path / "plain", VerifySettings()))["grade"]
    fast = json.loads(example_plan(tmp_path / "fast", VerifySettings(reward_only=True)))["grade"]
    env = fast["test"]["env"]
    assert env["SELFBENCH_REWARD_ONLY"] == env["SELFBENCH_STOP_AT_FAILURE"] == "1"
    assert "SELFBENCH_SKIP_EMPTY" not in env  # a grade has no nop beside it to lean on
    assert not {"SELFBENCH_REWARD_ONLY", "SELFBENCH_STOP_AT_FAILURE"} & set(plain["test"]["env"])
    switches = ("SELFBENCH_REWARD_ONLY", "SELFBENCH_STOP_AT_FAILURE")
    assert {k: v for k, v in env.items() if k not in switches} == plain["test"]["env"]
    fast["test"]["env"] = plain["test"]["env"]
    assert fast == plain
