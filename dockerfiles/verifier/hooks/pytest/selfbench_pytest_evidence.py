"""The verifier's pytest plugin (one of pytest's default plugins, by selfbench_evidence_boot): one
signed record per test with its final outcome, the files of the plugins and conftest modules
pytest loaded, and the session's exit status when it finishes, sent to the verifier's collector.

Only the outermost session of the verifier's run records: its recorder is registered with that
session's plugin manager alone, so a session the tests start (pytester's, inline or in a
subprocess) reports nothing here; pytest-xdist workers report to their controller.

Each test's record is checked against what pytest itself did, so that results cannot be made
up inside the process: the test function must have been called by pytest (an outermost wrapper
of pytest_pyfunc_call sees it run, and sees it raise), the report logged must be the one pytest
made for that call, the function must be the one collected and not code the agent's patch wrote,
and pytest's own functions and any trace or profile function must be the ones the session began
with. A mismatch is a `tamper` record: the verifier fails the run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import selfbench_evidence_boot as _boot

_EMIT, _SESSIONS = _boot.channel()
_AGENT = _boot.AGENT_FILES


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
    ("pluggy._callers", "_multicall"),
)
_WATCHED_METHODS = (
    ("_pytest.reports", "TestReport", "from_item_and_call"),
    ("_pytest.reports", "BaseReport", "passed"),
    ("_pytest.reports", "BaseReport", "failed"),
    ("_pytest.reports", "BaseReport", "skipped"),
    ("_pytest.runner", "CallInfo", "from_call"),
    ("_pytest.python", "Function", "runtest"),
    ("pluggy._hooks", "HookCaller", "__call__"),
    ("pluggy._manager", "PluginManager", "_hookexec"),
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


def _function_of(item: Any) -> Any:
    obj = getattr(item, "obj", None)
    return getattr(obj, "__func__", obj)


class _Recorder:
    def __init__(self, config: Any) -> None:
        import _pytest.python

        self.root = str(getattr(config, "rootpath", None) or config.rootdir)
        self.outcomes: dict[str, str] = {}
        # (nodeid, phase): how the call itself ended, when it did not pass ("raised", "skipped").
        self.raised: dict[tuple[str, str], str] = {}
        self.made: set[tuple[str, str]] = set()  # reports pytest's makereport produced
        self.called: dict[str, str] = {}  # nodeid: how its function ended ("ok", "raised")
        self.collected: dict[str, tuple[int, int]] = {}  # nodeid: (function, code) identities
        self.function_runtest = _pytest.python.Function.runtest
        self.done = False
        self.watched = _watched()
        self.tracers = (sys.gettrace(), sys.getprofile())

    def write(self, **event: object) -> None:
        if _EMIT is not None:
            _EMIT(**event)

    def tamper(self, what: str) -> None:
        self.write(t="tamper", runner="pytest", what=what)

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

    def integrity(self, nodeid: str) -> None:
        """pytest's functions and the trace and profile functions as the session began."""
        now = _watched()
        changed = sorted(name for name, ident in self.watched.items() if now.get(name) != ident)
        if changed:
            self.watched = now  # said once
            self.tamper("pytest's own code was replaced while the tests ran: " + ", ".join(changed))
        tracers = (sys.gettrace(), sys.getprofile())
        if tracers != self.tracers:
            for tracer in tracers:
                code = getattr(getattr(tracer, "__func__", tracer), "__code__", None)
                if code is not None and code.co_filename in _AGENT:
                    self.tamper(f"a trace or profile function of {code.co_filename} ran with {nodeid}")
            self.tracers = tracers

    # ---- hooks of this session's plugin manager only ----

    import pytest as _pytest_module

    @_pytest_module.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            function = _function_of(item)
            code = getattr(function, "__code__", None)
            self.collected[item.nodeid] = (id(function), id(code))

    @_pytest_module.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: Any) -> Any:
        """Outermost: the test function, as pytest calls it."""
        outcome = yield
        self.called[pyfuncitem.nodeid] = "raised" if outcome.excinfo is not None else "ok"

    @_pytest_module.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        """Innermost: what the call itself did, before any wrapper sees the report."""
        nodeid, when = item.nodeid, call.when
        excinfo = getattr(call, "excinfo", None)
        if excinfo is not None:
            import _pytest.outcomes as outcomes

            if excinfo.errisinstance(outcomes.XFailed):
                pass  # pytest.xfail(): an expected failure, reported as such
            elif excinfo.errisinstance(outcomes.Skipped):
                self.raised[(nodeid, when)] = "skipped"
            else:
                self.raised[(nodeid, when)] = "raised"
        if when == "call":
            self.check_call(item)
        self.made.add((nodeid, when))
        yield

    def check_call(self, item: Any) -> None:
        nodeid = item.nodeid
        function = _function_of(item)
        code = getattr(function, "__code__", None)
        if nodeid in self.collected and self.collected[nodeid] != (id(function), id(code)):
            self.tamper(f"{nodeid}: its test function was replaced after collection")
            self.raised[(nodeid, "call")] = "raised"
        if code is not None and code.co_filename in _AGENT:
            self.tamper(f"{nodeid}: its test function is code the agent's patch wrote")
            self.raised[(nodeid, "call")] = "raised"
        plain = type(item).runtest is self.function_runtest
        if plain and nodeid in self.collected:
            how = self.called.pop(nodeid, None)
            if how is None:
                self.tamper(f"{nodeid} was reported without pytest calling its function")
                self.raised[(nodeid, "call")] = "raised"
            elif how == "raised" and (nodeid, "call") not in self.raised:
                self.raised[(nodeid, "call")] = "raised"

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
        if (nodeid, report.when) not in self.made:
            self.tamper(f"{nodeid}: a {report.when} report that pytest did not make was logged")
            self.outcomes[nodeid] = "failed"
            return
        self.made.discard((nodeid, report.when))
        ended = self.raised.pop((nodeid, report.when), None)
        if report.passed and not xfail and ended is not None:
            self.tamper(f"{nodeid} {ended} in its {report.when} but was reported passed")
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
        self.integrity(nodeid)
        outcome = self.outcomes.pop(nodeid, None)
        if outcome is not None:
            self.test(nodeid, outcome)

    def pytest_sessionfinish(self, session: Any, exitstatus: object) -> None:
        if self.done:
            return
        self.done = True
        # A test whose protocol never reached its end was cut (pytest.exit() or an interrupt in
        # its call: the session then ends with any status the caller chose, 0 included). Its
        # setup passed at most: it did not pass.
        for nodeid in list(self.outcomes):
            self.test(nodeid, "error")
        self.outcomes.clear()
        self.integrity("the session's end")
        self.write(t="finish", runner="pytest", status=int(exitstatus))  # type: ignore[call-overload]


_configured: list[bool] = []


def pytest_configure(config: Any) -> None:
    if _EMIT is None or hasattr(config, "workerinput"):  # an xdist worker: the controller
        return
    if _configured:
        return
    opened = not _SESSIONS.get("pytest")  # not opened at start-up: pytest.main() from a script
    if opened:
        if not _boot._claim("pytest"):
            return
        _SESSIONS["pytest"] = True
    _configured.append(True)
    import pytest

    recorder = _Recorder(config)
    recorder.write(t="start" if opened else "version", runner="pytest", version=pytest.__version__)
    for plugin in config.pluginmanager.get_plugins():
        recorder.plugin(plugin)
    config.pluginmanager.register(recorder, "selfbench-evidence-recorder")
