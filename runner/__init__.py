"""selfbench-runner: compile, build and verify SelfBench tasks as native Harbor bundles."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("selfbench-runner")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
