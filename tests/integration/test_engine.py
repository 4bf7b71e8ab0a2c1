"""The Docker layer on a real engine: build failures and timeouts that cancel the build,
container limits and the runner's own deadlines, capped output, what the cgroup says about the
limits, the storage watchdog, error wrapping, label cleanup and the stale-run reaper."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import docker
import pytest

from runner.base.errors import EngineError
from runner.engine.docker import DockerEngine
from runner.model.settings import StorageLimit
from runner.plan.labels import LABEL_OWNER, LABEL_RUN
from runner.plan.runtime import BuildRequest
from runner.plan.types import ContainerPlan, ExecStep, Limits, Role

LIMITS = Limits(cpus=0.5, requested_cpus=0.5, memory_mb=128, storage_mb=512, pids=64)
# Few pids and little memory: what the cgroup tests run into.
TIGHT = Limits(cpus=1, requested_cpus=1, memory_mb=64, storage_mb=512, pids=32)


def dockerfile(tmp_path: Path, body: str, base_image: str) -> Path:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base_image}\n{body}\n")
    return context


def request(context: Path, tag: str, timeout: float = 120) -> BuildRequest:
    return BuildRequest(
        context=context,
        tag=tag,
        buildargs={},
        labels={"org.selfbench.runner": "1", "org.selfbench.kind": "test"},
        memory_mb=256,
        cpuset="0",
        timeout_seconds=timeout,
    )


def plan(
    image: str,
    run_id: str,
    *,
    limits: Limits = LIMITS,
    storage: StorageLimit = StorageLimit.OFF,
    owner: str = "test",
) -> ContainerPlan:
    return ContainerPlan(
        name=f"selfbench-test-{run_id}-{uuid.uuid4().hex[:6]}",
        image=image,
        role=Role.VERIFIER,
        command=["sleep", "600"],
        env={"HOME": "/root"},
        proxy_env=[],
        workdir="/",
        network="bridge",
        limits=limits,
        labels={
            "org.selfbench.runner": "1",
            LABEL_RUN: run_id,
            "org.selfbench.kind": "test",
            LABEL_OWNER: owner,
        },
        storage=storage,
    )


def step(argv: list[str], timeout: float = 60, user: str = "root") -> ExecStep:
    return ExecStep(name="t", argv=argv, user=user, env={}, workdir="/", timeout_seconds=timeout)


def test_failing_run_is_a_failed_build(tmp_path: Path, base_image: str) -> None:
    engine = DockerEngine()
    context = dockerfile(tmp_path, "RUN echo about to fail && exit 7", base_image)
    result = engine.build(
        request(context, "selfbench-test/fail:1"),
        tmp_path / "build.log",
        limit=1 << 20,
        on_line=lambda line: None,
    )
    assert not result.ok
    assert result.exit_code == 7
    assert result.failed_step == "RUN echo about to fail && exit 7"
    assert "about to fail" in result.tail
    assert "ERROR: " in (tmp_path / "build.log").read_text()
    assert engine.image("selfbench-test/fail:1") is None


def test_build_timeout_cancels_the_build(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient
) -> None:
    engine = DockerEngine()
    marker = f"sleep 97{int(time.time()) % 1000}"
    context = dockerfile(tmp_path, f"RUN {marker}", base_image)
    started = time.monotonic()
    result = engine.build(
        request(context, "selfbench-test/slow:1", timeout=5),
        tmp_path / "build.log",
        limit=1 << 20,
        on_line=lambda line: None,
    )
    assert result.timed_out and not result.ok
    assert result.error == "build timed out after 5s"
    assert time.monotonic() - started < 30
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


def test_container_limits_deadline_and_removal(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient
) -> None:
    engine = DockerEngine()
    spec = plan(base_image, "test-engine-limits")
    with engine.container(spec, env={}, keep=False) as container:
        host = docker_client.api.inspect_container(spec.name)["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == host["MemorySwap"] == 128 * 1024 * 1024
        assert host["PidsLimit"] == 64
        started = time.monotonic()
        outcome = container.exec(step(["sleep", "300"], timeout=3), tmp_path / "x.log", limit=1024)
        assert outcome.timed_out
        assert time.monotonic() - started < 30
    engine.close()
    assert docker_client.containers.list(all=True, filters={"name": spec.name}) == []


def test_output_is_capped_head_and_tail(tmp_path: Path, base_image: str) -> None:
    engine = DockerEngine()
    with engine.container(plan(base_image, "test-engine-cap"), env={}, keep=False) as container:
        outcome = container.exec(
            step(
                [
                    "bash",
                    "-c",
                    "echo FIRST; head -c 5000000 /dev/zero | tr '\\0' x; echo; echo LAST",
                ]
            ),
            tmp_path / "out.log",
            limit=100_000,
        )
    engine.close()
    text = (tmp_path / "out.log").read_text()
    assert text.startswith("FIRST")
    assert text.rstrip().endswith("LAST")
    assert "bytes cut from the middle of this log (limit 100000 bytes)" in text
    assert len(text) < 101_000
    assert outcome.truncation is not None and outcome.truncation.original_bytes > 5_000_000


def test_pids_and_memory_limits_are_read_from_the_cgroup(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient
) -> None:
    engine = DockerEngine()
    with engine.container(
        plan(base_image, "test-engine-cgroup", limits=TIGHT), env={}, keep=False
    ) as container:
        bomb = container.exec(
            step(["bash", "-c", "(for i in $(seq 100); do sleep 5 & done) 2>/dev/null; exit 1"]),
            tmp_path / "bomb.log",
            limit=1 << 20,
        )
        assert bomb.limits.pids_limit_hits > 0
        assert bomb.limits.oom_kills == 0
        # The bomb's sleeps hold every pid for 5 s: until they end and the init reaps them, the
        # runtime cannot start another exec in this container ("read init-p: connection reset
        # by peer"; seen in CI while PID 1 was the plan's sleep, which never reaped them). Wait
        # until the engine lists none of them (`top` needs no exec; PID 1 and its sleep stay).
        deadline = time.monotonic() + 60
        while any(
            "sleep 5" in " ".join(process)
            for process in docker_client.api.top(container.name).get("Processes") or []
        ):
            assert time.monotonic() < deadline, "the bomb's sleeps did not end"
            time.sleep(0.5)
        hog = container.exec(
            step(["bash", "-c", "head -c 300m /dev/zero | tail > /dev/null"]),
            tmp_path / "hog.log",
            limit=1 << 20,
        )
        assert hog.exit_code != 0
        assert hog.limits.oom_kills >= 1 and hog.oom_killed
    engine.close()


def test_what_a_step_orphans_is_reaped_and_frees_its_pids(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient
) -> None:
    """A step that leaves background processes behind: once they end they are reaped (the
    engine's init is PID 1, not the plan's sleep), so no zombie keeps a pid of the limit."""
    engine = DockerEngine()
    with engine.container(
        plan(base_image, "test-engine-orphans", limits=TIGHT), env={}, keep=False
    ) as container:
        pid1 = container.exec(
            step(["bash", "-c", "tr '\\0' ' ' < /proc/1/cmdline"]),
            tmp_path / "pid1.log",
            limit=4096,
        )
        assert (tmp_path / "pid1.log").read_text().startswith("/sbin/docker-init -- sleep "), pid1
        orphans = container.exec(
            step(["bash", "-c", "for i in $(seq 20); do sleep 1 & done; exit 0"]),
            tmp_path / "orphans.log",
            limit=4096,
        )
        assert orphans.exit_code == 0
        time.sleep(3)
        # Zombies leave /proc's task lists of the cgroup but stay charged to it: the engine's
        # own view (`top`) cannot see them, the kernel's count can.
        v2, v1 = "/sys/fs/cgroup/pids.current", "/sys/fs/cgroup/pids/pids.current"
        count = container.exec(
            step(["bash", "-c", f"cat {v2} 2>/dev/null || cat {v1}"]),
            tmp_path / "count.log",
            limit=4096,
        )
        assert count.exit_code == 0, (tmp_path / "count.log").read_text()
        charged = int((tmp_path / "count.log").read_text().split()[0])
        # PID 1's two processes (init and its sleep) and this exec's cat; 22 with zombies.
        assert charged <= 4, (tmp_path / "count.log").read_text()
    engine.close()


def test_storage_watchdog_stops_a_container_past_the_limit(tmp_path: Path, base_image: str) -> None:
    engine = DockerEngine()
    limits = Limits(cpus=1, requested_cpus=1, memory_mb=256, storage_mb=100, pids=64)
    spec = plan(base_image, "test-engine-storage", limits=limits, storage=StorageLimit.WATCHDOG)
    with engine.container(spec, env={}, keep=False) as container:
        assert container.storage_mechanism == "watchdog"
        outcome = container.exec(
            step(
                [
                    "bash",
                    "-c",
                    "for i in $(seq 40); do head -c 10m /dev/zero > /f$i; sleep 0.2; done",
                ],
                timeout=120,
            ),
            tmp_path / "fill.log",
            limit=1 << 20,
        )
    engine.close()
    assert outcome.storage_exceeded_mb is not None and outcome.storage_exceeded_mb > 100
    assert not outcome.timed_out


def test_files_in_and_out(tmp_path: Path, base_image: str) -> None:
    engine = DockerEngine()
    with engine.container(plan(base_image, "test-engine-files"), env={}, keep=False) as c:
        payload = bytes(range(256)) * 4096
        source = tmp_path / "in"
        source.mkdir()
        (source / "data.bin").write_bytes(payload)
        c.put_directory(source, "/in")
        c.put_file("/tmp", "note.txt", b"hello")
        assert (
            c.exec(
                step(
                    [
                        "sh",
                        "-c",
                        "mkdir -p /out && cat /in/data.bin > /out/out.bin && "
                        "head -c 3000 /dev/zero > /out/big.log",
                    ]
                ),
                tmp_path / "l",
                limit=1024,
            ).exit_code
            == 0
        )
        assert c.get_file("/tmp/note.txt", limit=100) == b"hello"
        assert c.get_file("/missing", limit=100) is None
        with pytest.raises(EngineError, match="larger than"):
            c.get_file("/in/data.bin", limit=100)
        truncated = c.copy_out("/out", tmp_path / "got", limit=2000)
        assert (tmp_path / "got" / "out" / "out.bin").read_bytes()[:1000] == payload[:1000]
        assert truncated and {Path(t.path).name for t in truncated} == {"out.bin", "big.log"}
        assert c.copy_out("/nope", tmp_path / "none", limit=10) is None
    engine.close()


def test_docker_errors_are_wrapped(tmp_path: Path, base_image: str) -> None:
    engine = DockerEngine()
    missing = plan("selfbench/never-built:none", "test-engine-err")
    with (
        pytest.raises(EngineError, match="creating container"),
        engine.container(missing, env={}, keep=False),
    ):
        pass
    with (
        engine.container(plan(base_image, "test-engine-err"), env={}, keep=False) as c,
        # The runtime's reason ("unable to find user agent") reaches the exec stream only
        # sometimes; what was being started is always named.
        pytest.raises(EngineError, match=r"cannot start t \(true as agent\) in selfbench-test-"),
    ):
        c.exec(step(["true"], user="agent"), tmp_path / "e.log", limit=1024)
    engine.close()


def test_stale_containers_of_dead_runners_are_reaped(
    base_image: str, docker_client: docker.DockerClient
) -> None:
    import socket

    engine = DockerEngine()
    dead = f"{socket.gethostname()}:999999:1"
    elsewhere = f"another-host-{uuid.uuid4().hex[:6]}:1:1"
    # A run id of its own: the cleanup below removes every container with it (CI at 16a04f2:
    # it removed the orphans test's container, then under the same id, while that one ran).
    run_id = f"test-engine-reap-{uuid.uuid4().hex[:8]}"
    stale = plan(base_image, run_id, owner=dead)
    foreign = plan(base_image, run_id, owner=elsewhere)
    with engine.container(stale, env={}, keep=True), engine.container(foreign, env={}, keep=True):
        pass
    # Any runner's reaper may get there first (each run reaps at its start, and other workers
    # run meanwhile; a removal another one started is still in progress): what counts is that
    # the dead runner's container is gone soon after.
    engine.reap_stale()
    deadline = time.monotonic() + 30
    while True:
        # The raw listing: other tests' containers come and go meanwhile (no inspect of each).
        names = [n.lstrip("/") for c in docker_client.api.containers(all=True) for n in c["Names"]]
        if stale.name not in names or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert stale.name not in names
    assert foreign.name in names
    engine.cleanup({LABEL_RUN: run_id})
    engine.close()


def test_env_values_survive_dockerfile_quoting(tmp_path: Path, base_image: str) -> None:
    """Every value rendered with dockerfile_quote reads back from the built image exactly:
    Docker's own lexer (quotes, backslashes, `$` expansion) changes none of them."""
    import random

    from runner.base.validation import control_character
    from runner.compile.templates import dockerfile_quote

    values = [
        "plain",
        "",
        "with space",
        'double " quote',
        "single ' quote",
        "back\\slash",
        "trailing\\",
        "$HOME",
        "${PATH}",
        "$(id)",
        "`id`",
        "tab-free \\n escape",
        "caf\u00e9 \u4e2d",
        "a=b=c",
        "#not a comment",
    ]
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0x20, 0x7F)] + ["\u00e9", "\u4e2d", "\U0001f600", "\u00a0"]
    for _ in range(40):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        assert control_character(value) is None
        values.append(value)
    # One ENV instruction (one layer) with every pair, continued over lines.
    pairs = " \\\n    ".join(f"V{i}={dockerfile_quote(value)}" for i, value in enumerate(values))
    lines = f"ENV {pairs}"
    context = dockerfile(tmp_path, lines, base_image)
    engine = DockerEngine()
    result = engine.build(
        request(context, f"selfbench-test/env:{uuid.uuid4().hex[:8]}"),
        tmp_path / "build.log",
        limit=1 << 20,
        on_line=lambda line: None,
    )
    assert result.ok, result.error
    assert result.image_id is not None
    env = docker.from_env().images.get(result.image_id).attrs["Config"]["Env"]
    found = dict(item.split("=", 1) for item in env)
    for i, value in enumerate(values):
        assert found[f"V{i}"] == value, (i, value)
    engine.remove_image(result.image_id or "")
    engine.close()


def test_watchdog_catches_an_image_larger_than_the_limit_at_once(
    tmp_path: Path, base_image: str
) -> None:
    """A gate shorter than the sampling period cannot slip under the watchdog."""
    engine = DockerEngine()
    limits = Limits(cpus=1, requested_cpus=1, memory_mb=256, storage_mb=20, pids=64)
    spec = plan(base_image, "test-engine-small", limits=limits, storage=StorageLimit.WATCHDOG)
    with engine.container(spec, env={}, keep=False) as container:
        outcome = container.exec(step(["true"]), tmp_path / "t.log", limit=1024)
    engine.close()
    assert outcome.storage_exceeded_mb is not None and outcome.storage_exceeded_mb > 20
