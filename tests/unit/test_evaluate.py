"""`evaluate` without an engine: the predictions read (FILE:LINE and field for each bad line,
the rest kept), the bundles taken through their seals (an export archive's and a directory's;
one that fails is a problem of its own), the result keys, the summary's counts and exit codes,
and the JUnit and HTML views. The grading itself runs on a real engine in
tests/integration/test_evaluate.py."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runner.base.errors import UsageError
from runner.batch.evalresults import Instance, graded_result, instances
from runner.batch.evalsources import gather
from runner.cli.main import run_cli
from runner.compile import signing
from runner.model import evalinput as model
from runner.model.evalinput import read_jsonl, read_patch_directory, result_key
from runner.model.evaluation import (
    EvaluationSummary,
    InputProblem,
    InstanceResult,
    summarize,
)
from runner.present.evaluation import _CSP, _SCRIPT, evaluation_html, junit_xml
from runner.present.export import Accepted, export
from runner.run.grading import GradeReport
from tests.helpers import bash_task
from tests.unit.test_batch import sealed_bundle


def line(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def test_each_bad_line_is_named_by_file_line_and_field_and_the_rest_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model, "MAX_LINE_BYTES", 4096)
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        line(instance_id="a", model_name_or_path="m", model_patch="diff a\n")
        + "\n"  # a blank line is no prediction
        + "{not json\n"
        + "[1, 2]\n"
        + line(instance_id="../etc", model_patch="x")
        + line(instance_id="b", model_patch=7)
        + line(instance_id="a", model_name_or_path="m", model_patch="again")
        + line(instance_id="c", model_name_or_path=None, model_patch=None)
        + line(instance_id="d", model_patch="x" * 5000)  # longer than the line limit
        + line(instance_id="e", model_name_or_path="m", model_patch="  \n")
        + line(instance_id="a", model_name_or_path="other", model_patch="x")  # another model's
    )
    predictions, problems = read_jsonl(preds, tmp_path / "patches")
    assert [(p.instance_id, p.where, p.empty) for p in predictions] == [
        ("a", f"{preds}:1", False),
        ("c", f"{preds}:8", True),
        ("e", f"{preds}:10", True),
        ("a", f"{preds}:11", False),
    ]
    found = [(p.file, p.field, p.message) for p in problems]
    assert found[0][:2] == (f"{preds}:3", None) and found[0][2].startswith("is not JSON")
    assert found[1:] == [
        (f"{preds}:4", None, "is not a JSON object"),
        (f"{preds}:5", "instance_id", "must be a task id ([A-Za-z0-9._-], at most 128)"),
        (f"{preds}:6", "model_patch", "must be a string (the unified diff) or null"),
        (f"{preds}:7", "instance_id", f"is predicted twice by this model (first at {preds}:1)"),
        (f"{preds}:9", None, "is longer than 4096 bytes"),
    ]
    # Each patch is kept by its content, never read again from the input.
    first = predictions[0]
    assert first.patch.read_bytes() == b"diff a\n"
    assert first.patch.name == hashlib.sha256(b"diff a\n").hexdigest() + ".patch"


def test_a_predictions_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "preds.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        model.read_predictions(fifo, tmp_path / "patches")  # never waits on the FIFO


def test_a_directory_of_patches_is_read_by_task_id(tmp_path: Path) -> None:
    patches = tmp_path / "my-model"
    patches.mkdir()
    (patches / "t1.patch").write_text("diff 1\n")
    (patches / "t2.patch").write_text("")
    (patches / ".hidden").write_text("x")
    (patches / "notes.txt").write_text("x")
    (patches / "t3.patch").symlink_to(patches / "t1.patch")
    predictions, problems = read_patch_directory(patches, tmp_path / "kept")
    assert [(p.instance_id, p.model, p.empty) for p in predictions] == [
        ("t1", "my-model", False),
        ("t2", "my-model", True),
    ]
    assert [(Path(p.file or "").name, p.message) for p in problems] == [
        ("notes.txt", "is not a <taskId>.patch file"),
        ("t3.patch", "is a symbolic link; task files must be regular files"),
    ]


def test_the_result_key_is_the_bundle_s_and_the_patch_s_content(tmp_path: Path) -> None:
    preds = tmp_path / "p.jsonl"
    preds.write_text(
        line(instance_id="a", model_patch="one") + line(instance_id="b", model_patch="one")
    )
    (a, b), _ = read_jsonl(preds, tmp_path / "patches")
    assert result_key("d1", a) == result_key("d1", b)  # the same content: the same result
    assert result_key("d1", a) != result_key("d2", a)
    preds.write_text(line(instance_id="a", model_patch="two"))
    (changed,), _ = read_jsonl(preds, tmp_path / "patches")
    assert result_key("d1", changed) != result_key("d1", a)


def _accepted(tmp_path: Path, name: str) -> Path:
    """A run directory as an accepted verify leaves it: its report and its sealed bundle."""
    task = bash_task(tmp_path / f"{name}-src", name=name)
    run = tmp_path / "runs" / name
    sealed_bundle(task.directory, run / "bundle")
    (run / "report.json").write_text(json.dumps({"verdict": "accepted", "taskId": name}))
    return run


def test_a_directory_of_runs_gives_each_sealed_bundle_and_refuses_a_changed_one(
    tmp_path: Path,
) -> None:
    good = _accepted(tmp_path, "good-task")
    bad = _accepted(tmp_path, "bad-task")
    (bad / "bundle" / "instruction.md").write_text("changed after the seal\n")
    (tmp_path / "runs" / "stray").mkdir()
    out = tmp_path / "out"
    tasks, problems, refused = gather(tmp_path / "runs", out, ())
    assert refused == 1  # the changed bundle is a task not taken; the stray directory is none
    assert list(tasks) == ["good-task"]
    task = tasks["good-task"]
    assert task.bundle == out / "bundles" / "good-task"
    manifest = (good / "bundle" / ".selfbench-manifest.json").read_bytes()
    assert task.digest == hashlib.sha256(manifest).hexdigest()
    assert (task.difficulty, task.weight > 0) == ("easy", True)
    assert [(Path(p.file or "").name, p.message.split(":")[0]) for p in problems] == [
        ("bundle", "the bundle does not match its seal"),
        ("stray", "is neither a bundle nor a run"),
    ]
    assert not (out / "bundles" / "bad-task").exists()
    assert [p.name for p in (out / "bundles").iterdir()] == ["good-task"]  # no staging left


def _archive(tmp_path: Path, *names: str) -> Path:
    runs = []
    for name in names:
        task = bash_task(tmp_path / f"{name}-src", name=name)
        bundle = sealed_bundle(task.directory, tmp_path / f"{name}-bundle")
        runs.append(Accepted(run_dir=tmp_path, bundle=bundle, task_id=name, run_id="r1"))
    archive = tmp_path / "export.tar.gz"
    export(runs, archive)
    return archive


def test_an_export_archive_is_unpacked_and_each_bundle_taken_through_its_seal(
    tmp_path: Path,
) -> None:
    archive = _archive(tmp_path, "a-task", "b-task")
    tasks, problems, refused = gather(archive, tmp_path / "out", ())
    assert refused == 0
    assert (sorted(tasks), problems) == (["a-task", "b-task"], [])
    assert (tasks["a-task"].bundle / "task.toml").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bundles"]


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tar.extractfile(member)
    assert handle is not None
    return handle.read()


def test_an_archive_bundle_that_breaks_a_rule_is_a_problem_and_the_others_are_taken(
    tmp_path: Path,
) -> None:
    """An archive signed by a trusted key whose one bundle holds a member outside its task's
    folder: that bundle is refused by name, the other one is graded."""
    archive = _archive(tmp_path, "a-task", "b-task")
    hostile = tmp_path / "hostile.tar.gz"
    with tarfile.open(archive) as source:
        members = {
            m.name: (m, _read(source, m) if m.isfile() else None) for m in source.getmembers()
        }
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as tar:
        evil = tarfile.TarInfo("../outside")
        evil.size = 4
        tar.addfile(evil, io.BytesIO(b"evil"))
    data = inner.getvalue()
    manifest = json.loads(members["manifest.json"][1] or b"")
    for task in manifest["tasks"]:
        if task["taskId"] == "b-task":
            task["sha256"] = hashlib.sha256(data).hexdigest()
    from runner.present.export import manifest_digest

    manifest["digest"] = manifest_digest(manifest)
    signing.sign_document(manifest)
    with tarfile.open(hostile, "w:gz") as target:
        for name, (member, original) in members.items():
            content = original
            if name == "tasks/b-task.tar.gz":
                content = data
            if name == "manifest.json":
                content = json.dumps(manifest).encode()
            if content is None:
                target.addfile(member)
            else:
                member.size = len(content)
                target.addfile(member, io.BytesIO(content))
    tasks, problems, refused = gather(hostile, tmp_path / "out", ())
    assert refused == 1
    assert list(tasks) == ["a-task"]
    messages = [p.message for p in problems]
    assert any("cannot be unpacked" in m and "escaping" in m for m in messages), messages
    assert not (tmp_path / "outside").exists() and not (tmp_path / "out" / "outside").exists()
    # An archive whose manifest fails its check is refused whole (exit 2).
    manifest["tasks"][0]["sha256"] = "0" * 64
    with tarfile.open(tmp_path / "unsigned.tar.gz", "w:gz") as target:
        raw = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(raw)
        target.addfile(info, io.BytesIO(raw))
    with pytest.raises(UsageError, match=r"manifest\.json"):
        gather(tmp_path / "unsigned.tar.gz", tmp_path / "out2", ())


def _result(instance_id: str, status: str, **extra: object) -> InstanceResult:
    return InstanceResult.model_validate(
        {
            "instance_id": instance_id,
            "task_id": instance_id,
            "model": "m",
            "key": instance_id * 4,
            "bundle_digest": "d",
            "patch_sha256": "p",
            "patch_bytes": 1,
            "status": status,
            "detail": f"{status} <b>&",
            "difficulty": extra.pop("difficulty", "easy"),
            "repository": "org/repo",
            **extra,
        }
    )


def test_the_summary_counts_each_status_and_the_exit_code_says_how_much_was_graded() -> None:
    results = [
        _result("a", "resolved", reward=1),
        _result("b", "unresolved", reward=0, tampering=["the patch policy undid 1 change(s)"]),
        _result("c", "empty-patch", reward=0, difficulty="hard"),
        _result("d", "not-applied", reward=0),
        _result("e", "error"),
    ]
    summary = summarize(EvaluationSummary(source="s", predictions="p"), results, not_graded=1)
    assert (summary.instances, summary.resolved, summary.resolved_rate) == (6, 1, round(1 / 6, 4))
    assert (summary.unresolved, summary.empty_patches, summary.not_applied) == (1, 1, 1)
    assert (summary.errors, summary.tampered, summary.not_graded) == (1, 1, 1)
    assert summary.by_difficulty["easy"].total == 4 and summary.by_difficulty["hard"].total == 1
    assert summary.by_repository["org/repo"].resolved == 1
    assert [r.instance_id for r in summary.rows] == ["a", "b", "c", "d", "e"]
    assert summary.exit_code(interrupted=False) == 1
    assert summary.exit_code(interrupted=True) == 130
    whole = summarize(EvaluationSummary(source="s", predictions="p"), results[:4], not_graded=0)
    assert whole.exit_code(interrupted=False) == 0
    errors = summarize(EvaluationSummary(source="s", predictions="p"), results[4:], not_graded=0)
    assert errors.exit_code(interrupted=False) == 3
    nothing = EvaluationSummary(source="s", predictions="p")
    nothing.input_problems = [InputProblem(where="p:1", field=None, message="bad")]
    assert summarize(nothing, [], not_graded=0).exit_code(interrupted=False) == 2


def test_a_grade_s_report_becomes_the_instance_s_result_with_its_tampering_signals(
    tmp_path: Path,
) -> None:
    preds = tmp_path / "p.jsonl"
    preds.write_text(line(instance_id="t", model_patch="x"))
    (prediction,), _ = read_jsonl(preds, tmp_path / "patches")
    from runner.batch.evalsources import EvalTask

    task = EvalTask(
        task_id="t", bundle=tmp_path, digest="d", difficulty="easy", repository="r", weight=1.0
    )
    instance = Instance(prediction=prediction, task=task, key=result_key("d", prediction))
    reward = {
        "reward": 0,
        "patch_applied": 1,
        "fail_to_pass": 0,
        "pass_to_pass": 1,
        "deterministic": 1,
        "setup_completed": 1,
    }
    report = GradeReport.model_validate(
        {
            "verdict": "not-rewarded",
            "detail": "reward 0: fail-to-pass did not pass",
            "reward": reward,
            "discarded": ["tests/test_x.py"],
            "runId": "r",
            "logs": [f"{tmp_path}/out/runs/t-1/grade/verifier.log"],
        }
    )
    result = graded_result(instance, report, "runs/t-1", [])
    assert (result.status, result.reward, result.fail_to_pass, result.pass_to_pass) == (
        "unresolved",
        0,
        False,
        True,
    )
    assert result.tampering == ["the patch policy undid 1 change(s): tests/test_x.py"]
    assert result.logs == ["runs/t-1/grade/verifier.log"]
    report.reward = report.reward.model_copy(update={"patch_applied": 0})  # type: ignore[union-attr]
    assert graded_result(instance, report, "runs/t-1", []).status == "not-applied"
    problems: list[object] = []
    assert instances([prediction], {}, problems) == []  # type: ignore[arg-type]
    assert "is no task of the source" in problems[0].message  # type: ignore[attr-defined]


def test_junit_and_the_page_show_every_instance_and_escape_what_predictions_carry() -> None:
    hostile = "<script>alert(1)</script>"
    results = [
        _result("a", "resolved", reward=1),
        _result("b", "unresolved", reward=0, tampering=[hostile]),
        _result("e", "error"),
    ]
    summary = summarize(EvaluationSummary(source=hostile, predictions="p"), results, not_graded=0)
    summary.input_problems = [InputProblem(where="p:3", field="instance_id", message=hostile)]
    suites = ET.fromstring(junit_xml(summary))
    assert (suites.get("tests"), suites.get("failures"), suites.get("errors")) == ("4", "1", "2")
    cases = {c.get("name"): c for c in suites.iter("testcase")}
    assert cases["b"].find("failure") is not None and cases["e"].find("error") is not None
    page = evaluation_html(summary, {(r.instance_id, r.model): r for r in results})
    assert hostile not in page and "&lt;script&gt;" in page
    # The page runs its own script alone: the policy names that script's hash, and no other
    # script is on the page.
    assert re.findall(r"<script>", page) == ["<script>"]
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in _CSP and f'content="{_CSP}"' in page


def test_evaluate_writes_its_outputs_for_empty_patches_and_bad_lines_without_an_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Empty patches need no grade (nop proved the tests fail on the base): with only those
    and bad lines, evaluate ends without Docker, and a second run grades nothing again."""
    _accepted(tmp_path, "t-one")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        line(instance_id="t-one", model_name_or_path="m", model_patch="")
        + line(instance_id="unknown", model_patch="x")
    )
    out = tmp_path / "out"
    args = ["evaluate", str(tmp_path / "runs"), "--predictions", str(preds), "-o", str(out)]
    assert run_cli([*args, "--json", "-q"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert (summary["instances"], summary["emptyPatches"], summary["gradedNow"]) == (1, 1, 1)
    assert summary["inputProblems"][0]["where"] == f"{preds}:2"
    for name in ("evaluation.json", "evaluation.schema.json", "junit.xml", "index.html"):
        assert (out / name).is_file(), name
    assert run_cli([*args, "--json", "-q"]) == 1
    assert json.loads(capsys.readouterr().out)["gradedNow"] == 0
    # A result changed in the directory (a reward planted) is not taken: graded again.
    (kept,) = (out / "results").glob("*.json")
    planted = json.loads(kept.read_text()) | {"status": "resolved", "reward": 1}
    kept.write_text(json.dumps(planted))
    assert run_cli([*args, "--json", "-q"]) == 1
    again = json.loads(capsys.readouterr().out)
    assert (again["gradedNow"], again["resolved"], again["emptyPatches"]) == (1, 0, 1)
    # A directory another user may write to is refused before anything is read from it.
    out.chmod(0o777)
    assert run_cli([*args, "-q"]) == 2
    assert "is not this user's own directory" in capsys.readouterr().err
    out.chmod(0o700)
    preds.write_text("{bad\n")
    assert run_cli([*args, "-q"]) == 2
    assert f"{preds}:1: is not JSON" in capsys.readouterr().err


def test_text_that_cannot_name_a_model_or_be_a_patch_is_a_problem_not_a_crash(
    tmp_path: Path,
) -> None:
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        '{"instance_id": "a", "model_patch": "\\ud800"}\n'
        '{"instance_id": "b", "model_name_or_path": "\\ud800", "model_patch": "x"}\n'
        '{"instance_id": "c", "model_name_or_path": "m\\u001b[2J", "model_patch": "x"}\n'
        '{"instance_id": "d", "model_name_or_path": 0, "model_patch": "x"}\n'
    )
    predictions, problems = read_jsonl(preds, tmp_path / "patches")
    assert predictions == []
    assert [(p.field, p.message) for p in problems] == [
        ("model_patch", "is not valid Unicode text (a lone surrogate)"),
        ("model_name_or_path", "is not valid Unicode text (a lone surrogate)"),
        ("model_name_or_path", "holds control or other unprintable characters"),
        ("model_name_or_path", "must be text of at most 256 characters"),
    ]


def test_odd_names_in_a_patch_directory_are_shown_escaped_and_a_huge_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patches = tmp_path / "agent"
    patches.mkdir()
    (patches / os.fsdecode(b"a\xff.patch")).write_text("x")
    (patches / "b\x1b[2J.patch").write_text("x")
    predictions, problems = read_patch_directory(patches, tmp_path / "kept")
    assert predictions == []
    wheres = sorted(Path(p.file or "").name for p in problems)
    assert wheres == ["a\\udcff.patch", "b\\x1b[2J.patch"], wheres
    summary = EvaluationSummary(source="s", predictions="p")
    summary.input_problems = [InputProblem.of(p) for p in problems]
    summary.to_json()  # serializable: no lone surrogate left
    ET.fromstring(junit_xml(summary))
    monkeypatch.setattr(model, "MAX_PREDICTIONS", 3)
    for index in range(4):
        (patches / f".hidden-{index}").write_text("x")
    predictions, problems = read_patch_directory(patches, tmp_path / "kept")
    assert predictions == [] and "holds more than 3 entries" in problems[0].message


def test_a_patch_file_planted_under_its_digest_is_replaced_by_the_patch(tmp_path: Path) -> None:
    kept = tmp_path / "patches"
    kept.mkdir()
    real = b"the agent's patch\n"
    planted = kept / (hashlib.sha256(real).hexdigest() + ".patch")
    planted.write_bytes(b"the gold patch!!!\n")  # the same size
    _, path = model.keep_patch(kept, real)
    assert path == planted and path.read_bytes() == real


def test_the_result_key_holds_grade_s_options(tmp_path: Path) -> None:
    preds = tmp_path / "p.jsonl"
    preds.write_text(line(instance_id="a", model_patch="one"))
    (a,), _ = read_jsonl(preds, tmp_path / "patches")
    assert result_key("d", a) != result_key("d", a, ("--reward-only",))
    assert result_key("d", a, ("--reward-only",)) == result_key("d", a, ("--reward-only",))


def test_an_unsigned_archive_is_refused_before_any_bundle_of_it_is_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.batch import evalsources

    archive = _archive(tmp_path, "a-task")
    with tarfile.open(archive) as source:
        members = [(m, _read(source, m) if m.isfile() else None) for m in source.getmembers()]
    unsigned = tmp_path / "unsigned.tar.gz"
    with tarfile.open(unsigned, "w:gz") as target:
        for member, original in members:
            content = original
            if member.name == "manifest.json":
                content = json.dumps({**json.loads(content or b""), "signature": None}).encode()
            if content is None:
                target.addfile(member)
            else:
                member.size = len(content)
                target.addfile(member, io.BytesIO(content))

    def never(*args: object) -> None:
        raise AssertionError("a bundle of an unsigned archive was unpacked")

    monkeypatch.setattr(evalsources, "_unpack_bundle", never)
    out = tmp_path / "out"
    (out / ".unpack.stale").mkdir(parents=True)  # a killed run's: removed
    with pytest.raises(UsageError, match="manifest"):
        gather(unsigned, out, ())
    assert not (out / ".unpack.stale").exists()


def test_links_in_the_evaluation_directory_and_results_of_other_keys_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _accepted(tmp_path, "t-one")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(line(instance_id="t-one", model_patch=""))
    out = tmp_path / "out"
    args = ["evaluate", str(tmp_path / "runs"), "--predictions", str(preds), "-o", str(out)]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir(mode=0o700)
    (out / "results").symlink_to(elsewhere)
    assert run_cli([*args, "-q"]) == 2
    assert "a link is refused" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []
    (out / "results").unlink()
    # Signed by another key this host trusts (for bundles): not this runner's result.
    assert run_cli([*args, "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["gradedNow"] == 1
    other = tmp_path / "other-key"
    from runner.compile.signing import _create, _signer, public_text

    _create(other)  # another host's key, which this one trusts for bundles
    monkeypatch.setenv("SELFBENCH_SIGNING_KEY", str(other))

    _signer.cache_clear()
    try:
        (kept,) = (out / "results").glob("*.json")
        document = json.loads(kept.read_text()) | {"status": "resolved", "reward": 1}
        document.pop("signature")
        signing.sign_document(document)
        kept.write_text(json.dumps(document))
        foreign = public_text(signing.signer().public)
    finally:
        monkeypatch.delenv("SELFBENCH_SIGNING_KEY")
        _signer.cache_clear()
    monkeypatch.setenv("SELFBENCH_TRUSTED_KEYS", foreign)
    assert run_cli([*args, "--json", "-q"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["gradedNow"], again["resolved"], again["tasks"]) == (1, 0, 1)
    assert again["resolvedOfTasks"] == 0.0


def test_each_grade_s_run_id_ends_with_a_part_of_its_own() -> None:
    """Container names end with a run id's last part: a task's predictions graded side by side
    must not share it."""
    from runner.batch.evaluation import grade_run_id
    from runner.cli.common import RUN_ID

    one, two = grade_run_id("e1", "k" * 64, 1), grade_run_id("e1", "k" * 64, 1)
    assert one.rsplit("-", 1)[-1] != two.rsplit("-", 1)[-1]
    assert one.startswith("eval-e1-kkkkkkkkkk-1-") and RUN_ID.fullmatch(one)


def test_a_grade_pool_and_its_references_are_checked_before_anything_runs() -> None:
    """The fleet's side (runner.worker.pool): a pool of kind "grade" runs selfbench.grade
    children; a pool with no kind is a verify pool (one started before kinds replays as it
    ran); a grade's reference must name its task and two digests, and how to judge."""
    from runner.worker.pool import grade_reference_problem, pool_input

    digest = "sha256:" + "a" * 64
    base = {"manifest": digest, "total": 2}
    assert pool_input(base)[0].kind == "verify"  # type: ignore[union-attr]
    assert pool_input({**base, "kind": "grade"})[0].kind == "grade"  # type: ignore[union-attr]
    assert pool_input({**base, "kind": "shell"}) == (None, "kind is one of verify, grade")
    good = {"id": "k" * 64, "taskId": "t-1", "bundle": digest, "patch": digest}
    assert grade_reference_problem(good) is None
    assert (
        grade_reference_problem({**good, "rewardOnly": True, "evidenceChecks": "canaries"}) is None
    )
    for bad, words in (
        ("x", "is not an object"),
        ({**good, "id": "../x"}, "field `id`"),
        ({**good, "taskId": None}, "field `taskId`"),
        ({**good, "bundle": "md5:0"}, "field `bundle`"),
        ({**good, "patch": "/etc/passwd"}, "field `patch`"),
        ({**good, "rewardOnly": "yes"}, "field `rewardOnly`"),
        ({**good, "evidenceChecks": "none"}, "field `evidenceChecks`"),
        ({**good, "options": ["--unsealed"]}, "fields not known: options"),
    ):
        problem = grade_reference_problem(bad)
        assert problem is not None and words in problem, (bad, problem)


def test_the_score_counts_refused_tasks_and_every_model_that_predicted() -> None:
    results = [_result("a", "resolved", reward=1)]
    summary = EvaluationSummary(source="s", predictions="p", tasks=2)
    summarize(summary, results, not_graded=0, models={"m", "other"})
    assert summary.resolved_of_tasks == 0.25  # 1 of 2 tasks, for each of 2 models


def test_a_huge_archive_header_is_refused_before_it_is_read_and_an_empty_prefix_too(
    tmp_path: Path,
) -> None:
    from runner.base.errors import InvalidTaskError
    from runner.batch.evalsources import unpack_bundle_archive

    archive = tmp_path / "long.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("x" * (2 * 1024 * 1024))  # a GNU long-name header of 2 MiB
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(UsageError, match="a long-name header of"):
        gather(archive, tmp_path / "out", ())
    with pytest.raises(InvalidTaskError, match="long-name header"):
        unpack_bundle_archive(archive, "t", tmp_path / "unpacked")
    with pytest.raises(InvalidTaskError, match="no task id"):
        unpack_bundle_archive(archive, "", tmp_path / "unpacked-2")


def test_a_grade_read_back_from_the_fleet_must_be_this_prediction_s(tmp_path: Path) -> None:
    """A confused worker, or a store holding another grade: a grade of another patch, another
    run, or one that says rewarded with reward 0 becomes an error, never a resolved result;
    a grade.json nested past the parser's depth too."""
    from runner.artifacts.store import open_store
    from runner.batch.evalsources import EvalTask
    from runner.worker.evalfleet import FleetGrade, _result

    store = open_store(f"file://{tmp_path / 'store'}", cache=tmp_path / "cache")
    preds = tmp_path / "p.jsonl"
    preds.write_text(line(instance_id="t", model_name_or_path="m", model_patch="diff\n"))
    (prediction,), _ = read_jsonl(preds, tmp_path / "patches")
    task = EvalTask(
        task_id="t", bundle=tmp_path, digest="d", difficulty="easy", repository="r", weight=1.0
    )
    instance = Instance(prediction=prediction, task=task, key="k" * 64)
    options = FleetGrade(
        address="x:1", namespace="n", task_queue="q", store=store, concurrency=1, max_attempts=1
    )
    reward = {
        "reward": 1,
        "patch_applied": 1,
        "fail_to_pass": 1,
        "pass_to_pass": 1,
        "deterministic": 1,
        "setup_completed": 1,
    }
    own = {
        "taskId": "t",
        "verdict": "rewarded",
        "detail": "reward 1",
        "reward": reward,
        "census": "sealed",
        "patch": f"/w/cache/blobs/{prediction.patch_sha256}",
        "patchBytes": prediction.patch_bytes,
        "runId": "r",
    }
    run = store.url.run_address("k" * 64)

    def graded(document: object, where: str = run) -> str:
        digest = store.put_json(document)
        return _result(store, instance, {"gradeReport": digest, "run": where}, options).status

    assert graded(own) == "resolved"
    assert graded({**own, "patch": "/w/cache/blobs/" + "0" * 64}) == "error"
    assert graded({**own, "patchBytes": 1}) == "error"
    assert graded({**own, "taskId": "other"}) == "error"
    assert graded(own, where="../../../../etc/passwd") == "error"
    assert graded({**own, "reward": {**reward, "reward": 0}}) == "error"
    assert graded({**own, "rewardOnly": True}) == "error"
    assert graded({**own, "census": "unsealed"}) == "error"
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    digest = store.put_file(deep)
    assert _result(store, instance, {"gradeReport": digest, "run": run}, options).status == "error"


def test_a_lost_engine_s_prediction_moves_and_the_engine_rejoins_once_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler over two engines, its grade children and the engines' answers scripted:
    engine a stops answering under a grade (no report), which is graded again although no retry
    is allowed (a lost engine is not the prediction's failure); once a answers again the
    containers of its stranded grade are removed by run id, and it takes predictions again."""
    from runner.batch import engines as engine_pool
    from runner.batch import evaluation as scheduler
    from runner.batch.evalsources import EvalTask
    from runner.batch.model import EngineSpec
    from runner.supervise.job import GradeJob

    monkeypatch.setattr(engine_pool, "LOST_ENGINE_LOOK_SECONDS", 0.0)
    answers = {"a": True, "b": True}
    pings: list[str] = []

    def ping(engine: engine_pool.Engine) -> str | None:
        pings.append(engine.spec.name)
        return None if answers[engine.spec.name] else "connection refused"

    removed: list[tuple[str, list[str]]] = []

    def remove_runs(engine: engine_pool.Engine, run_ids: list[str]) -> int:
        removed.append((engine.spec.name, list(run_ids)))
        return 2 * len(run_ids)

    monkeypatch.setattr(engine_pool, "ping", ping)
    monkeypatch.setattr(scheduler, "ping", ping)
    monkeypatch.setattr(engine_pool, "remove_runs", remove_runs)
    graded: list[tuple[str, str]] = []  # (prediction, engine)

    class Child:
        def __init__(self, job: GradeJob) -> None:
            self.job, self.pid = job, 0
            engine = "a" if job.env["DOCKER_HOST"].endswith("a.sock") else "b"
            self.code = 0
            if engine == "a" and not answers["a"]:
                self.code = 3  # the engine went away under it: no report
            else:
                reward = dict.fromkeys(
                    ("reward", "patch_applied", "fail_to_pass", "pass_to_pass"), 1
                ) | {"deterministic": 1, "setup_completed": 1}
                document = {"verdict": "rewarded", "detail": "reward 1", "reward": reward,
                            "runId": job.run_id, "logs": []}  # fmt: skip
                (job.run_dir / "grade.json").write_text(json.dumps(document))
                graded.append((job.patch.name, engine))

        def poll(self) -> int:
            return self.code

        def wait(self, timeout: float | None = None) -> int:
            return self.code

        def send_signal(self, signum: int) -> None:
            pass

    class Launcher:
        def start(self, job: GradeJob) -> Child:
            if len(graded) == 1:
                answers["a"] = False  # a stops answering once the first grade has ended
            return Child(job)

        def close(self) -> None:
            pass

    out = tmp_path / "out"
    (out / "results").mkdir(parents=True)
    options = scheduler.EvaluateOptions(
        out=out,
        engines=[
            EngineSpec(name="a", url="unix:///run/a.sock", capacity=1),
            EngineSpec(name="b", url="unix:///run/b.sock", capacity=1),
        ],
        jobs=1,
        retries=0,
    )
    notes: list[str] = []
    evaluation = scheduler.Evaluation(options, scheduler.EvaluateProgress(note=notes.append))
    evaluation.launcher = Launcher()  # type: ignore[assignment]
    todo = []
    for index in range(4):
        patch = tmp_path / f"p{index}.patch"
        patch.write_text("x")
        task = EvalTask(
            task_id=f"t{index}", bundle=tmp_path, digest="d", difficulty="easy",
            repository="r", weight=1.0,
        )  # fmt: skip
        prediction = model.Prediction(
            instance_id=task.task_id, model="m", patch_sha256="s", patch_bytes=1, patch=patch,
            where="p",
        )  # fmt: skip
        todo.append(Instance(prediction=prediction, task=task, key=f"k{index}"))

    original_reap = evaluation._reap

    def reap(plan: scheduler._Plan, total: int) -> int:
        ended = original_reap(plan, total)
        if any("left the pool" in n for n in notes) and not answers["a"]:
            answers["a"] = True  # it comes back
        return ended

    evaluation._reap = reap  # type: ignore[method-assign]
    results = evaluation.run(todo)
    assert sorted(r.status for r in results) == ["resolved"] * 4
    assert any(n.startswith("engine a left the pool: connection refused") for n in notes), notes
    assert "engine a rejoins the pool" in notes, notes
    # The grade a lost was running was graded again (once: retries=0 did not stop it).
    assert len(graded) == 4 and len({p for p, _ in graded}) == 4
    stranded = [ids for name, ids in removed if name == "a" and ids]
    assert len(stranded) == 1 and stranded[0][0].startswith(f"eval-{evaluation.evaluation_id}-")
    # a took predictions again after it rejoined.
    rejoined = notes.index("engine a rejoins the pool")
    assert rejoined and [e for _, e in graded].count("a") >= 2, graded
