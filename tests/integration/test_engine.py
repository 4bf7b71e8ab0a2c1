"""The Docker layer on a real engine: build failures, build timeouts that cancel the build,
container limits, deadlines, file copies and label cleanup."""

from __future__ import annotations

import time
from pathlib import Path

import docker

from runner.engine import Engine, Limits

LIMITS = Limits(cpus=0.5, memory_mb=128, storage_mb=512, pids=64)


def dockerfile(tmp_path: Path, body: str, base_image: str) -> Path:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base_image}\n{body}\n")
    return context


def test_failing_run_is_a_failed_build(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient
) -> None:
    engine = Engine("test-engine-fail")
    context = dockerfile(tmp_path, "RUN echo about to fail && exit 7", base_image)
    result = engine.build(
        context=context,
        tag="selfbench-test/fail:1",
        buildargs={},
        labels=engine.labels("test"),
        limits=LIMITS,
        timeout=120,
        log_path=tmp_path / "build.log",
        task_steps=("exit 7",),
    )
    assert not result.ok
    assert result.exit_code == 7
    assert result.failed_step == "RUN echo about to fail && exit 7"
    assert result.task_at_fault
    assert "about to fail" in result.tail
    assert "ERROR: " in (tmp_path / "build.log").read_text()
    assert engine.image_id("selfbench-test/fail:1") is None


def test_build_timeout_cancels_the_build(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient
) -> None:
    engine = Engine("test-engine-timeout")
    marker = f"sleep 97{int(time.time()) % 1000}"
    context = dockerfile(tmp_path, f"RUN {marker}", base_image)
    started = time.monotonic()
    result = engine.build(
        context=context,
        tag="selfbench-test/slow:1",
        buildargs={},
        labels=engine.labels("test"),
        limits=LIMITS,
        timeout=5,
        log_path=tmp_path / "build.log",
    )
    assert result.timed_out and not result.ok
    assert result.error == "build timed out after 5s"
    assert time.monotonic() - started < 20
    # The step's container is gone with it: the engine is not left building.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        running = [
            c
            for c in docker_client.containers.list()
            if marker in " ".join(c.attrs["Config"]["Cmd"] or [])
        ]
        if not running:
            break
        time.sleep(1)
    else:
        raise AssertionError("the timed-out build is still running")


def test_container_limits_and_deadline(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient
) -> None:
    engine = Engine("test-engine-limits")
    container = engine.create(
        base_image, ["sleep", "300"], name_hint="x", limits=LIMITS, labels=engine.labels("test")
    )
    try:
        host = container.attrs["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == host["MemorySwap"] == 128 * 1024 * 1024
        assert host["PidsLimit"] == 64
        started = time.monotonic()
        result = engine.run_to_end(container, timeout=3, log_path=tmp_path / "run.log")
        assert result.timed_out
        assert time.monotonic() - started < 30
        assert result.exit_code == 137
    finally:
        assert engine.cleanup_run() >= 1
    assert (
        docker_client.containers.list(
            all=True, filters={"label": "org.selfbench.run=test-engine-limits"}
        )
        == []
    )


def test_files_in_and_out(tmp_path: Path, base_image: str) -> None:
    engine = Engine("test-engine-files")
    container = engine.create(
        base_image,
        ["sh", "-c", "cat /in/data.bin > /out.bin"],
        name_hint="x",
        limits=LIMITS,
        labels=engine.labels("test"),
    )
    try:
        payload = bytes(range(256)) * 4096
        engine.put_file(container, "/", "placeholder", b"")
        source = tmp_path / "in"
        source.mkdir()
        (source / "data.bin").write_bytes(payload)
        engine.put_directory(container, source, "/in")
        assert engine.run_to_end(container, timeout=60, log_path=tmp_path / "l").exit_code == 0
        assert engine.get_path(container, "/out.bin", tmp_path / "got")
        assert (tmp_path / "got" / "out.bin").read_bytes() == payload
        assert not engine.get_path(container, "/missing", tmp_path / "none")
    finally:
        engine.cleanup_run()
