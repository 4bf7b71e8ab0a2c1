"""The one way serve and batch (and the coming worker) start a verification.

`Launcher.start(job)` returns a `Child`: poll, wait, signal, and a typed `ChildResult` once it
ended. By default children are forks of a pre-imported fork server (runner.supervise.forkserver),
started on first use; `SELFBENCH_FORK_SERVER=0`, or a server that cannot start, gives a fresh
interpreter per verification instead (`python -m runner verify ...`). Either way the child
runs in a session of its own (its cancel button is SIGTERM, to it alone) and gets SIGTERM from
the kernel if its supervisor dies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Protocol

from runner.base.children import process_is, process_name, with_parent_death_signal
from runner.base.errors import InfrastructureError
from runner.model.settings import fork_server_enabled
from runner.supervise.job import ChildResult, Job

log = logging.getLogger(__name__)

SERVER_MODULE = "runner.cli.forkserver"  # the server's process entry (it imports the CLI)
SERVER_START_SECONDS = 60.0
# The exit code of a forked child whose server vanished before it said how the child ended.
LOST_SERVER_CODE = -int(signal.SIGKILL)
# How long an orphaned child (SIGTERMed by the kernel when its server died) may take to remove
# its containers before it is killed: the server's own TERM_WAIT_SECONDS.
ORPHAN_WAIT_SECONDS = 60.0


class Child(Protocol):
    pid: int
    job: Job

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None when `timeout` seconds passed first."""
        ...

    def send_signal(self, signum: int) -> None: ...

    def result(self) -> ChildResult: ...


class _ExecChild:
    """A fresh interpreter: `python -m runner verify ...`."""

    def __init__(self, job: Job, python: str) -> None:
        self.job = job
        argv, preexec = with_parent_death_signal([python, "-m", "runner", *job.argv()])
        stdout_path = job.stdout or Path(os.devnull)
        with stdout_path.open("wb") as stdout, job.stderr.open("wb") as stderr:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=dict(job.env),
                start_new_session=True,
                preexec_fn=preexec,  # noqa: PLW1509 - see runner.base.children
            )
        self.pid = self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signum: int) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.send_signal(signum)

    def result(self) -> ChildResult:
        code = self.process.wait()
        return ChildResult.read(self.job, code)


class _ForkedChild:
    """A fork of the server; its status socket says its pid, then how it ended. If the server
    is lost first, the child (SIGTERMed by the kernel: PR_SET_PDEATHSIG) is watched through
    /proc until it is gone, and its result says the server was lost (`server_lost`)."""

    def __init__(self, job: Job, status: socket.socket, pid: int, buffer: bytes) -> None:
        self.job = job
        self.pid = pid
        self._status = status
        self._buffer = buffer
        self._code: int | None = None
        self._lost_at: float | None = None
        self._lock = threading.Lock()

    @property
    def server_lost(self) -> bool:
        return self._lost_at is not None

    def _read(self, timeout: float | None) -> None:
        with self._lock:
            if self._code is not None:
                return
            self._parse()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._code is None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._lost_at is not None:
                    self._watch_orphan(left)
                    return
                readable, _, _ = select.select([self._status], [], [], left)
                if not readable:
                    return
                try:
                    data = self._status.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    # The server is gone without a word on this child: the kernel sent the
                    # child SIGTERM (PR_SET_PDEATHSIG) if it still ran.
                    self._lost_at = time.monotonic()
                    self._status.close()
                    continue
                self._buffer += data
                self._parse()
                if deadline is not None and time.monotonic() >= deadline:
                    return

    def _watch_orphan(self, timeout: float | None) -> None:
        """Until the orphaned child is gone (it removes its containers on SIGTERM), at most
        `timeout` seconds of this call; past ORPHAN_WAIT_SECONDS it is killed."""
        assert self._lost_at is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while process_is(self.pid, self.job.run_id):
            if time.monotonic() - self._lost_at > ORPHAN_WAIT_SECONDS:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)
            if deadline is not None and time.monotonic() >= deadline:
                return
            # Never negative: the deadline may pass between the check above and this line.
            time.sleep(
                0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            )
        self._code = LOST_SERVER_CODE

    def _parse(self) -> None:
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            word, _, value = line.decode(errors="replace").partition(" ")
            if word == "exit" and value.lstrip("-").isdigit() and self._code is None:
                self._code = int(value)
                self._status.close()

    def poll(self) -> int | None:
        self._read(0)
        return self._code

    def wait(self, timeout: float | None = None) -> int | None:
        self._read(timeout)
        return self._code

    def send_signal(self, signum: int) -> None:
        with self._lock:
            if self._code is not None:
                return
            if self._lost_at is not None:
                # No server to ask: the pid is still this run's verification (checked), so it
                # is signalled directly.
                if process_is(self.pid, self.job.run_id):
                    with contextlib.suppress(OSError):
                        os.kill(self.pid, signum)
                return
            with contextlib.suppress(OSError):
                self._status.sendall(f"signal {int(signum)}\n".encode())

    def result(self) -> ChildResult:
        code = self.wait()
        assert code is not None
        return ChildResult.read(self.job, code, server_lost=self.server_lost)


