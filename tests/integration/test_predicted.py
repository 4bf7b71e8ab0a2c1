"""Predicted patches on a real engine: the oracle's verifier starts on the patch its agent side
made last time; that run counts only when this run collects the very same bytes. A prediction
planted in the cache (one the tests fail on, or one they pass on while the gold does not)
never changes the oracle's result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import LIB_GOLD, bash_task
from tests.integration.conftest import FAST, Run, run_verify


@pytest.fixture
def cache(fresh_cache: Path) -> Path:
    return fresh_cache / "predicted-patches"


def predicted(run: Run) -> str | None:
    value = run.stage("oracle")["data"].get("predictedPatch")
    return None if value is None else str(value)


def entry_of(cache: Path) -> Path:
    [entry] = cache.glob("*.patch")
    return entry


def test_a_confirmed_prediction_counts_and_a_planted_one_is_set_aside(
    tmp_path: Path, verify_options: list[str], cache: Path
) -> None:
    task = bash_task(tmp_path, name="predicted").directory
    first = run_verify(task, verify_options, tmp_path / "first", *FAST)
    assert first.report["verdict"] == "accepted", first.report["reason"]
    assert predicted(first) is None
    gold = (first.run_dir / "oracle" / "agent.patch").read_bytes()
    assert entry_of(cache).read_bytes() == gold

    second = run_verify(task, verify_options, tmp_path / "second", *FAST)
    assert second.report["verdict"] == "accepted", second.report["reason"]
    assert predicted(second) == "confirmed"
    gate = second.run_dir / "oracle"
    assert json.loads((gate / "logs" / "verifier" / "reward.json").read_text())["reward"] == 1
    assert (gate / "verifier.log").is_file() and not (gate / "predicted").exists()

    # A planted prediction the tests fail on (no change at all): the gold is verified afresh.
    entry_of(cache).write_bytes(b"")
    third = run_verify(task, verify_options, tmp_path / "third", *FAST)
    assert third.report["verdict"] == "accepted", third.report["reason"]
    assert predicted(third) == "mismatched"
    set_aside = third.run_dir / "oracle" / "predicted" / "logs" / "verifier" / "reward.json"
    assert json.loads(set_aside.read_text())["reward"] == 0  # it ran on the planted patch
    assert entry_of(cache).read_bytes() == gold


def test_a_planted_passing_patch_cannot_pass_a_wrong_gold(
    tmp_path: Path, verify_options: list[str], cache: Path
) -> None:
    good = bash_task(tmp_path, name="predicted-good")
    # A gold that shouts the wrong word: the fail-to-pass test fails on it.
    wrong_gold = LIB_GOLD.replace('shout() { shout_0 "$@"; }', "shout() { shout_0 no; }")
    assert wrong_gold != LIB_GOLD
    wrong = bash_task(tmp_path, name="predicted-wrong", gold={"lib.sh": wrong_gold})
    first = run_verify(wrong.directory, verify_options, tmp_path / "first", *FAST)
    assert first.stage("oracle")["status"] == "failed", first.report["reason"]
    # The right fix (both repositories start from the same lib.sh), planted as the prediction.
    entry_of(cache).write_bytes((good.directory / "gold.patch").read_bytes())

    second = run_verify(wrong.directory, verify_options, tmp_path / "second", *FAST)
    assert second.report["verdict"] == "rejected"
    assert second.stage("oracle")["status"] == "failed"
    assert predicted(second) == "mismatched"
    set_aside = second.run_dir / "oracle" / "predicted" / "logs" / "verifier" / "reward.json"
    assert json.loads(set_aside.read_text())["reward"] == 1  # the planted patch did pass
