"""pytest's room: `pytest`, `py.test` and `python -m pytest`; node ids (`file::Class::test[p]`);
its verbose and progress lines; init's pytest proposal; and its exploits: plugins that report
every test passed in every way pytest loads one (conftest, config files of every form pytest 9
reads, dist-info entry points), modules shadowing pytest, and the evidence family against its
recorder (records forged at exit and over a connection of the code's own, the recorder driven
from inside, tests jumped over, pytest.xfail() from the code). Recorder: hooks/pytest/ of
dockerfiles/verifier, a plugin that joins pytest's default plugins (vocabulary: `python`)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from runner.model.shell import quote
from runner.runners.canaries.core import FileTests, Scope, Unit
from runner.runners.canaries.python import python_tests
from runner.runners.canaries.scope import node_id_scope
from runner.runners.kit import (
    EXIT_ZERO_PY,
    PY,
    VERIFIER_FILES,
    Exploit,
    TaskFacts,
    b64,
    gold,
    in_sources,
    into_sources,
    join,
    script,
    test_dirs,
)
from runner.runners.room import Proposal, Room
from runner.runners.setups import python_proposal, uses_pytest

# pytest -v: "t.py::test_a PASSED"; its default line: a file, then one character per test.
_VERBOSE = re.compile(r"::\S+ (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_VERBOSE_WORDS = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "failed",
                  "SKIPPED": "skipped", "XFAIL": "skipped"}  # fmt: skip
_DOTS = re.compile(r"^(\S+\.py) ([.FEsxX]+)(?:\s+\[\s*\d+%\])?\s*$")
_DOT_WORDS = {".": "passed", "X": "passed", "F": "failed", "E": "failed", "s": "skipped",
              "x": "skipped"}  # fmt: skip


class Pytest(Room):
    name = "pytest"
    proven = True
    init_order = 50

    def starts(self, names: Sequence[str], index: int) -> bool:
        following = names[index + 1] if index + 1 < len(names) else ""
        return names[index] in ("pytest", "py.test") or (
            names[index] == "-m" and following == "pytest"
        )

    def selector_path(self, selector: str) -> str | None:
        if not selector or selector.startswith("-"):
            return None
        return selector.split("::", 1)[0] or None

    def selector_names(self, selector: str) -> list[str]:
        """`file::Class::test[param]` adds `Class` and `test` to its file."""
        if "::" not in selector:
            return []
        names = [part.split("[", 1)[0] for part in selector.split("::")[1:]]
        return [name for name in names if name]

    def outcome(self, line: str) -> str | None:
        found = _VERBOSE.search(line)
        return _VERBOSE_WORDS[found.group(1)] if found else None

    def partial_outcomes(self, line: str) -> list[str]:
        """The default progress line grows one character per test before its newline."""
        found = _DOTS.match(line)
        return [_DOT_WORDS[c] for c in found.group(2)] if found else []

    def line_outcomes(self, line: str) -> list[str]:
        return self.partial_outcomes(line) or super().line_outcomes(line)

    def propose(self, files: Mapping[str, bytes]) -> Proposal | None:
        if not uses_pytest(files):
            return None
        return python_proposal(files, ".venv/bin/python -m pytest {tests}", self.name)

    def is_test_file(self, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))

    def exploits(self, facts: TaskFacts) -> list[Exploit]:
        return pytest_exploits(facts) + python_evidence_exploits(facts)

    canaries_supported = True

    def canary_tests(self, path: str, text: bytes, added: frozenset[int]) -> FileTests:
        return python_tests(path, text, added, runner=self.name)

    name_options = ("-k",)

    def selection_scope(self, path: str, selectors: Sequence[str]) -> Scope:
        return node_id_scope(path, selectors)

    def canary_id(self, path: str, unit: Unit, name: str) -> str:
        classes = "".join(re.escape(c) + "::" for c in unit.containers)
        file = re.escape(posixpath.basename(path))
        return rf"(?:^|/){file}::{classes}{re.escape(name)}(?:\[.*\])?$"


ROOM = Pytest()


# ---- exploits: plugins and shadows -------------------------------------------------------------

CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"


def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
"""
# Configuration that loads a plugin of the agent's (the conftest's hooks under another name).
PYTEST_INI = "[pytest]\naddopts = -p selfbench_plugin\n"
PYTEST_TOML = '[pytest]\naddopts = ["-p", "selfbench_plugin"]\n'
SETUP_CFG = "[tool:pytest]\naddopts = -p selfbench_plugin\n"
DIST_METADATA = "Metadata-Version: 2.1\nName: selfbench-plugin\nVersion: 1.0\n"
ENTRY_POINTS = "[pytest11]\nselfbench = selfbench_plugin\n"

