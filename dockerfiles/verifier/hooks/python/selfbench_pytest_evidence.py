"""The verifier's pytest plugin (loaded through PYTEST_PLUGINS by selfbench_evidence_boot): one
JSON line per test with its final outcome, the files of every plugin and conftest module pytest
loaded, and the session's exit status when it finishes. Written by the controlling process only
(pytest-xdist workers report to it).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_DIRECTORY = os.environ.get("SELFBENCH_EVIDENCE_DIR", "")
OWNER = "SELFBENCH_EVIDENCE_OWNER"
_state: dict[str, Any] = {"handle": None, "outcomes": {}, "root": None, "active": False}


def _write(**event: object) -> None:
    if not _DIRECTORY or not _state["active"]:
        return
    try:
        if _state["handle"] is None:
            path = os.path.join(_DIRECTORY, f"py-pytest-{os.getpid()}.jsonl")
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
            _state["handle"] = os.fdopen(os.open(path, flags, 0o600), "a", buffering=1)
        _state["handle"].write(json.dumps(event, ensure_ascii=True) + "\n")
    except OSError:
        pass


def _claim() -> bool:
    """The outermost test session of the verifier's run records; a session its tests start (a
    subprocess with the owner set, or a nested run in this process) does not."""
    owner = os.environ.get(OWNER)
    if owner and owner != f"pytest:{os.getpid()}":
        return False
    os.environ[OWNER] = f"pytest:{os.getpid()}"
    return True


def _ours(config: Any) -> bool:
    return _state["active"] and _state.get("config") is config


def _file_of(nodeid: str) -> str | None:
    root = _state["root"]
    if root is None:
        return None
    return os.path.normpath(os.path.join(root, nodeid.split("::", 1)[0]))


def pytest_configure(config: Any) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller records
        return
    if _state["active"] or not _claim():
        return  # a pytest run inside the tests' own (pytester): not the run being graded
    _state["active"] = True
    _state["config"] = config
    _state["root"] = str(getattr(config, "rootpath", None) or config.rootdir)
    import pytest

    _write(t="start", runner="pytest", version=pytest.__version__, python=sys.version.split()[0])
    for plugin in config.pluginmanager.get_plugins():
        _plugin(plugin)


def _plugin(plugin: object) -> None:
    path = getattr(plugin, "__file__", None)
    if isinstance(path, str):
        _write(t="plugin", runner="pytest", file=os.path.realpath(path))


def pytest_plugin_registered(plugin: object, manager: object) -> None:
    if _state["active"]:
        _plugin(plugin)


def pytest_sessionstart(session: Any) -> None:
    if _ours(session.config):
        _state["session"] = session


def _recording() -> bool:
    return _state["active"] and _state.get("session") is not None and not _state.get("done")


def pytest_collectreport(report: Any) -> None:
    if not _recording():
        return
    if report.failed:
        nodeid = report.nodeid or "<collection>"
        _write(t="test", runner="pytest", id=nodeid, file=_file_of(nodeid), outcome="error")


def pytest_runtest_logreport(report: Any) -> None:
    if not _recording():
        return
    outcomes = _state["outcomes"]
    nodeid = report.nodeid
    current = outcomes.get(nodeid)
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            outcome = "passed"  # an xpass that is not strict passes
        elif report.skipped:
            outcome = "passed" if xfail else "skipped"  # an xfail is a pass, as in SWE-bench
        else:
            outcome = "failed"
        outcomes[nodeid] = outcome if current in (None, "passed") else current
    elif report.failed:
        outcomes[nodeid] = "error"
    elif report.skipped and current is None:
        outcomes[nodeid] = "passed" if xfail else "skipped"
    elif current is None and report.when == "setup":
        outcomes[nodeid] = "passed"


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if not _recording():
        return
    outcome = _state["outcomes"].pop(nodeid, None)
    if outcome is not None:
        _write(t="test", runner="pytest", id=nodeid, file=_file_of(nodeid), outcome=outcome)


def pytest_sessionfinish(session: Any, exitstatus: object) -> None:
    if not _ours(session.config) or _state.get("done"):
        return
    _state["done"] = True
    for nodeid, outcome in list(_state["outcomes"].items()):
        _write(t="test", runner="pytest", id=nodeid, file=_file_of(nodeid), outcome=outcome)
    _state["outcomes"].clear()
    _write(t="finish", runner="pytest", status=int(exitstatus))  # type: ignore[call-overload]
