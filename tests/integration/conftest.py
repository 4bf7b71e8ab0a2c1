"""Integration tests run on a real Docker engine; they fail (never skip) when none answers."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# The verify options of a test whose subject is not the gates: no flakiness probe, no exploits
# (each reruns the task's tests).
FAST = ("--repeat", "0", "--no-hack-gate")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # the suite must fail loudly, not skip
        pytest.fail(f"integration tests need a Docker engine (make engine): {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client: docker.DockerClient) -> str:
    image = os.environ.get("SELFBENCH_BASE_IMAGE")
    if image:
        return image
    try:
        docker_client.images.get("ubuntu:24.04")
        return "ubuntu:24.04"
    except docker.errors.ImageNotFound:
        pass
    # One worker makes it while the other waits (the suite runs on two): the script is
    # idempotent, and the second finds the image made.
    with open(tempfile.gettempdir() + "/selfbench-test-base-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(
            [str(ROOT / "scripts" / "make-base-image.sh")],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        pytest.fail(f"cannot make the local base image: {result.stderr[-2000:]}")
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def verify_options(base_image: str) -> list[str]:
    options = ["--base-image", base_image, "--toolchain-source", "uv=registry"]
    if HOST_CA.is_file():
        options += ["--extra-ca-certs", str(HOST_CA)]
    return options


@dataclass
class Run:
    code: int
    report: dict[str, Any]
    stderr: str
    run_dir: Path

    def stage(self, name: str) -> dict[str, Any]:
        stage = self.report["stages"][name]
        assert isinstance(stage, dict)
        return stage

    def statuses(self) -> dict[str, str]:
        return {name: stage["status"] for name, stage in self.report["stages"].items()}


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of the test's own for the verifies it runs: no patch predicted from
    an earlier run (a predicted oracle verifier has a container name of its own)."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("SELFBENCH_CACHE_DIR", str(directory))
    return directory


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    """`python -m runner ARGS` from the checkout, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )


def run_verify(
    target: Path, options: list[str], run_dir: Path, *extra: str, timeout: float = 900
) -> Run:
    result = run_cli(
        "verify",
        str(target),
        "--json",
        "--run-dir",
        str(run_dir),
        *options,
        *extra,
        timeout=timeout,
    )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON report (exit {result.returncode}): {result.stderr[-3000:]}")
    return Run(code=result.returncode, report=report, stderr=result.stderr, run_dir=run_dir)


def leftovers(client: docker.DockerClient, run_id: str | None = None) -> list[str]:
    label = f"org.selfbench.run={run_id}" if run_id else "org.selfbench.runner=1"
    # The low-level list: the high-level one inspects each container, and one removed in
    # between (another test's, a run ending) raises NotFound.
    found = client.api.containers(all=True, filters={"label": label})
    return [str(c["Names"][0]).lstrip("/") for c in found]


def grade(target: Path, patch: Path, options: list[str], logs: Path) -> tuple[int, dict[str, Any]]:
    result = run_cli(
        "grade",
        str(target),
        "--patch",
        str(patch),
        "--json",
        "--logs",
        str(logs),
        *options,
        timeout=600,
    )
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"grade printed no JSON (exit {result.returncode}): {result.stderr[-3000:]}")
    return result.returncode, document
