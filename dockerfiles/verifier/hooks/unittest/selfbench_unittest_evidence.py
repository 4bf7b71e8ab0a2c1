"""unittest's recorder, in the verifier's evidence boot (hooks/python/selfbench_evidence_boot.py):
installed beside it in each site directory, loaded when `unittest.result` loads (the
vocabulary's `runners.unittest.python`). It wraps unittest's base TestResult, so that every
runner built on it records each test's outcome, and the outermost run's end."""

from __future__ import annotations

import os
import sys

# Bound as this module loads, before any test module: code under test rebinding the boot's
# names later changes nothing here.
from selfbench_evidence_boot import _claim


def _source_file(test: object) -> str | None:
    module = sys.modules.get(type(test).__module__)
    path = getattr(module, "__file__", None)
    return os.path.realpath(path) if path else None


def loaded(result, emit, sessions: dict[str, bool]) -> None:  # type: ignore[no-untyped-def]
    """Wrap unittest's base TestResult (of the module `result`, as it loads): every runner built
    on it (unittest's own, Django's, green's text results) reports through these methods."""
    base = result.TestResult
    if getattr(base, "_selfbench_hooked", False):
        return
    owner: list[object] = []

    def claim(result: object) -> bool:
        """The first result of the outermost run records."""
        if owner:
            return owner[0] is result
        if not sessions.get("unittest"):
            if not _claim("unittest"):
                return False
            emit(t="start", runner="unittest", python=sys.version.split()[0])
            sessions["unittest"] = True
        owner.append(result)
        return True

    def record(result: object, test: object, outcome: str, case: object = None) -> None:
        if not claim(result):
            return
        test_id = test.id() if hasattr(test, "id") else str(test)
        emit(
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
            emit(t="finish", runner="unittest", status=0 if self.wasSuccessful() else 1)
        return original_stop(self)

    base.stopTestRun = stop_test_run  # type: ignore[method-assign]
    base._selfbench_hooked = True  # type: ignore[attr-defined]
