"""Where the templates and the toolchain catalog live: `dockerfiles/` beside the package in a
source tree, `runner/_dockerfiles` in an installed wheel."""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def dockerfiles_dir() -> Path:
    package = Path(__file__).resolve().parents[1]  # runner/, this module is runner/base/
    for candidate in (package / "_dockerfiles", package.parent / "dockerfiles"):
        if (candidate / "toolchains.toml").is_file():
            return candidate
    raise FileNotFoundError(
        "selfbench-runner's dockerfiles/ templates are missing from the install"
    )


def verifier_dir() -> Path:
    """The verifier's helper and reporters, copied into every bundle's tests/selfbench/."""
    return dockerfiles_dir() / "verifier"
