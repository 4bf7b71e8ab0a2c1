from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Unit tests never touch the user's ~/.cache/selfbench-runner, nor its signing key (one of
    their own, under ~/.config's stand-in)."""
    path = tmp_path_factory.getbasetemp() / "selfbench-cache"
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "config"))
    monkeypatch.delenv("SELFBENCH_SIGNING_KEY", raising=False)
    monkeypatch.delenv("SELFBENCH_TRUSTED_KEYS", raising=False)
    return path
