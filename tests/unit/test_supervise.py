"""The one child launcher of serve and batch: a fork server (and the fresh-interpreter mode it
falls back to) starts real children; what a child gets (argv, environment, working directory,
stdio), how it ends (exit code, signal, a crash), the cancel button, and that no child outlives
its supervisor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner.base.children import process_is
from runner.supervise.job import ChildResult, VerifyJob
from runner.supervise.launcher import Launcher

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "tests.forkentry:main"


def job(tmp_path: Path, name: str, **overrides: object) -> VerifyJob:
    values: dict[str, object] = {
        "target": tmp_path / "task",
        "run_dir": tmp_path / name / "run",
        "run_id": f"test-{name}",
        "events": tmp_path / name / "events.jsonl",
        "stdout": tmp_path / name / "stdout",
        "stderr": tmp_path / name / "stderr",
        "env": {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)},
        **overrides,
    }
    return VerifyJob(**values)  # type: ignore[arg-type]


def probe(tmp_path: Path, name: str, *command: str, **overrides: object) -> VerifyJob:
    """A job whose argv is a probe command (tests.forkentry), not `verify ...`."""
    base = job(tmp_path, name, **overrides)

    class _Job(VerifyJob):
        def argv(self) -> list[str]:
            return list(command)

    fields = {f: getattr(base, f) for f in VerifyJob.__dataclass_fields__}
    return _Job(**fields)


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    started = Launcher(fork=True, entry=ENTRY)
    yield started
    started.close()


def test_a_forked_child_gets_its_own_argv_environment_and_stdio(
    tmp_path: Path, launcher: Launcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SUPERVISOR_ONLY", "the supervisor's")
    env = {"PATH": os.environ["PATH"], "CHILD_ONLY": "the child's"}
    runs = {
        "env": probe(tmp_path, "env", "env", "CHILD_ONLY", env=env),
        "leak": probe(tmp_path, "leak", "env", "SUPERVISOR_ONLY", env=env),
        "cwd": probe(tmp_path, "cwd", "cwd"),
        "argv": probe(tmp_path, "argv", "argv", "a b", "c"),
        "stderr": probe(tmp_path, "stderr", "stderr", "the last line"),
    }
    children = {name: launcher.start(spec) for name, spec in runs.items()}
    results = {name: child.result() for name, child in children.items()}
    assert launcher.mode == "fork"
    assert all(r.exit_code == 0 for r in results.values())
    out = {name: runs[name].stdout.read_text() for name in runs}  # type: ignore[union-attr]
    assert out["env"] == "the child's\n"
    assert out["leak"] == "<unset>\n"  # the job's environment, not the server's
    assert out["cwd"] == f"{tmp_path}\n"
    assert out["argv"] == "argv a b c\n"  # sys.argv[1:], as the installed command sees it
    assert results["stderr"].stderr_tail == "the last line"
    assert len({c.pid for c in children.values()}) == len(children)


def test_exit_codes_crashes_and_signals_come_back_as_subprocess_reports_them(
    tmp_path: Path, launcher: Launcher
) -> None:
    assert launcher.start(probe(tmp_path, "three", "exit", "3")).result().exit_code == 3
    crashed = launcher.start(probe(tmp_path, "crash", "crash")).result()
    assert crashed.exit_code == 3
    assert "RuntimeError: a bug in the child" in (tmp_path / "crash" / "stderr").read_text()
    sleeper = launcher.start(probe(tmp_path, "kill", "sleep", "60"))
    assert sleeper.wait(0.2) is None and sleeper.poll() is None
    sleeper.send_signal(signal.SIGKILL)
    assert sleeper.wait(10) == -signal.SIGKILL
    sleeper.send_signal(signal.SIGTERM)  # after it ended: nothing, no error


def test_sigterm_is_the_cancel_button_and_names_the_run(tmp_path: Path, launcher: Launcher) -> None:
    marker = tmp_path / "marker"
    spec = probe(tmp_path, "cancel", "sleep", "60", str(marker))
    child = launcher.start(spec)
    _wait_for(lambda: (tmp_path / "cancel" / "stdout").read_text() == "sleeping\n")
    # A restarted sidecar recognises the verification by pid and run id (its kernel name).
    assert process_is(child.pid, spec.run_id)
    assert not process_is(child.pid, "another-run")
    child.send_signal(signal.SIGTERM)
    assert child.wait(10) == 130
    assert marker.read_text() == "terminated SIGTERM"
    assert not process_is(child.pid, spec.run_id)


def test_the_fresh_interpreter_mode_runs_the_same_job(tmp_path: Path) -> None:
    """Without the fork server (SELFBENCH_FORK_SERVER=0): `python -m runner verify ...`."""
    exec_launcher = Launcher(fork=False)
    spec = job(tmp_path, "exec")  # a real verify of a task directory that does not exist
    result = exec_launcher.start(spec).result()
    assert exec_launcher.mode == "exec"
    assert result.exit_code == 2 and result.report is not None
    assert result.report.verdict.value == "invalid"
    assert result.document is not None and result.document["verdict"] == "invalid"


def test_a_forked_verify_is_the_cli_s_verify(tmp_path: Path) -> None:
    """The default entry: the real CLI, pre-imported; its report comes back typed."""
    forked = Launcher(fork=True)
    try:
        spec = job(tmp_path, "verify", run_id="test-forked-verify")
        result = forked.start(spec).result()
    finally:
        forked.close()
    assert result.exit_code == 2, (tmp_path / "verify" / "stderr").read_text()
    assert result.report is not None and result.report.run_id == "test-forked-verify"
    assert json.loads(spec.stdout.read_text())["verdict"] == "invalid"  # type: ignore[union-attr]
    assert result.ended_on_its_terms and not result.interrupted


def test_no_report_is_a_failure_with_the_stderr_tail(tmp_path: Path) -> None:
    spec = job(tmp_path, "none")
    spec.stderr.parent.mkdir(parents=True)
    spec.stderr.write_text("Traceback ...\nMemoryError\n")
    result = ChildResult.read(spec, -9)
    assert result.report is None and not result.ended_on_its_terms
    assert result.failure() == "verify exited -9 without a report: MemoryError"
    # A report that does not validate is no report.
    spec.stdout.write_text(json.dumps({"verdict": "accepted"}))  # type: ignore[union-attr]
    assert ChildResult.read(spec, 0).report is None


def test_no_child_outlives_its_supervisor_killed_by_sigkill(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from tests.unit.test_supervise import probe
        from runner.supervise.launcher import Launcher
        launcher = Launcher(fork=True, entry={ENTRY!r})
        child = launcher.start(probe(Path({str(tmp_path)!r}), "orphan", "sleep", "120",
                                     {str(marker)!r}))
        print(child.pid, launcher._server.process.pid, flush=True)
        import time
        time.sleep(600)
        """
    )
    supervisor = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=ROOT, text=True
    )
    assert supervisor.stdout is not None
    child_pid, server_pid = map(int, supervisor.stdout.readline().split())
    _wait_for(lambda: (tmp_path / "orphan" / "stdout").read_text() == "sleeping\n")
    supervisor.kill()
    supervisor.wait(10)
    # The server sees its control socket close and SIGTERMs the child (its cancel button).
    _wait_for(marker.exists, timeout=20)
    assert marker.read_text() == "terminated SIGTERM"
    _wait_for(lambda: not _alive(child_pid) and not _alive(server_pid), timeout=20)


