"""The verifier's pytest plugin (one of pytest's default plugins, by selfbench_evidence_boot): one
JSON line per test with its final outcome, the files of the plugins and conftest modules under
/app that pytest loaded, and the session's exit status when it finishes.

Only the outermost session of the verifier's run records: its recorder is registered with that
session's plugin manager alone, so a session the tests start (pytester's, inline or in a
subprocess) reports nothing here; pytest-xdist workers report to their controller.
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


class _Recorder:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.root = str(getattr(config, "rootpath", None) or config.rootdir)
        self.outcomes: dict[str, str] = {}
        self.handle: Any = None
        self.done = False

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
        path = getattr(plugin, "__file__", None)
        if isinstance(path, str):
            real = os.path.realpath(path)
            if real.startswith("/app/"):
                self.write(t="plugin", runner="pytest", file=real)

    # ---- hooks of this session's plugin manager only ----

    def pytest_plugin_registered(self, plugin: object, manager: object) -> None:
        self.plugin(plugin)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.test(report.nodeid or "<collection>", "error")

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid = report.nodeid
        current = self.outcomes.get(nodeid)
        xfail = hasattr(report, "wasxfail")
        if report.when == "call":
            if report.passed:
                outcome = "passed"  # an xpass that is not strict passes
            elif report.skipped:
                outcome = "passed" if xfail else "skipped"  # an xfail passes, as in SWE-bench
            else:
                outcome = "failed"
            self.outcomes[nodeid] = outcome if current in (None, "passed") else current
        elif report.failed:
            self.outcomes[nodeid] = "error"
        elif report.skipped and current is None:
            self.outcomes[nodeid] = "passed" if xfail else "skipped"
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
