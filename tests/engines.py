"""A private Docker engine for tests that need one beside the main engine: its own socket,
data root, exec root, pid file and bridge device, optionally on a btrfs loop file with quotas.
It is stopped by pid and everything it made is removed; the main engine's objects are never
touched.

With `nat=True` its containers reach the outside world (builds that install packages need to):
a masquerade rule for its subnet alone and forwarding rules for its bridge alone, inserted in
`DOCKER-USER` (the chain Docker leaves to users) and removed afterwards. Docker-in-Docker is not
an option here: privileged containers cannot get their capabilities in this sandbox.

Measured here: a second dockerd started with `--bridge=none` deletes the host's `docker0`
(moby removes the default bridge when the bridge is disabled), which breaks the main engine's
networking. So the private engine gets a bridge device of its own, and `--iptables=false` keeps
it out of the main engine's iptables chains; its builds use the host network
(`--build-network host`) to reach package registries.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker


@dataclass(frozen=True)
class PrivateEngine:
    root: Path
    socket: Path
    pid: int
    storage: str

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def environ(self) -> dict[str, str]:
        """The environment that points docker clients (and the runner) at this engine."""
        env = dict(os.environ)
        env["DOCKER_HOST"] = self.url
        return env

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=120)


def _run(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


def _bridge_name() -> str:
    return f"sbt{os.getpid() % 100000}"  # interface names are at most 15 characters


def _nat_rules(bridge: str, subnet: str) -> list[list[str]]:
    return [
        ["-t", "nat", "POSTROUTING", "-s", subnet, "!", "-o", bridge, "-j", "MASQUERADE"],
        ["-t", "filter", "DOCKER-USER", "-i", bridge, "-j", "ACCEPT"],
        [
            "-t",
            "filter",
            "DOCKER-USER",
            "-o",
            bridge,
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
    ]


def _iptables(action: str, rule: list[str]) -> None:
    table, chain, *spec = rule[1], rule[2], *rule[3:]
    subprocess.run(
        ["iptables", "-t", table, action, chain, *spec], check=action == "-I", capture_output=True
    )


def _reap_leftovers(root: Path, short: Path) -> None:
    """What an engine stopped the hard way (a test may kill it) leaves behind: containerd shims
    and their containers, and mounts under its data root. Only this engine's, by path."""
    markers = (str(short), str(root))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(marker in cmdline for marker in markers) and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    for point in sorted(mounts, key=len, reverse=True):
        if any(point.startswith(marker) for marker in markers):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@contextlib.contextmanager
def private_engine(
    root: Path,
    *,
    storage: str = "overlay2",
    images: tuple[str, ...] = (),
    size: str = "16G",
    nat: bool = False,
) -> Iterator[PrivateEngine]:
    """Start a dockerd of our own under `root` (storage `overlay2` or `btrfs`), load `images`
    from the main engine into it, and stop and remove it all afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    # Unix socket paths are limited to 108 bytes: containerd's lives under the exec root, so
    # the exec root and the engine's socket sit in a short directory of their own.
    short = Path(tempfile.mkdtemp(prefix="sbe-", dir="/tmp"))
    data = root / "data"
    mount = None
    bridge = _bridge_name()
    process: subprocess.Popen[bytes] | None = None
    if storage == "btrfs":
        if shutil.which("mkfs.btrfs") is None:
            _run("apt-get", "install", "-y", "-qq", "--no-install-recommends", "btrfs-progs")
        image = root / "fs.img"
        subprocess.run(["truncate", "-s", size, str(image)], check=True)
        _run("mkfs.btrfs", "-q", "-f", str(image))
        data.mkdir()
        _run("mount", "-o", "loop", str(image), str(data))
        mount = data
        _run("btrfs", "quota", "enable", str(data))
    subnet_octet = 200 + os.getpid() % 50
    subnet = f"10.{subnet_octet}.77.0/24"
    rules = _nat_rules(bridge, subnet) if nat else []
    try:
        _run("ip", "link", "add", "name", bridge, "type", "bridge")
        _run("ip", "addr", "add", f"10.{subnet_octet}.77.1/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        for rule in rules:
            _iptables("-I", rule)
        socket = short / "docker.sock"
        log = (root / "dockerd.log").open("wb")
        process = subprocess.Popen(
            [
                "dockerd",
                f"--data-root={data}",
                f"--exec-root={short / 'exec'}",
                f"--pidfile={root / 'dockerd.pid'}",
                f"--host=unix://{socket}",
                f"--storage-driver={storage}",
                f"--bridge={bridge}",
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        engine = PrivateEngine(root=root, socket=socket, pid=process.pid, storage=storage)
        deadline = time.monotonic() + 60
        while True:
            try:
                engine.client().ping()
                break
            except Exception:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "the private dockerd did not start: "
                        + (root / "dockerd.log").read_text()[-2000:]
                    ) from None
                time.sleep(0.5)
        if images:
            # One stream: the layers the images share are sent and stored once.
            saved = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
            subprocess.run(
                ["docker", "-H", engine.url, "load", "-q"],
                stdin=saved.stdout,
                check=True,
                capture_output=True,
            )
            if saved.wait() != 0:
                raise RuntimeError(f"docker save {' '.join(images)} failed")
        yield engine
    finally:
        if process is not None and process.poll() is None:
            with contextlib.suppress(Exception):
                client = docker.DockerClient(base_url=f"unix://{short / 'docker.sock'}", timeout=30)
                for container in client.containers.list(all=True):
                    container.remove(force=True)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        _reap_leftovers(root, short)
        for rule in rules:
            _iptables("-D", rule)
        if mount is not None:
            subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        subprocess.run(["ip", "link", "delete", bridge], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(short, ignore_errors=True)
