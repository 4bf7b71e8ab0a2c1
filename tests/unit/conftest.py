from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Unit tests never touch the user's ~/.cache/selfbench-runner."""
    path = tmp_path_factory.getbasetemp() / "selfbench-cache"
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(path))
    return path
