"""Engines where the README says they work, for real: a batch over a real sshd on 127.0.0.1
(started by the test with its own config and keys) beside the local engine, over one ssh login;
that ssh connection lost while a gate runs (an infrastructure failure, the task moves, the
stranded containers removed once the engine answers again); and real Docker contexts made by
the docker CLI in a DOCKER_CONFIG of the test's own (an unknown or dead one is an error, never
the default engine)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.helpers import free_port, wait_for_port
from tests.integration.conftest import FAST, ROOT, leftovers, run_cli
from tests.integration.test_batch import example_copy

EXAMPLE = ROOT / "examples" / "bash-calc"
LOCAL = "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class Sshd:
    port: int
    client_config: Path
    log: Path

    @property
    def url(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    def logins(self) -> int:
        return self.log.read_text(errors="replace").count("Accepted publickey")


def keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    with open(tempfile.gettempdir() + "/selfbench-need-sshd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = subprocess.run(
            [str(ROOT / "scripts" / "need-sshd.sh")], capture_output=True, text=True, check=False
        )
    assert installed.returncode == 0, installed.stderr[-2000:]
    home = tmp_path / "ssh"
    home.mkdir()
    keygen(home / "host_key")
    keygen(home / "client_key")
    shutil.copy(home / "client_key.pub", home / "authorized_keys")
    port = free_port()
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    (home / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home}/host_key\n"
        f"AuthorizedKeysFile {home}/authorized_keys\nPidFile {home}/sshd.pid\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
        "StrictModes no\nAllowStreamLocalForwarding yes\nLogLevel VERBOSE\n"
        "MaxSessions 100\nMaxStartups 100\n"
    )
    host_key = (home / "host_key.pub").read_text().split()[:2]
    (home / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_key)}\n")
    client = home / "ssh_config"
    client.write_text(
        f"Host 127.0.0.1\n  IdentityFile {home}/client_key\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {home}/known_hosts\n  StrictHostKeyChecking yes\n"
    )
    log = home / "sshd.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(home / "sshd_config")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:
            wait_for_port(port, process, what="sshd")
        except RuntimeError as exc:
            pytest.fail(f"{exc}: {log.read_text()[-2000:]}")
        yield Sshd(port=port, client_config=client, log=log)
    finally:
        process.terminate()
        process.wait(10)


def masters(sshd: Sshd) -> list[int]:
    """The pids of the runner's ssh master connections to this test's sshd (its client config
    is the test's own): never another test's, which a parallel worker may hold open (CI saw
    one counted here, and this test's cut would have killed it)."""
    config = str(sshd.client_config).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                argv[:1] == [b"ssh"]
                and b"ControlMaster=yes" in argv
                and any(b"/sb-ssh." in a for a in argv)
                and config in argv
            ):
                found.append(int(entry.name))
    return found


def test_a_batch_over_ssh_beside_the_local_engine_logs_in_once(
    tmp_path: Path, sshd: Sshd, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    env = {**os.environ, "SELFBENCH_SSH_CONFIG": str(sshd.client_config)}
    tasks = [str(example_copy(tmp_path, f"t{i}")) for i in range(2)]
    out = tmp_path / "batch"
    engines = ["--engine", f"{sshd.url}=1", "--engine", f"{LOCAL}=1"]
    result = run_cli(
        # The engines are the subject: no flakiness probe, no exploits.
        "batch", *tasks, "--jobs", "2", *engines, "--out", str(out), *verify_options, *FAST,
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads((out / "batch.json").read_text())
    assert {t["engine"] for t in document["tasks"]} == {sshd.url, LOCAL}
    assert all(t["verdict"] == "accepted" for t in document["tasks"])
    # One login for the whole batch: the ping, the task's every API call, its cleanup.
    assert sshd.logins() == 1, sshd.log.read_text()[-2000:]
    assert masters(sshd) == []  # the connection ends with the batch
    for task in document["tasks"]:
        assert leftovers(docker_client, task["report"]["runId"]) == []


def test_an_ssh_engine_lost_mid_run_is_cleaned_when_it_answers_again(
    tmp_path: Path, sshd: Sshd, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    """The ssh connection dies while the ssh engine's task runs a gate: that attempt is an
    infrastructure failure (never an internal error), the task moves to the local engine, and
    once the ssh engine answers again the attempt's containers there are removed."""
    env = {**os.environ, "SELFBENCH_SSH_CONFIG": str(sshd.client_config)}
    # A nop gate that takes a while: the connection is cut while its container runs.
    # Its own task id: the cut waits for this batch's gate, never another test's batch (a
    # parallel test's container once cut the login while this batch was still connecting, so
    # the task ran on the local engine from the start and never moved).
    task_id = f"ssh-lost-{uuid.uuid4().hex[:8]}"
    slow = str(
        example_copy(
            tmp_path, "slow", taskId=task_id, testCommand="sleep 8; bash tests/run.sh {tests}"
        )
    )
    out = tmp_path / "lost"
    cut: list[str] = []

    def cut_when_a_gate_runs() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not cut:
            # The raw listing (no inspect of each): containers come and go meanwhile.
            # The nop gate's containers: a build step's container carries the task's label too,
            # and a cut during the build left nothing on the engine to remove once it answered
            # (CI at ffbc81d: removedAfterLoss 0).
            running = docker_client.api.containers(
                filters={
                    "label": [f"org.selfbench.task={task_id}", "org.selfbench.kind=nop"],
                    "status": "running",
                }
            )
            mine = [c["Labels"]["org.selfbench.run"] for c in running]
            pids = masters(sshd)
            if mine and pids:
                cut.append(mine[0])
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.2)

    killer = threading.Thread(target=cut_when_a_gate_runs, daemon=True)
    killer.start()
    result = run_cli(
        "batch", slow, "--jobs", "1", "--engine", f"{sshd.url}=1", "--engine", f"{LOCAL}=1",
        "--out", str(out), "--no-hack-gate", *verify_options, env=env,
    )  # fmt: skip
    killer.join(10)
    assert cut, "the connection was never cut"
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads((out / "batch.json").read_text())
    (task,) = document["tasks"]
    assert task["verdict"] == "accepted" and task["engine"] == LOCAL, result.stderr[-3000:]
    assert document["moved"] == 1, result.stderr[-3000:]
    first = out / "runs" / "0000-slow" / "attempt-1"
    stderr = (first.parent / "attempt-1.stderr.log").read_text(errors="replace")
    report_path = first.parent / "attempt-1.json"
    report = json.loads(report_path.read_text()) if report_path.stat().st_size else {}
    assert report.get("verdict", "infrastructure_failed") == "infrastructure_failed"
    assert "internal error" not in stderr + json.dumps(report)
    ssh_engine = next(e for e in document["engines"] if e["engine"] == sshd.url)
    # Removed by the batch once the ssh engine answered again, or, when the retry's verify on
    # the local engine (the same daemon here) started first, by its stale-run reaper: the cut
    # attempt's runner process is dead, so its containers are stale (CI at 8981f19:
    # removedAfterLoss 0, nothing left over).
    retry_log = (first.parent / "attempt-2" / "runner.log").read_text(errors="replace")
    reaped = "container(s) of runner processes that no longer exist" in retry_log
    assert ssh_engine["removedAfterLoss"] >= 1 or reaped, (
        document["engines"],
        result.stderr[-3000:],
    )
    assert leftovers(docker_client, cut[0]) == []
    assert "answers again" in result.stderr
    assert masters(sshd) == []


def test_docker_contexts_are_resolved_as_the_cli_does(
    tmp_path: Path, verify_options: list[str]
) -> None:
    config = tmp_path / "docker-config"
    for name, host in (("live", LOCAL), ("dead", f"unix://{tmp_path}/nothing.sock")):
        subprocess.run(
            ["docker", "context", "create", name, "--docker", f"host={host}"],
            env={**os.environ, "DOCKER_CONFIG": str(config)},
            check=True,
            capture_output=True,
        )
    base = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}
    base["DOCKER_CONFIG"] = str(config)
    gc = ("gc", "--cache-budget", "1TiB", "--dry-run")
    assert run_cli(*gc, env={**base, "DOCKER_CONTEXT": "live"}).returncode == 0
    dead = run_cli(*gc, env={**base, "DOCKER_CONTEXT": "dead"})
    assert dead.returncode == 3
    assert "context dead" in dead.stderr and "nothing.sock" in dead.stderr
    unknown = run_cli(*gc, env={**base, "DOCKER_CONTEXT": "nowhere"})
    assert unknown.returncode == 2
    assert "'nowhere' does not exist" in unknown.stderr and str(config) in unknown.stderr
    # The current context of the CLI's config decides when no variable does.
    (config / "config.json").write_text(json.dumps({"currentContext": "dead"}))
    assert run_cli(*gc, env=base).returncode == 3
    # A batch naming a context: resolved up front, an unknown one stops it before any run.
    refused = run_cli(
        "batch", str(EXAMPLE), "--engine", "nowhere", "--out", str(tmp_path / "b"), env=base
    )
    assert refused.returncode == 2 and "'nowhere' does not exist" in refused.stderr
    assert not (tmp_path / "b" / "runs").exists()
    live = run_cli(
        "batch", str(EXAMPLE), "--engine", "live", "--out", str(tmp_path / "ok"),
        *verify_options, *FAST, env=base,
    )  # fmt: skip
    assert live.returncode == 0, live.stderr[-3000:]
    document = json.loads((tmp_path / "ok" / "batch.json").read_text())
    assert [t["engine"] for t in document["tasks"]] == ["live"]
