"""The build-step cache's index: a step key's image id remembered in the cache, anything else in
its file ignored (the engine's inspect then decides whether the image is still there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.engine.stepcache import STEP_INDEX, remember_step, remembered_step, step_key


def test_a_step_key_s_image_is_remembered_and_a_bad_file_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(tmp_path))
    key = step_key("sha256:" + "a" * 64, ("bash", "setup.sh"), {"X": "1"}, "root", "/app")
    assert key != step_key("sha256:" + "b" * 64, ("bash", "setup.sh"), {"X": "1"}, "root", "/app")
    assert remembered_step(key) is None
    image = "sha256:" + "c" * 64
    remember_step(key, image)
    assert remembered_step(key) == image
    (tmp_path / STEP_INDEX / key).write_text("../../etc/passwd\n")
    assert remembered_step(key) is None


def test_an_image_made_during_the_build_is_new_and_an_older_or_unreadable_one_is_not() -> None:
    from datetime import UTC, datetime

    from runner.engine.stepcache import made_since

    began = datetime(2026, 12, 3, 21, 8, 42, 500000, tzinfo=UTC).timestamp()
    # The engine's own form: nanoseconds, Z.
    assert made_since("2026-12-03T21:08:42.600000001Z", began)
    assert not made_since("2026-12-03T21:08:42.400000001Z", began)
    assert made_since("2026-12-03T22:08:43+01:00", began)  # 21:08:43 UTC
    assert not made_since("2026-12-03T21:08:42Z", began)
    for unreadable in ("", "0001-01-01T00:00:00", "yesterday", "2026-12-03 21:08:43Z"):
        assert not made_since(unreadable, began)


def test_the_engine_s_steps_are_read_once_per_interval_per_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.engine.stepcache import SCAN_INTERVAL_SECONDS, claim_scan

    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(tmp_path))
    now = 1_800_000_000.0
    assert claim_scan("unix:///var/run/docker.sock", now=now)
    # Callers meanwhile trust the index (they would all list the engine otherwise).
    assert not claim_scan("unix:///var/run/docker.sock", now=now + 1)
    assert not claim_scan("unix:///var/run/docker.sock", now=now + SCAN_INTERVAL_SECONDS - 1)
    # Another engine's reading says nothing of this one's images.
    assert claim_scan("tcp://builder:2376", now=now + 1)
    assert claim_scan("unix:///var/run/docker.sock", now=now + SCAN_INTERVAL_SECONDS + 1)
    # A clock set back (the marker from the future) does not stop readings for good.
    assert claim_scan("tcp://builder:2376", now=now - 3600)


def test_a_reading_remembers_each_step_s_own_image_not_the_ones_built_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.engine.stepcache import index_steps
    from runner.plan.labels import LABEL_STEP

    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(tmp_path))
    base, setup, final, tagged, other = ("sha256:" + c * 64 for c in "01234")
    first, second = "a" * 64, "b" * 64
    listing = [
        # Newest first, as the engine lists them: the task's image (a commit of the final
        # step's configuration, its label inherited), the final step, the setup step.
        {"Id": tagged, "ParentId": final, "Labels": {LABEL_STEP: second, "x": "1"}},
        {"Id": final, "ParentId": setup, "Labels": {LABEL_STEP: second}},
        {"Id": setup, "ParentId": base, "Labels": {LABEL_STEP: first}},
        # Not a step of ours, whatever it says.
        {"Id": other, "ParentId": base, "Labels": {LABEL_STEP: "../../etc/passwd"}},
        {"Id": "not-an-id", "ParentId": base, "Labels": {LABEL_STEP: "c" * 64}},
    ]
    assert index_steps(listing) == 2
    assert remembered_step(first) == setup
    assert remembered_step(second) == final
    assert remembered_step("c" * 64) is None
    assert sorted(p.name for p in (tmp_path / STEP_INDEX).iterdir()) == [first, second]
    # Read again: nothing new; an entry for a removed image is replaced by the engine's.
    assert index_steps(listing) == 0
    remember_step(first, "sha256:" + "9" * 64)
    assert index_steps(listing) == 1
    assert remembered_step(first) == setup
