"""The fork server: a pre-imported Python that forks one child per verification.

A supervisor (serve, batch) used to start each `verify` as a fresh interpreter, which pays
Python's start-up and the imports of the CLI, the executor, pydantic's models and docker-py
every time (measured: 0.45 s of the 1.7 s warm overhead of a verification). The server imports
all of that once; each child is a fork of it, so it starts with everything in memory.

Protocol (one control socket, a Unix socket pair the supervisor made):
- The supervisor sends one message per child: a JSON header (argv, environment, working
  directory, process name) with four descriptors attached (SCM_RIGHTS): the child's stdin,
  stdout and stderr, and one end of a status socket pair made for this child alone.
- The server forks. On the status socket it writes `pid N`, later `exit CODE` (CODE as
  subprocess reports it: negative for a signal), then closes it. The supervisor may write
  `signal N` to it: the server signals the child, only while it has not reaped it, so a pid the
  kernel reused is never signalled.
- The control socket's end-of-file (the supervisor exited, even by SIGKILL: the kernel closes
  its descriptors) makes the server SIGTERM every child (each removes its own containers), wait
  for them, and exit. Each child also gets SIGTERM from the kernel if the server dies
  (PR_SET_PDEATHSIG), so a verification never runs on unsupervised.

The server is single-threaded (a fork of a threaded process may copy a lock another thread
held); it blocks in select() only, and SIGCHLD wakes it through a wakeup descriptor.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runner.base.children import die_with_parent, set_process_name

MAX_HEADER_BYTES = 4 * 1024 * 1024
FDS_PER_CHILD = 4  # stdin, stdout, stderr, status
TERM_WAIT_SECONDS = 60.0  # a verification removes its containers on SIGTERM

Entry = Callable[[list[str]], int]


@dataclass(kw_only=True)
class _Child:
    pid: int
    status: socket.socket


class ForkServer:
    def __init__(self, control: socket.socket, entry: Entry) -> None:
        self.control = control
        self.entry = entry
        self.children: dict[int, _Child] = {}  # by pid; removed once reaped and reported
        self.by_status: dict[int, _Child] = {}  # by the status socket's descriptor
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)

    # ---- the loop ----------------------------------------------------------------------

    def serve(self) -> int:
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        # SIGTERM (the supervisor's stop, or the kernel's when it died) ends the server the
        # same way the control socket's end-of-file does.
        stopping: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
        # The objects imported so far live as long as the server: no collection of a child
        # walks (and so copies) them.
        gc.freeze()
        open_control = True
        while open_control and not stopping:
            readable = self._select()
            self._reap()
            for fd in readable:
                if fd == self.control.fileno():
                    open_control = self._accept()
                elif fd in self.by_status:
                    self._command(self.by_status[fd])
        self._stop_children()
        return 0

    def _select(self) -> list[int]:
        watched = [self.control.fileno(), self._wake_r, *self.by_status]
        try:
            readable, _, _ = select.select(watched, [], [], 5.0)
        except InterruptedError:
            return []
        if self._wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 512):
                    pass
        return [fd for fd in readable if fd != self._wake_r]

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            self.by_status.pop(child.status.fileno(), None)
            with contextlib.suppress(OSError):
                child.status.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            child.status.close()

    def _command(self, child: _Child) -> None:
        try:
            data = child.status.recv(256)
        except OSError:
            data = b""
        if not data:
            # The supervisor dropped this child's socket: the child runs on (the control
            # socket's end, not this one, says the supervisor is gone).
            self.by_status.pop(child.status.fileno(), None)
            return
        for line in data.decode(errors="replace").splitlines():
            word, _, value = line.partition(" ")
            if word == "signal" and value.isdigit() and child.pid in self.children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, int(value))

    def _stop_children(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_WAIT_SECONDS
        while self.children and time.monotonic() < deadline:
            self._reap()
            if self.children:
                select.select([self._wake_r], [], [], 0.2)
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while self.children:
            self._reap()
            if self.children:
                select.select([self._wake_r], [], [], 0.2)

    # ---- one child ---------------------------------------------------------------------

    def _accept(self) -> bool:
        try:
            message, fds, _flags, _addr = socket.recv_fds(
                self.control, MAX_HEADER_BYTES, FDS_PER_CHILD
            )
        except OSError as exc:
            return exc.errno in (errno.EINTR, errno.EAGAIN)  # else: the supervisor is gone
        if not message:
            for fd in fds:
                os.close(fd)
            return False  # the supervisor is gone
        try:
            header = json.loads(message)
            if len(fds) != FDS_PER_CHILD:
                raise ValueError(f"{len(fds)} descriptors, not {FDS_PER_CHILD}")
            argv = [str(a) for a in header["argv"]]
            env = {str(k): str(v) for k, v in header["env"].items()}
            cwd = header.get("cwd")
            name = str(header.get("name") or "")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            for fd in fds:
                os.close(fd)
            logging.getLogger(__name__).error("fork server: bad request: %s", exc)
            return True
        status = socket.socket(fileno=fds[3])
        pid = os.fork()
        if pid == 0:  # the child: never returns
            self._become_child(fds[:3], argv, env, cwd, name, keep=status)
        for fd in fds[:3]:
            os.close(fd)
        child = _Child(pid=pid, status=status)
        self.children[pid] = child
        self.by_status[status.fileno()] = child
        with contextlib.suppress(OSError):
            status.sendall(f"pid {pid}\n".encode())
        return True

    def _become_child(
        self,
        stdio: Sequence[int],
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        name: str,
        *,
        keep: socket.socket,
    ) -> None:
        code = 3
        try:
            # Nothing of the server's: its sockets, its signal plumbing, its session.
            self.control.close()
            keep.close()
            for child in self.by_status.values():
                child.status.close()
            signal.set_wakeup_fd(-1)
            os.close(self._wake_r)
            os.close(self._wake_w)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)
            for target, fd in enumerate(stdio):
                os.dup2(fd, target)
                os.close(fd)
            os.setsid()
            die_with_parent()
            if name:
                # How a restarted sidecar recognises a verification it started: a forked
                # child's command line is the server's.
                set_process_name(name)
            if cwd:
                os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            sys.argv = ["selfbench-runner", *argv]
            code = self.entry(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # a child must end here, never in the server's loop
            import traceback

            traceback.print_exc()
            code = 3
        finally:
            # What interpreter exit would do, then leave without unwinding into the server's
            # loop (os._exit runs no atexit handler of the server's).
            with contextlib.suppress(Exception):
                logging.shutdown()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)


def serve(control: socket.socket, entry: Entry) -> int:
    return ForkServer(control, entry).serve()