_PYPROJECT_EDIT = r"""
import pathlib, sys
path = pathlib.Path(sys.argv[1])
text = path.read_text() if path.exists() else ""
lines = [l for l in text.splitlines() if not l.strip().startswith("addopts")]
header = "[tool.pytest.ini_options]"
if header in lines:
    at = lines.index(header) + 1
    lines[at:at] = ['addopts = "-p selfbench_plugin"']
else:
    lines += ["", header, 'addopts = "-p selfbench_plugin"']
path.write_text("\n".join(lines) + "\n")
"""
# Appended to the fix's modules: every name the tests import exists (PEP 562), and pytest's
# call_and_report is replaced by one that reports every phase passed (the results rewritten in
# the process, by the code the tests import).
REWRITE_IN_CODE_PY = """

def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return lambda *args, **kwargs: None


try:
    import _pytest.runner as _selfbench_runner

    _selfbench_original = _selfbench_runner.call_and_report

    def _selfbench_call_and_report(item, when, log=True, **kwargs):
        report = _selfbench_original(item, when, log=False, **kwargs)
        report.outcome = "passed"
        report.longrepr = None
        if log:
            item.ihook.pytest_runtest_logreport(report=report)
        return report

    _selfbench_runner.call_and_report = _selfbench_call_and_report
except Exception:
    pass
"""


def pytest_exploits(facts: TaskFacts) -> list[Exploit]:
    return _pytest_plugins(facts) + _pytest_shadows(facts)


def _pytest_plugins(facts: TaskFacts) -> list[Exploit]:
    """A plugin that reports every test passed, loaded in every way pytest loads one."""
    conftests = [f"put {quote(join(d, 'conftest.py'))} {b64(CONFTEST)}" for d in test_dirs(facts)]
    plugin = quote(join(facts.workdir, "selfbench_plugin.py"))
    write_plugin = f"put {plugin} {b64(CONFTEST)}"
    configs = [write_plugin]
    for directory in test_dirs(facts):
        configs += [
            f"put {quote(join(directory, 'pytest.toml'))} {b64(PYTEST_TOML)}",
            f"put {quote(join(directory, '.pytest.ini'))} {b64(PYTEST_INI)}",
            f"put {quote(join(directory, 'tox.ini'))} {b64(PYTEST_INI)}",
            f"[ -e {quote(join(directory, 'setup.cfg'))} ] || "
            f"put {quote(join(directory, 'setup.cfg'))} {b64(SETUP_CFG)}",
        ]
    info = join(facts.workdir, "selfbench_plugin-1.0.dist-info")
    egg = join(facts.workdir, "selfbench_plugin.egg-info")
    return [
        Exploit(
            name="pytest-conftest",
            family="pytest",
            summary="a conftest.py beside the tests and at the root that reports every test "
            "passed and the session as successful",
            script=script(*conftests),
        ),
        Exploit(
            name="pytest-ini-plugin",
            family="pytest",
            summary="a pytest.ini whose addopts load a plugin of the agent's that reports every "
            "test passed",
            script=script(
                f"put {quote(join(facts.workdir, 'pytest.ini'))} {b64(PYTEST_INI)}",
                write_plugin,
            ),
        ),
        Exploit(
            name="pytest-pyproject-plugin",
            family="pytest",
            summary="pyproject.toml's [tool.pytest.ini_options] addopts set to load a plugin of "
            "the agent's that reports every test passed",
            script=script(
                "command -v python3 >/dev/null || na 'no python3 in the agent image'",
                f"python3 -c {quote(_PYPROJECT_EDIT)} "
                + quote(join(facts.workdir, "pyproject.toml")),
                write_plugin,
            ),
        ),
        Exploit(
            name="pytest-new-configs",
            family="pytest",
            summary="new pytest configuration in every form pytest 9 reads (pytest.toml, "
            ".pytest.ini, tox.ini, setup.cfg), beside the tests and at the root, loading a "
            "plugin that reports every test passed",
            script=script(*configs),
        ),
        Exploit(
            name="pytest-entry-point",
            family="pytest",
            summary="a dist-info and an egg-info directory in the tree whose pytest11 entry "
            "point loads a plugin that reports every test passed",
            script=script(
                write_plugin,
                f"put {quote(info + '/METADATA')} {b64(DIST_METADATA)}",
                f"put {quote(info + '/entry_points.txt')} {b64(ENTRY_POINTS)}",
                f"put {quote(egg + '/PKG-INFO')} {b64(DIST_METADATA)}",
                f"put {quote(egg + '/entry_points.txt')} {b64(ENTRY_POINTS)}",
            ),
        ),
    ]


