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
