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