def test_a_lost_fork_server_is_said_and_the_next_child_gets_a_new_one(
    tmp_path: Path, launcher: Launcher
) -> None:
    """The server killed alone: the kernel SIGTERMs its child (its cancel button, so it cleans
    up), the result waits for that child to be gone and says the server was lost (a supervisor
    retries it), and the next start gets a new server."""
    marker = tmp_path / "marker"
    spec = probe(tmp_path, "lost", "sleep", "120", str(marker))
    child = launcher.start(spec)
    _wait_for(lambda: (tmp_path / "lost" / "stdout").read_text() == "sleeping\n")
    server = launcher._server
    assert server is not None
    server.process.kill()
    result = child.result()
    assert marker.read_text() == "terminated SIGTERM"
    assert not process_is(child.pid, spec.run_id)  # gone before the result came back
    assert result.server_lost and result.lost
    assert result.failure() == (
        "the fork server was lost while verify ran; the kernel stopped verify"
    )
    child.send_signal(signal.SIGTERM)  # after it ended: nothing, no error
    again = launcher.start(probe(tmp_path, "again", "exit", "1")).result()
    assert again.exit_code == 1 and not again.server_lost
    assert launcher._server is not None and launcher._server is not server


def test_a_report_written_before_the_server_was_lost_stands(tmp_path: Path) -> None:
    """verify ended on its own terms (a report, its own exit code) just before the loss: its
    verdict is taken, not retried."""
    spec = job(tmp_path, "invalid", run_id="test-ended")
    forked = Launcher(fork=True)
    try:
        assert forked.start(spec).result().ended_on_its_terms
    finally:
        forked.close()
    result = ChildResult.read(spec, 2, server_lost=True)
    assert result.server_lost and not result.lost and result.report is not None
    assert result.failure().startswith("verify exited 2")
    interrupted = ChildResult.read(spec, 130, server_lost=True)  # the kernel's SIGTERM: 130
    assert interrupted.lost


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("timed out waiting")