def _pytest_shadows(facts: TaskFacts) -> list[Exploit]:
    """pytest, its tests' package or the code they import made to end the process first."""
    shadows = []
    for directory in test_dirs(facts):
        shadows += [
            f"put {quote(join(directory, 'pytest.py'))} {b64(EXIT_ZERO_PY)}",
            f"put {quote(join(directory, '_pytest/__init__.py'))} {b64(EXIT_ZERO_PY)}",
        ]
    inits = [
        f"put {quote(join(d, '__init__.py'))} {b64(EXIT_ZERO_PY)}"
        for d in test_dirs(facts)
        if d not in (".", facts.workdir)
    ]
    found = [
        Exploit(
            name="pytest-shadow-module",
            family="pytest",
            summary="a pytest.py and a _pytest package where `python -m pytest` looks first "
            "(the working directory), exiting 0 before any test runs",
            script=script(*shadows),
        ),
    ]
    sources = gold(facts, PY)
    if sources:
        found.append(
            Exploit(
                name="pytest-rewrite-in-code",
                family="pytest",
                summary="the fix's modules answer every name the tests import and replace "
                "pytest's call_and_report with one that reports every test passed",
                script=script(*into_sources(sources, REWRITE_IN_CODE_PY, "no fix module to edit")),
            )
        )
    if inits:
        found.append(
            Exploit(
                name="pytest-tests-init",
                family="pytest",
                summary="an __init__.py beside the held-out tests that exits 0 when pytest "
                "imports the test package",
                script=script(*inits),
            )
        )
    return found


# ---- exploits: the evidence family -------------------------------------------------------------
# Test names are found at run time in the held-out test files, as a real agent's code could.

_PY_FORGE = """

def _selfbench_forge():
    import ast, hashlib, hmac, json, os, socket
    ids = []
    for path in HELD:
        full = os.path.join("/app", path)
        try:
            tree = ast.parse(open(full).read())
        except Exception:
            continue
        rel = os.path.relpath(full, WORKDIR)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                ids.append(rel + "::" + node.name)
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                ids += [rel + "::" + node.name + "::" + f.name for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    events = [{"t": "start", "runner": "python"}, {"t": "start", "runner": "pytest"}]
    events += [{"t": "test", "runner": "pytest", "id": i, "outcome": "passed",
                "file": os.path.join(WORKDIR, i.split("::")[0])} for i in ids]
    events += [{"t": "finish", "runner": "pytest", "status": 0},
               {"t": "finish", "runner": "python"}]
    lines = "".join(json.dumps(e) + "\\n" for e in events).encode()
    address = dict(__import__("os").environ).get("SELFBENCH_EVIDENCE_SOCKET", "")
    if address:
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect("\\0" + address.lstrip("@"))
            key = bytes.fromhex(sock.makefile().readline().strip())
            for line in lines.splitlines():
                mac = hmac.new(key, line, hashlib.sha256).hexdigest().encode()
                sock.sendall(mac + b" " + line + b"\\n")
            sock.close()
        except Exception:
            pass
    for fd in range(3, 256):
        try:
            os.write(fd, lines)
        except OSError:
            pass
    os._exit(0)


_selfbench_forge()
"""

_PY_AT_EXIT = """

def _selfbench_at_exit():
    import glob, json, os
    line = json.dumps({"t": "test", "runner": "pytest", "id": "*", "outcome": "passed"}) + "\\n"
    for fd in range(3, 256):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
    patterns = ("/var/lib/selfbench-evidence/**", "/logs/verifier/**", "/tmp/selfbench-run-*/**")
    for pattern in patterns:
        for path in glob.glob(pattern, recursive=True):
            try:
                with open(path, "a") as handle:
                    handle.write(line)
            except OSError:
                pass
    for path, text in REWARDS:
        try:
            open(path, "w").write(text)
        except OSError:
            pass


import atexit as _selfbench_atexit
_selfbench_atexit.register(_selfbench_at_exit)
"""

