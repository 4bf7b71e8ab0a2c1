"""The hack gate's remembered exploit sides and policy checks (runner.run.remembered): a second
verify of the same images runs neither the agent container nor the policy check, and reports
the same; an entry the runner did not sign, or one moved or edited, is not read; --hack-gate
full and --keep run everything afresh; what did not complete is never remembered."""

from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runner.compile import signing
from runner.model.evidence import PolicyCheck
from runner.model.report import Report, Verdict
from runner.model.settings import HackGate
from runner.plan.inimage import HACK_OUT, HACK_POLICY_RESULT
from runner.plan.runtime import ExecOutcome
from runner.plan.types import ExecStep
from runner.run.pipeline import VerifyOutcome, verify
from runner.run.remembered import (
    MAX_LOG_BYTES,
    REMEMBERED_DIR,
    Remembered,
    RememberedSide,
    log_tail,
)
from tests.fakes import (
    NOP_REWARD,
    ORACLE_REWARD,
    Action,
    FakeContainer,
    FakeEngine,
    Script,
    drive_exploits,
    writes_reward,
)
from tests.helpers import bash_task
from tests.unit.test_executor import ENV, settings

PATCH = b"diff --git a/x b/x\n"


def policy_says_kept(container: FakeContainer, step: ExecStep) -> ExecOutcome:
    """The policy check keeps every patch's one change (each then goes to a verifier)."""
    names = [
        k.rsplit("/", 1)[1].removesuffix(".patch")
        for k in container.files
        if k.endswith(".patch") and "/exploits/" in k
    ]
    document = {name: {"applied": True, "kept": 1, "restores": 0, "changes": []} for name in names}
    container.files[HACK_POLICY_RESULT] = json.dumps(document).encode()
    return ExecOutcome(exit_code=0, seconds=0.01)


def engine() -> FakeEngine:
    return FakeEngine(Script(actions={"hack/policy-check": policy_says_kept}))


def remembering(tmp_path: Path, fake: FakeEngine, task: Path, **changes: object) -> VerifyOutcome:
    return verify(
        task,
        settings(tmp_path, **{"repeat": 0, **changes}),
        progress=lambda stage, message: None,
        engine_factory=lambda: fake,
        env=replace(ENV, remembered=Remembered(tmp_path / "cache")),
    )


def hack_view(report: Report) -> list[tuple[str, str, str, int | None]]:
    return [(e.name, e.outcome, e.detail, e.patch_bytes) for e in report.stages.hack.data.exploits]


def created(fake: FakeEngine) -> list[str]:
    return sorted(e for e in fake.events if e.startswith("create hack/"))


def entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / REMEMBERED_DIR).glob("*.json"))


