"""A throw-away image registry for tests that need real digests: Debian's `docker-registry`
(distribution 2.8) on a free 127.0.0.1 port, storage in a temporary directory, stopped by pid.
Docker trusts 127.0.0.0/8 registries over plain HTTP, so nothing needs configuring."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT

    def push(self, client: docker.DockerClient, image: str, repository: str, tag: str) -> str:
        """Push `image` as `host/repository:tag`; returns `host/repository:tag@sha256:…`."""
        target = f"{self.host}/{repository}"
        client.images.get(image).tag(target, tag=tag)
        digest = None
        for chunk in client.api.push(target, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise RuntimeError(f"push of {target}:{tag} failed: {chunk['error']}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = str(aux["Digest"])
        if digest is None:
            raise RuntimeError(f"push of {target}:{tag} reported no digest")
        return f"{target}:{tag}@{digest}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def local_registry(root: Path) -> Iterator[Registry]:
    if shutil.which("docker-registry") is None:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker-registry"],
            check=True,
            capture_output=True,
        )
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (root / "registry.log").open("wb")
    process = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "the registry did not start: " + (root / "registry.log").read_text()[-1500:]
                    ) from None
                time.sleep(0.2)
        yield Registry(host=f"127.0.0.1:{port}")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()
