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
    plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p.strip()]
    if "selfbench_pytest_evidence" not in plugins:
        os.environ["PYTEST_PLUGINS"] = ",".join([*plugins, "selfbench_pytest_evidence"])
    _hook_unittest(directory)


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

    def record(result: object, test: object, outcome: str) -> None:
        if not claim(result):
            return
        test_id = test.id() if hasattr(test, "id") else str(test)
        writer.write(t="test", runner="unittest", id=test_id, file=_source_file(test),
                     outcome=outcome)

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
        ("addExpectedFailure", "passed"),
        ("addUnexpectedSuccess", "failed"),
    ):
        wrap(name, outcome)
    original_subtest = base.addSubTest

    def add_subtest(self, test, subtest, err):  # type: ignore[no-untyped-def]
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            record(self, subtest, "failed" if failed else "error")
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