def test_a_second_verify_runs_neither_the_agent_side_nor_the_policy_check(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    first_engine = engine()
    first = remembering(tmp_path, first_engine, task)
    assert first.report.verdict is Verdict.ACCEPTED, first.report.reason
    exploits = len(first.report.stages.hack.data.exploits)
    # The agent, the policy check's verifier, one verifier per exploit.
    assert created(first_engine) == [
        "create hack/agent",
        *["create hack/verifier"] * (exploits + 1),
    ]
    # Every side and every check (all the patches are one: one check).
    assert len(entries(tmp_path)) == exploits + 1

    second_engine = engine()
    second = remembering(tmp_path, second_engine, task)
    assert second.report.verdict is Verdict.ACCEPTED, second.report.reason
    assert hack_view(second.report) == hack_view(first.report)
    assert created(second_engine) == ["create hack/verifier"] * exploits
    assert not any(e.startswith("exec hack/driver") for e in second_engine.events)
    assert not any(e.startswith("exec hack/policy-check") for e in second_engine.events)
    # The logs and patches are where the driver would have left them.
    assert second.run_dir is not None
    for exploit in second.report.stages.hack.data.exploits:
        assert exploit.patch is not None and Path(exploit.patch).read_bytes() == PATCH
        script_log = Path(exploit.patch).with_name("exploit.log")
        assert script_log.read_text() == f"{exploit.name} ran\n"
    agent_log = (second.run_dir / "hack" / "agent.log").read_text()
    assert "as an earlier run of agent image sha256:agent saw it (exit 0" in agent_log
    # The policy check's log says which checks were remembered, and the stage lists it.
    policy_log = second.run_dir / "hack" / "policy-check.log"
    assert str(policy_log) in second.report.stages.hack.logs
    said = policy_log.read_text().splitlines()
    assert len(said) == exploits, said
    assert all("as an earlier verify of the same verifier image checked it" in s for s in said)
    # No empty log stands for one the driver did not write.
    assert not [p for p in second.run_dir.rglob("collect.log") if p.stat().st_size == 0]


def test_another_verifier_image_checks_the_remembered_patches_again(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    remembering(tmp_path, engine(), task)
    changed = engine()
    original_build = changed.build

    def build(request, log_path, *, limit, on_line):  # type: ignore[no-untyped-def]
        outcome = original_build(request, log_path, limit=limit, on_line=on_line)
        if request.labels.get("org.selfbench.kind") == "verifier":
            info = changed.images[request.tag]
            changed.images[request.tag] = replace(info, id="sha256:another-verifier")
        return outcome

    changed.build = build  # type: ignore[method-assign]
    outcome = remembering(tmp_path, changed, task)
    assert outcome.report.verdict is Verdict.ACCEPTED, outcome.report.reason
    # The sides are the agent image's (the same); the check is the verifier image's (another).
    assert not any(e.startswith("exec hack/driver") for e in changed.events)
    assert sum(e.startswith("exec hack/policy-check") for e in changed.events) == 1


def test_an_entry_this_runner_did_not_sign_is_not_read(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    first = remembering(tmp_path, engine(), task)
    assert first.report.verdict is Verdict.ACCEPTED
    stranger = signing.Signer(private=Ed25519PrivateKey.generate(), path=tmp_path / "other")
    for entry in entries(tmp_path):
        document = json.loads(entry.read_text())
        if document["kind"] == "exploit-side":
            document["value"]["patch"] = None  # "not collected": it would earn nothing
            document["value"]["exitCode"] = 3
            document["signature"] = stranger.sign(signing.payload(document))
            entry.write_text(json.dumps(document))
    fake = engine()
    outcome = remembering(tmp_path, fake, task)
    assert outcome.report.verdict is Verdict.ACCEPTED
    assert hack_view(outcome.report) == hack_view(first.report)
    assert sum(e.startswith("exec hack/driver") for e in fake.events) == 1


def test_an_edited_or_moved_entry_is_not_read(tmp_path: Path) -> None:
    store = Remembered(tmp_path / "cache")
    side = RememberedSide(
        exit_code=0, seconds=0.5, collected=0, patch=PATCH, script_log=b"ran\n", collect_log=b""
    )
    store.remember_side("a" * 64, side)
    assert store.side("a" * 64) == side
    # Moved under another key: its own key says where it belongs.
    shutil.copy(store.directory / f"{'a' * 64}.json", store.directory / f"{'b' * 64}.json")
    assert store.side("b" * 64) is None
    # Edited after it was signed.
    path = store.directory / f"{'a' * 64}.json"
    document = json.loads(path.read_text())
    document["value"]["exitCode"] = 3
    path.write_text(json.dumps(document))
    assert store.side("a" * 64) is None
    # A side's entry is not a check's.
    check = PolicyCheck(applied=True, kept=0, restores=0)
    store.remember_check("c" * 64, check)
    assert store.check("c" * 64) == check
    assert store.side("c" * 64) is None


def test_only_regular_bounded_files_are_read(tmp_path: Path) -> None:
    store = Remembered(tmp_path / "cache")
    store.directory.mkdir(parents=True)
    os.mkfifo(store.directory / f"{'f' * 64}.json")
    assert store.side("f" * 64) is None  # a FIFO: not opened for a read that would hang
    store.remember_side(
        "e" * 64,
        RememberedSide(
            exit_code=3, seconds=0.1, collected=-1, patch=None, script_log=b"", collect_log=b""
        ),
    )
    real = store.directory / f"{'e' * 64}.json"
    os.symlink(real, store.directory / f"{'d' * 64}.json")
    assert store.side("d" * 64) is None
    assert store.side("e" * 64) is not None
    with real.open("ab") as handle:
        handle.truncate(64 * 1024 * 1024)
    assert store.side("e" * 64) is None  # over the bound: not read whole
    too_large = RememberedSide(
        exit_code=0,
        seconds=0.1,
        collected=0,
        patch=b"x" * (2 << 20),
        script_log=b"",
        collect_log=b"",
    )
    store.remember_side("9" * 64, too_large)
    assert not (store.directory / f"{'9' * 64}.json").exists()


def test_full_and_keep_run_everything_afresh(tmp_path: Path) -> None:
    task = bash_task(tmp_path).directory
    remembering(tmp_path, engine(), task)
    for changes in ({"hack_gate": HackGate.FULL}, {"keep": True}):
        fake = engine()
        outcome = remembering(tmp_path, fake, task, **changes)
        assert outcome.report.verdict is Verdict.ACCEPTED, outcome.report.reason
        assert sum(e.startswith("exec hack/driver") for e in fake.events) == 1, changes


def test_a_script_that_failed_is_run_again(tmp_path: Path) -> None:
    def failing_driver(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        names = step.argv[6:]
        rows = []
        for index, name in enumerate(names):
            container.files[f"{HACK_OUT}/logs/{name}.log"] = b"boom\n"
            if index == 0:
                rows.append(f"{name}\t1\t0\t10\t-1\n")  # the script failed: nothing collected
            else:
                container.files[f"{HACK_OUT}/patches/{name}.patch"] = PATCH
                rows.append(f"{name}\t0\t0\t10\t0\n")
        container.files[f"{HACK_OUT}/status.tsv"] = "".join(rows).encode()
        return ExecOutcome(exit_code=0, seconds=0.01)

    task = bash_task(tmp_path).directory
    fake = FakeEngine(
        Script(actions={"hack/policy-check": policy_says_kept, "hack/driver": failing_driver})
    )
    first = remembering(tmp_path, fake, task)
    first_exploit = first.report.stages.hack.data.exploits[0].name
    driven: list[list[str]] = []
    drive = drive_exploits(PATCH)

    def recording_driver(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        driven.append(step.argv[6:])
        return drive(container, step)

    fake = FakeEngine(
        Script(actions={"hack/policy-check": policy_says_kept, "hack/driver": recording_driver})
    )
    remembering(tmp_path, fake, task)
    # Only the one that failed runs again (the others are remembered).
    assert driven == [[first_exploit]]


def exit_code_evidence(reward: dict[str, int], killed: list[str] = []) -> Action:  # noqa: B006
    """A verifier judged by exit codes (a custom test command): its reward, each run's evidence
    document in exit-code mode, and the canary run's, whose `killed` canaries failed."""

    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        writes_reward(reward)(container, step)
        if killed:
            canary = {
                "name": "canary",
                "kind": "canary",
                "exitCode": 1,
                "mode": "exit-code",
                "complete": True,
                "canaries": [{"key": key, "outcome": "failed"} for key in killed],
            }
            container.files["/logs/verifier/evidence/canary.json"] = json.dumps(canary).encode()
        failed = reward.get("reward", 0) == 0
        for name in ("fail_to_pass", "pass_to_pass"):
            document = {
                "name": name,
                "kind": "f2p" if name == "fail_to_pass" else "p2p",
                "exitCode": int(failed and name == "fail_to_pass"),
                "mode": "exit-code",
                "complete": True,
                "passed": not (failed and name == "fail_to_pass"),
            }
            container.files[f"/logs/verifier/evidence/{name}.json"] = json.dumps(document).encode()
        return ExecOutcome(exit_code=0, seconds=0.02)

    return action


def exit_code_canaries(tmp_path: Path, task: Path) -> list[str]:
    """The task's exit-code canaries (the plan's), which the oracle's canary run kills."""
    planned = remembering(tmp_path / "planning", engine(), task, hack_gate=HackGate.OFF)
    assert planned.run_dir is not None
    keys = json.loads((planned.run_dir / "plan.json").read_text())["canaries"]["exitCode"]
    assert keys
    return list(keys)


def exit_code_engine(killed: list[str]) -> FakeEngine:
    return FakeEngine(
        Script(
            actions={
                "hack/policy-check": policy_says_kept,
                "nop/verifier": exit_code_evidence(NOP_REWARD),
                "oracle/verifier": exit_code_evidence(ORACLE_REWARD, killed),
                "hack/verifier": exit_code_evidence(NOP_REWARD),
            }
        )
    )


def test_an_exit_code_task_remembers_its_exploits_early_runs(tmp_path: Path) -> None:
    """With exit-code evidence each exploit the policy leaves runs in a verifier before the
    census (an early run, graded without it): one that ended with reward 0 is remembered by the
    verifier image, its plan and the patch, and the next verify adopts it as the census would."""
    task = bash_task(tmp_path).directory
    killed = exit_code_canaries(tmp_path, task)
    first_engine = exit_code_engine(killed)
    first = remembering(tmp_path, first_engine, task)
    assert first.report.verdict is Verdict.ACCEPTED, first.report.reason
    exploits = first.report.stages.hack.data.exploits
    assert {e.outcome for e in exploits} == {"resisted"}
    kinds = sorted(json.loads(p.read_text())["kind"] for p in entries(tmp_path))
    # One per patch: the fake's exploits all leave the same one, and a run is the patch's.
    assert kinds.count("early-run") == 1

    second_engine = exit_code_engine(killed)
    second = remembering(tmp_path, second_engine, task)
    assert second.report.verdict is Verdict.ACCEPTED, second.report.reason
    assert hack_view(second.report) == hack_view(first.report)
    assert created(second_engine) == []  # no agent, no policy check, no exploit verifier
    assert second.run_dir is not None
    for exploit in exploits:
        gate = second.run_dir / "hack" / exploit.name
        reward = json.loads((gate / "logs" / "verifier" / "reward.json").read_text())
        assert reward["reward"] == 0
        assert "as an earlier run of this verifier image saw it" in (
            (gate / "verifier.log").read_text()
        )
        assert not (gate / "early").exists()


def test_a_remembered_run_that_does_not_say_reward_0_is_not_adopted(tmp_path: Path) -> None:
    """A signed entry whose files say reward 1 (only reward-0 runs are kept: this one is not
    the runner's doing) is not taken: the exploit runs in a verifier again."""
    task = bash_task(tmp_path).directory
    killed = exit_code_canaries(tmp_path, task)
    remembering(tmp_path, exit_code_engine(killed), task)
    for entry in entries(tmp_path):
        document = json.loads(entry.read_text())
        if document["kind"] != "early-run":
            continue
        files = document["value"]["files"]
        files["verifier/reward.json"] = base64.b64encode(b'{"reward": 1}').decode()
        signing.sign_document(document)
        entry.write_text(json.dumps(document))
    fake = exit_code_engine(killed)
    outcome = remembering(tmp_path, fake, task)
    assert outcome.report.verdict is Verdict.ACCEPTED, outcome.report.reason
    # The first exploit's early run is looked up before any verifier runs (a later one may
    # find what a fresh run of the same patch just remembered): it ran in a verifier.
    first = outcome.report.stages.hack.data.exploits[0]
    assert "create hack/verifier" in created(fake)
    assert outcome.run_dir is not None
    log = (outcome.run_dir / "hack" / first.name / "verifier.log").read_text()
    assert "as an earlier run" not in log
    assert first.outcome == "resisted"


def test_a_document_the_runner_signed_for_another_purpose_is_no_entry(tmp_path: Path) -> None:
    """The runner's key signs seals and export manifests too: a document of exactly an entry's
    fields, signed as those are (no memory purpose), is not read; nor is an entry with a field
    more, nor a planted file nested past the recursion limit."""
    store = Remembered(tmp_path / "cache")
    side = RememberedSide(
        exit_code=3, seconds=0.1, collected=-1, patch=None, script_log=b"", collect_log=b""
    )
    store.remember_side("a" * 64, side)
    path = store.directory / f"{'a' * 64}.json"
    document = json.loads(path.read_text())
    assert store.side("a" * 64) == side
    document.pop("signature")
    signing.sign_document(document)  # as a seal is signed
    path.write_text(json.dumps(document))
    assert store.side("a" * 64) is None
    store.remember_side("a" * 64, side)
    document = json.loads(path.read_text())
    document["census"] = {}
    path.write_text(json.dumps(document))
    assert store.side("a" * 64) is None
    path.write_text("[" * 100_000)
    assert store.side("a" * 64) is None


def test_a_store_others_may_write_is_neither_read_nor_written(tmp_path: Path) -> None:
    store = Remembered(tmp_path / "cache")
    side = RememberedSide(
        exit_code=3, seconds=0.1, collected=-1, patch=None, script_log=b"", collect_log=b""
    )
    store.remember_side("a" * 64, side)
    assert store.side("a" * 64) == side
    store.directory.chmod(0o777)
    assert store.side("a" * 64) is None
    store.remember_side("b" * 64, side)
    assert not (store.directory / f"{'b' * 64}.json").exists()
    store.directory.chmod(0o700)
    (tmp_path / "cache").chmod(0o775)
    assert store.side("a" * 64) is None
    (tmp_path / "cache").chmod(0o755)
    # The directory linked elsewhere: not followed.
    elsewhere = tmp_path / "elsewhere"
    store.directory.rename(elsewhere)
    store.directory.symlink_to(elsewhere)
    assert store.side("a" * 64) is None


def test_nothing_is_remembered_unless_the_stage_passed(tmp_path: Path) -> None:
    """An exploit that resists by chance beside one that earns a reward: the verify is
    rejected, and nothing of its early runs is kept (a later verify must not add up the
    chance losses of several)."""
    task = bash_task(tmp_path).directory
    killed = exit_code_canaries(tmp_path, task)
    fake = exit_code_engine(killed)
    calls: list[str] = []

    def one_wins(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        # The exploit whose verifier ran first wins, early or sealed (its containers share
        # the name before "-verifier"); list.append is atomic.
        calls.append(container.name.split("-verifier")[0])
        reward = ORACLE_REWARD if calls[0] == calls[-1] else NOP_REWARD
        return exit_code_evidence(reward)(container, step)

    fake.script.actions["hack/verifier"] = one_wins
    outcome = remembering(tmp_path, fake, task)
    assert outcome.report.verdict is Verdict.REJECTED, outcome.report.reason
    assert entries(tmp_path) == []  # nor its sides and checks: nothing of a failed stage


def test_a_kept_log_says_how_much_of_its_start_it_left_out(tmp_path: Path) -> None:
    short, long = tmp_path / "short.log", tmp_path / "long.log"
    short.write_bytes(b"all of it\n")
    long.write_bytes(b"x" * (2 * MAX_LOG_BYTES) + b"why it failed\n")
    assert log_tail(short) == b"all of it\n"
    kept = log_tail(long)
    assert len(kept) <= MAX_LOG_BYTES and kept.endswith(b"why it failed\n")
    head, _, rest = kept.partition(b"\n")
    left_out = 2 * MAX_LOG_BYTES + len(b"why it failed\n") - len(rest)
    assert (
        head
        == (
            f"[selfbench: the first {left_out} of {long.stat().st_size} bytes of this log were "
            "not kept]"
        ).encode()
    )
    assert log_tail(tmp_path / "absent.log") == b""


def test_no_hack_memory_neither_reads_nor_writes_the_store(tmp_path: Path) -> None:
    from runner.cli.common import settings_of
    from runner.model.settings import SharedSettings
    from runner.run.pipeline import default_env

    assert default_env(settings(tmp_path)).remembered is not None
    off = settings_of(SharedSettings(hack_memory=False))
    assert off.hack_memory is False and default_env(off).remembered is None


def test_the_stage_runs_the_images_its_memory_is_keyed_by(tmp_path: Path) -> None:
    """A tag moved to another image while the stage runs (another runner rebuilding on the same
    engine) does not change what the stage's containers run: they are made from the ids the
    memory looked up, so what it remembers is what those images did."""
    task = bash_task(tmp_path).directory
    fake = engine()
    original_container = fake.container
    made: list[tuple[str, str]] = []
    moved: list[str] = []

    def container(plan, **kwargs):  # type: ignore[no-untyped-def]
        kind = plan.labels["org.selfbench.kind"]
        if kind == "hack":
            made.append((plan.labels.get("org.selfbench.side", ""), plan.image))
            for tag, info in list(fake.images.items()):
                if ":verifier-" in tag or ":agent-" in tag:
                    # Moved once the stage has begun: every later lookup by tag sees another id.
                    fake.images[tag] = replace(info, id=info.id + "-moved")
                    moved.append(tag)
        return original_container(plan, **kwargs)

    fake.container = container  # type: ignore[method-assign]
    outcome = remembering(tmp_path, fake, task)
    assert outcome.report.verdict is Verdict.ACCEPTED, outcome.report.reason
    assert moved
    assert made and {image for _, image in made} == {"sha256:agent", "sha256:verifier"}
    assert {image for side, image in made if side == "agent"} == {"sha256:agent"}
    # A second verify of the images as they are now (the moved ids) remembers nothing of them.
    again = engine()
    for tag, info in fake.images.items():
        again.images[tag] = info
    second = remembering(tmp_path, again, task)
    assert second.report.verdict is Verdict.ACCEPTED, second.report.reason
    assert any(e.startswith("exec hack/driver") for e in again.events)
