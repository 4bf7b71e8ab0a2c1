"""The verifier's pytest plugin (one of pytest's default plugins, by selfbench_evidence_boot): one
JSON line per test with its final outcome, the files of the plugins and conftest modules under
/app that pytest loaded, and the session's exit status when it finishes.

Only the outermost session of the verifier's run records: its recorder is registered with that
session's plugin manager alone, so a session the tests start (pytester's, inline or in a
subprocess) reports nothing here; pytest-xdist workers report to their controller.

It also watches for results rewritten in the process: a test whose call raised (not a skip, not
an expected failure) reported as passed by the time it is logged (a hookwrapper, anyone's, that
changes the report), and pytest's own functions replaced while the tests ran (code under test
patching the runner). Either is written as a `tamper` event: the verifier fails the run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_DIRECTORY = os.environ.get("SELFBENCH_EVIDENCE_DIR", "")
OWNER = "SELFBENCH_EVIDENCE_OWNER"
_claimed: list[object] = []


def _claim() -> bool:
    """The first session of the first process to ask records (a subprocess sees the owner)."""
    if _claimed:
        return False
    owner = os.environ.get(OWNER)
    if owner and owner != f"pytest:{os.getpid()}":
        return False
    os.environ[OWNER] = f"pytest:{os.getpid()}"
    return True


# pytest's functions that produce a test's outcome and report: replaced while the tests run,
# they can report anything.
_WATCHED = (
    ("_pytest.runner", "call_and_report"),
    ("_pytest.runner", "runtestprotocol"),
    ("_pytest.runner", "call_runtest_hook"),
    ("_pytest.runner", "pytest_runtest_makereport"),
    ("_pytest.runner", "CallInfo"),
    ("_pytest.reports", "TestReport"),
    ("_pytest.python", "pytest_pyfunc_call"),
    ("_pytest.skipping", "pytest_runtest_makereport"),
    ("_pytest.main", "pytest_runtestloop"),
    ("_pytest.outcomes", "fail"),
    ("_pytest.outcomes", "skip"),
    ("_pytest.outcomes", "exit"),
)
_WATCHED_METHODS = (
    ("_pytest.reports", "TestReport", "from_item_and_call"),
    ("_pytest.python", "Function", "runtest"),
)


def _watched() -> dict[str, int]:
    found: dict[str, int] = {}
    for module_name, name in _WATCHED:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, name):
            found[f"{module_name}.{name}"] = id(getattr(module, name))
    for module_name, cls, name in _WATCHED_METHODS:
        owner = getattr(sys.modules.get(module_name), cls, None)
        if owner is not None and name in vars(owner):
            found[f"{module_name}.{cls}.{name}"] = id(vars(owner)[name])
    return found


class _Recorder:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.root = str(getattr(config, "rootpath", None) or config.rootdir)
        self.outcomes: dict[str, str] = {}
        # (nodeid, phase): how the call itself ended, when it did not pass ("raised", "skipped").
        self.raised: dict[tuple[str, str], str] = {}
        self.handle: Any = None
        self.done = False
        self.watched = _watched()

    def write(self, **event: object) -> None:
        try:
            if self.handle is None:
                path = os.path.join(_DIRECTORY, f"py-pytest-{os.getpid()}.jsonl")
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                self.handle = os.fdopen(os.open(path, flags, 0o600), "a", buffering=1)
            self.handle.write(json.dumps(event, ensure_ascii=True) + "\n")
        except OSError:
            pass

    def file_of(self, nodeid: str) -> str:
        return os.path.normpath(os.path.join(self.root, nodeid.split("::", 1)[0]))

    def test(self, nodeid: str, outcome: str) -> None:
        self.write(t="test", runner="pytest", id=nodeid, file=self.file_of(nodeid), outcome=outcome)

    def plugin(self, plugin: object) -> None:
        """Every plugin and conftest module's file: the verifier vouches for those that were in the
        prepared tree, unchanged, or that no test process could have written."""
        path = getattr(plugin, "__file__", None)
        if isinstance(path, str) and plugin is not sys.modules.get(__name__):
            self.write(t="plugin", runner="pytest", file=os.path.realpath(path))

    # ---- hooks of this session's plugin manager only ----

    import pytest as _pytest_module

    @_pytest_module.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        """Innermost: what the call itself did, before any wrapper sees the report."""
        excinfo = getattr(call, "excinfo", None)
        if excinfo is not None:
            import _pytest.outcomes as outcomes

            if excinfo.errisinstance(outcomes.XFailed):
                pass  # pytest.xfail(): an expected failure, reported as such
            elif excinfo.errisinstance(outcomes.Skipped):
                self.raised[(item.nodeid, call.when)] = "skipped"
            else:
                self.raised[(item.nodeid, call.when)] = "raised"
        yield

    del _pytest_module

    def pytest_plugin_registered(self, plugin: object, manager: object) -> None:
        self.plugin(plugin)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.test(report.nodeid or "<collection>", "error")

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid = report.nodeid
        current = self.outcomes.get(nodeid)
        xfail = hasattr(report, "wasxfail")
        ended = self.raised.pop((nodeid, report.when), None)
        if report.passed and not xfail and ended is not None:
            self.write(
                t="tamper",
                runner="pytest",
                what=f"{nodeid} {ended} in its {report.when} but was reported passed",
            )
            self.outcomes[nodeid] = "failed"
            return
        # An expected failure and an unexpected pass are outcomes of their own: neither passes a
        # fail-to-pass test (pytest.xfail() called from the code under test is one).
        if report.when == "call":
            if report.passed:
                outcome = "xpassed" if xfail else "passed"
            elif report.skipped:
                outcome = "xfailed" if xfail else "skipped"
            else:
                outcome = "failed"
            self.outcomes[nodeid] = outcome if current in (None, "passed") else current
        elif report.failed:
            self.outcomes[nodeid] = "error"
        elif report.skipped and current is None:
            self.outcomes[nodeid] = "xfailed" if xfail else "skipped"
        elif current is None and report.when == "setup":
            self.outcomes[nodeid] = "passed"

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        outcome = self.outcomes.pop(nodeid, None)
        if outcome is not None:
            self.test(nodeid, outcome)

    def pytest_sessionfinish(self, session: Any, exitstatus: object) -> None:
        if self.done:
            return
        self.done = True
        for nodeid, outcome in list(self.outcomes.items()):
            self.test(nodeid, outcome)
        self.outcomes.clear()
        now = _watched()
        changed = sorted(name for name, ident in self.watched.items() if now.get(name) != ident)
        if changed:
            self.write(
                t="tamper",
                runner="pytest",
                what="pytest's own code was replaced while the tests ran: " + ", ".join(changed),
            )
        self.write(t="finish", runner="pytest", status=int(exitstatus))  # type: ignore[call-overload]


def pytest_configure(config: Any) -> None:
    if not _DIRECTORY or hasattr(config, "workerinput"):  # an xdist worker: the controller
        return
    if not _claim():
        return
    import pytest

    recorder = _Recorder(config)
    _claimed.append(recorder)
    recorder.write(
        t="start", runner="pytest", version=pytest.__version__, python=sys.version.split()[0]
    )
    for plugin in config.pluginmanager.get_plugins():
        recorder.plugin(plugin)
    config.pluginmanager.register(recorder, "selfbench-evidence-recorder")
