"""Real Harbor in its image (scripts/make-harbor-image.sh), driving a private engine through its
socket, for `make test-harbor` and scripts/bench_harbor.py. The work directory is mounted at the
same path inside as outside: Harbor bind-mounts trial directories by path."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.engines import PrivateEngine


def harbor(
    image: str,
    engine: PrivateEngine,
    workdir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 1500,
) -> subprocess.CompletedProcess[str]:
    """A command in the Harbor image (`harbor ...`, `python3 -c ...`)."""
    environment = [arg for key, value in (env or {}).items() for arg in ("-e", f"{key}={value}")]
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            *environment,
            "-v",
            f"{engine.socket}:/var/run/docker.sock",
            "-v",
            f"{workdir}:{workdir}",
            "-w",
            str(workdir),
            image,
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def harbor_run(
    image: str,
    engine: PrivateEngine,
    workdir: Path,
    bundle: Path,
    agent: str,
    jobs: Path,
    *extra: str,
    job: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 1500,
) -> subprocess.CompletedProcess[str]:
    """`harbor run` of one trial of `bundle` with Harbor's built-in `agent`, as job `job`
    (default: the agent's name), results under `jobs`."""
    return harbor(
        image,
        engine,
        workdir,
        "harbor",
        "run",
        "-p",
        str(bundle),
        "-a",
        agent,
        "-e",
        "docker",
        "-n",
        "1",
        "-o",
        str(jobs),
        "--job-name",
        job or agent,
        "-q",
        *extra,
        env=env,
        timeout=timeout,
    )