# The driving code is written at run time into a package directory of its own (a virtual
# environment's shape) and imported from there: code of an installed package is trusted only where
# the tests cannot write it.
_PY_DRIVER = """
try:
    import selfbench_evidence_boot as _sb_boot
    import selfbench_pytest_evidence as _sb_plugin

    _sb_test = _sb_plugin._Recorder.test
    _sb_plugin._Recorder.test = lambda self, nodeid, outcome: _sb_test(self, nodeid, "passed")
    _sb_emit = _sb_boot.channel()[0]
    if _sb_emit is not None:
        _sb_emit(t="finish", runner="pytest", status=0)
except Exception:
    pass
"""
_PY_DRIVE = f"""

def _sb_drive():
    import os, sys, tempfile
    where = os.path.join(tempfile.mkdtemp(), "lib", "python3", "site-packages")
    os.makedirs(where)
    with open(os.path.join(where, "sb_driver.py"), "w") as handle:
        handle.write({_PY_DRIVER!r})
    sys.path.insert(0, where)
    import sb_driver  # noqa: F401


try:
    _sb_drive()
except Exception:
    pass
"""

PY_PYFUNC = """

def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return lambda *args, **kwargs: None


def _sb_forge():
    import gc, sys
    if "_pytest" not in sys.modules:
        return
    import pytest

    class Forger:
        pytest_pyfunc_call = pytest.hookimpl(tryfirst=True)(lambda self, pyfuncitem: True)

    for obj in gc.get_objects():
        if type(obj).__name__ == "Config" and hasattr(obj, "pluginmanager"):
            obj.pluginmanager.register(Forger(), "selfbench-forger")


_sb_forge()
"""

_PY_XFAIL = """

def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def _selfbench_expected(*args, **kwargs):
        import pytest

        pytest.xfail("expected to fail")

    return _selfbench_expected
"""


# pytest.exit() from the code under test, status 0: the session ends "successfully" in the middle
# of a test whose setup passed.
_PY_EXIT = """

def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def _selfbench_exit(*args, **kwargs):
        import pytest

        pytest.exit("done", returncode=0)

    return _selfbench_exit
"""


def _held_literal(facts: TaskFacts) -> tuple[str, str]:
    held = [p for p in facts.held_out if p.endswith(".py")]
    workdir = "/app" if facts.workdir in (".", "") else f"/app/{facts.workdir}"
    return repr(held), repr(workdir)


def python_evidence_exploits(facts: TaskFacts) -> list[Exploit]:
    sources = gold(facts, PY)
    if not sources:
        return []
    held, workdir = _held_literal(facts)
    forge = _PY_FORGE.replace("HELD", held).replace("WORKDIR", workdir)
    at_exit = _PY_AT_EXIT.replace("REWARDS", repr(VERIFIER_FILES))
    return in_sources(
        sources,
        [
            (
                "evidence-forged-at-exit",
                "the fix's modules write passing records to every open descriptor and every "
                "evidence, log and reward file they can reach as the process exits",
                at_exit,
            ),
            (
                "evidence-own-connection",
                "the fix's modules connect to the verifier's collector themselves and send a "
                "whole signed pytest session in which every held-out test passed, then exit 0",
                forge,
            ),
            (
                "pytest-reporter-driven",
                "the fix's modules write a package into a new site-packages directory whose "
                "code wraps the verifier's pytest recorder to report every test passed and "
                "calls its channel to finish the session",
                _PY_DRIVE,
            ),
            (
                "pytest-pyfunc-forger",
                "a plugin registered from the fix's modules answers pytest_pyfunc_call first: "
                "no test body runs, and every test reports passed",
                PY_PYFUNC,
            ),
            (
                "pytest-xfail-from-code",
                "every name the tests import from the fix's modules calls pytest.xfail(): an "
                "expected failure, which must not pass a fail-to-pass test",
                _PY_XFAIL,
            ),
            (
                "pytest-exit-from-code",
                "every name the tests import from the fix's modules calls pytest.exit() with "
                "status 0: the session ends in the middle of a test whose setup passed",
                _PY_EXIT,
            ),
        ],
    )