class _Server:
    """The fork server process and its control socket."""

    def __init__(self, python: str, entry: str | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [python, "-m", SERVER_MODULE, str(theirs.fileno())]
        if entry:
            command += ["--entry", entry]
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.control = ours
        self._lock = threading.Lock()
        ready, _, _ = select.select([ours], [], [], SERVER_START_SECONDS)
        hello = ours.recv(64) if ready else b""
        if hello != b"ready":
            self.close()
            ended = self.process.poll()
            raise InfrastructureError(
                "the fork server did not start" + (f" (exit {ended})" if ended is not None else "")
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def start(self, job: Job) -> _ForkedChild:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        stdout_path = job.stdout or Path(os.devnull)
        header = json.dumps(
            {
                "argv": job.argv(),
                "env": dict(job.env),
                "cwd": os.getcwd(),
                "name": process_name(job.run_id),
            }
        ).encode()
        with (
            open(os.devnull, "rb") as stdin,
            stdout_path.open("wb") as stdout,
            job.stderr.open("wb") as stderr,
            theirs,
        ):
            fds = [stdin.fileno(), stdout.fileno(), stderr.fileno(), theirs.fileno()]
            with self._lock:
                socket.send_fds(self.control, [header], fds)
        ready, _, _ = select.select([ours], [], [], SERVER_START_SECONDS)
        data = ours.recv(4096) if ready else b""
        line, _, rest = data.partition(b"\n")
        word, _, value = line.decode(errors="replace").partition(" ")
        if word != "pid" or not value.isdigit():
            ours.close()
            raise InfrastructureError("the fork server did not start the verification")
        # A child that ended at once: its exit line may have come with its pid.
        return _ForkedChild(job, ours, int(value), rest)

    def close(self) -> None:
        """The control socket's end tells the server to stop its children and exit."""
        with contextlib.suppress(OSError):
            self.control.close()
        try:
            self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


class Launcher:
    def __init__(
        self, *, python: str = sys.executable, fork: bool | None = None, entry: str | None = None
    ) -> None:
        self.python = python
        self.fork = fork_server_enabled() if fork is None else fork
        self.entry = entry  # module:function the server calls in each child (tests)
        self._server: _Server | None = None
        self._lock = threading.Lock()

    @property
    def mode(self) -> str:
        return "fork" if self.fork else "exec"

    def start(self, job: Job) -> Child:
        job.run_dir.parent.mkdir(parents=True, exist_ok=True)
        if not self.fork:
            return _ExecChild(job, self.python)
        server = self._running_server()
        if server is None:
            return _ExecChild(job, self.python)
        return server.start(job)

    def _running_server(self) -> _Server | None:
        with self._lock:
            if self._server is not None and not self._server.alive():
                log.warning("the fork server exited; starting another")
                self._server = None
            if self._server is None:
                try:
                    self._server = _Server(self.python, self.entry)
                except (InfrastructureError, OSError) as exc:
                    log.warning("no fork server (%s): each verification starts Python", exc)
                    self.fork = False
                    return None
            return self._server

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
                self._server = None
