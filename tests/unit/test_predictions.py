"""The store of predicted patches: what a key covers, stable and unstable keys, the bounds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.model import predictions
from runner.model.predictions import PatchPredictions, prediction_key, tree_digest


def solution(tmp_path: Path) -> Path:
    directory = tmp_path / "solution"
    directory.mkdir()
    (directory / "solve.sh").write_text("git apply /solution/gold.patch\n")
    (directory / "gold.patch").write_text("diff --git a/x b/x\n")
    return directory


def test_the_tree_digest_sees_contents_names_modes_and_links(tmp_path: Path) -> None:
    directory = solution(tmp_path)
    before = tree_digest(directory)
    assert tree_digest(directory) == before
    (directory / "solve.sh").chmod(0o755)
    executable = tree_digest(directory)
    assert executable != before
    (directory / "solve.sh").write_text("git apply /solution/gold.patch # \n")
    assert tree_digest(directory) != executable
    (directory / "gold.patch").rename(directory / "other.patch")
    renamed = tree_digest(directory)
    os.symlink("other.patch", directory / "link")
    assert tree_digest(directory) != renamed


def test_the_key_is_canonical() -> None:
    assert prediction_key({"a": 1, "b": [2]}) == prediction_key({"b": [2], "a": 1})
    assert prediction_key({"a": 1}) != prediction_key({"a": 2})


def test_a_key_is_predicted_until_its_patch_changes_then_again_once_two_runs_agree(
    tmp_path: Path,
) -> None:
    store = PatchPredictions(tmp_path)
    assert store.predict("k") is None
    store.record("k", b"one", predicted=None)
    assert store.predict("k") == b"one"
    store.record("k", b"one", predicted=b"one")
    assert store.predict("k") == b"one"
    store.record("k", b"two", predicted=b"one")  # mispredicted: unstable
    assert store.predict("k") is None
    store.record("k", b"three", predicted=None)  # still changing
    assert store.predict("k") is None
    store.record("k", b"three", predicted=None)  # two runs agree
    assert store.predict("k") == b"three"


def test_an_empty_patch_is_a_prediction(tmp_path: Path) -> None:
    store = PatchPredictions(tmp_path)
    store.record("k", b"", predicted=None)
    assert store.predict("k") == b""


def test_large_patches_are_not_kept_and_old_entries_go_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PatchPredictions(tmp_path)
    store.record("big", b"x" * (predictions.MAX_PATCH_BYTES + 1), predicted=None)
    assert store.predict("big") is None
    assert not (store.directory / "big.patch").exists()
    monkeypatch.setattr(predictions, "MAX_ENTRIES", 3)
    for index in range(5):
        store.record(f"k{index}", b"p", predicted=None)
        os.utime(store.directory / f"k{index}.patch", (1000 + index, 1000 + index))
    store.record("k5", b"p", predicted=None)
    assert sorted(p.name for p in store.directory.glob("*.patch")) == [
        "k3.patch",
        "k4.patch",
        "k5.patch",
    ]


def test_a_store_that_cannot_be_written_costs_only_the_prediction(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = PatchPredictions(blocker)
    store.record("k", b"patch", predicted=None)  # no exception
    assert store.predict("k") is None
