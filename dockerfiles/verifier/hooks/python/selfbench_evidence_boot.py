"""Loaded at every Python start-up in the verifier image (selfbench-evidence.pth, installed in
each site directory at build time). It does nothing unless the verifier's test run set
SELFBENCH_EVIDENCE_DIR: then pytest loads the evidence plugin beside this file, and unittest's
results are recorded, one JSON line per test, in that directory.
"""

import os

OWNER = "SELFBENCH_EVIDENCE_OWNER"


def _boot() -> None:
    directory = os.environ.get("SELFBENCH_EVIDENCE_DIR")
    if not directory:
        return
    _hook_pytest()
    _hook_unittest(directory)


class _PytestConfigFinder:
    """When pytest's config module loads in this interpreter, the evidence plugin joins its
    default plugins: loaded by every session of this interpreter (with -p no:..., without
    autoload, whatever PYTEST_PLUGINS says), and by no other interpreter (an environment
    variable would reach a virtualenv made while the tests run, which lacks the plugin)."""

    def find_spec(self, name: str, path: object, target: object = None) -> object:
        if name != "_pytest.config":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)  # type: ignore[arg-type]
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: object) -> None:
            original(module)
            plugins = getattr(module, "default_plugins", None)
            if isinstance(plugins, tuple) and PLUGIN not in plugins:
                module.default_plugins = (*plugins, PLUGIN)  # type: ignore[attr-defined]

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


PLUGIN = "selfbench_pytest_evidence"


def _hook_pytest() -> None:
    import sys

    if "_pytest.config" in sys.modules:
        return
    sys.meta_path.insert(0, _PytestConfigFinder())  # type: ignore[arg-type]


class _Writer:
    def __init__(self, directory: str, runner: str) -> None:
        self.path = os.path.join(directory, f"py-{runner}-{os.getpid()}.jsonl")
        self.handle = None

    def write(self, **event: object) -> None:
        import json

        try:
            if self.handle is None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                self.handle = os.fdopen(os.open(self.path, flags, 0o600), "a", buffering=1)
            self.handle.write(json.dumps(event, ensure_ascii=True) + "\n")
        except OSError:
            pass


def _source_file(test: object) -> str | None:
    import sys

    module = sys.modules.get(type(test).__module__)
    path = getattr(module, "__file__", None)
    return os.path.realpath(path) if path else None


def _hook_unittest(directory: str) -> None:
    """Wrap unittest's base TestResult: every runner built on it (unittest's own, Django's,
    green's text results) reports through these methods."""
    try:
        import unittest.result as result
    except Exception:
        return
    base = result.TestResult
    if getattr(base, "_selfbench_hooked", False):
        return
    writer = _Writer(directory, "unittest")
    owner: list[object] = []

    def claim(result: object) -> bool:
        """The first result of the outermost run records (a run the tests start, nested here or
        in a subprocess, does not)."""
        if owner:
            return owner[0] is result
        held = os.environ.get(OWNER)
        if held and held != f"unittest:{os.getpid()}":
            return False
        os.environ[OWNER] = f"unittest:{os.getpid()}"
        owner.append(result)
        import sys

        writer.write(t="start", runner="unittest", version=sys.version.split()[0])
        return True

    def record(result: object, test: object, outcome: str, case: object = None) -> None:
        if not claim(result):
            return
        test_id = test.id() if hasattr(test, "id") else str(test)
        writer.write(
            t="test",
            runner="unittest",
            id=test_id,
            file=_source_file(case if case is not None else test),
            outcome=outcome,
        )

    def wrap(name: str, outcome: str) -> None:
        original = getattr(base, name)

        def method(self, test, *args, **kwargs):  # type: ignore[no-untyped-def]
            record(self, test, outcome)
            return original(self, test, *args, **kwargs)

        setattr(base, name, method)

    for name, outcome in (
        ("addSuccess", "passed"),
        ("addFailure", "failed"),
        ("addError", "error"),
        ("addSkip", "skipped"),
        ("addExpectedFailure", "xfailed"),
        ("addUnexpectedSuccess", "failed"),
    ):
        wrap(name, outcome)
    original_subtest = base.addSubTest

    def add_subtest(self, test, subtest, err):  # type: ignore[no-untyped-def]
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            record(self, subtest, "failed" if failed else "error", test)
        return original_subtest(self, test, subtest, err)

    base.addSubTest = add_subtest  # type: ignore[method-assign]
    original_stop = base.stopTestRun

    def stop_test_run(self):  # type: ignore[no-untyped-def]
        if owner and owner[0] is self:
            writer.write(t="finish", runner="unittest", status=0 if self.wasSuccessful() else 1)
        return original_stop(self)

    base.stopTestRun = stop_test_run  # type: ignore[method-assign]
    base._selfbench_hooked = True  # type: ignore[attr-defined]


try:
    _boot()
except Exception:  # start-up must never fail because of the verifier's hooks
    pass
