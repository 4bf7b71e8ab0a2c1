"""selfbench-runner: compile, build and verify SelfBench tasks as native Harbor bundles."""

# The one place the version is written (pyproject.toml reads it from here): importlib.metadata
# would cost every command ~50 ms of start-up.
__version__ = "0.1.0"

__all__ = ["__version__"]
