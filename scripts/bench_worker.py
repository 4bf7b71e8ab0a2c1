"""Benchmark: the worker fleet at the orchestrator's scale. A synthetic pool of small tasks (one
pytest project at one base commit, as a discovered pool's candidates share one, or with
`--kind bash` a project whose test runner is a shell script; each task its own held-out test,
so no payload is answered from another's report; each task's tests take about a second)
through `batch --temporal --store` on a real Temporal dev server, with 1, 2 or 3
`selfbench-runner worker` processes on this machine's engine and a shared-directory (or S3:
moto's server) artifact store.

It prints, per worker count: the tasks per hour; the orchestrator's overhead per task (from the
child workflow's start to the verification's first event, to its first gate, and from its last
event to the child workflow's close; median and 95th percentile); the largest payload and the
largest history, in bytes and events, of the pool's runs and the tasks' children. With
--kill-after K, one worker is killed with SIGKILL once K tasks are answered and started again:
the pool must still record every task once.

Usage: python scripts/bench_worker.py [--tasks N] [--workers 1,2] [--jobs J] [--store file|s3]
       [--kill-after K] [--concurrency C] [--worker-option=--no-hack-gate ...]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_warm_verify import default_options  # noqa: E402
from make_bench_task import BASE_CALC, GOLD_CALC, rounds_per_second, test_module  # noqa: E402

from runner.artifacts.store import ArtifactStore, open_store  # noqa: E402
from tests.helpers import (  # noqa: E402
    LIB_BASE,
    LIB_GOLD,
    RUNNER_SH,
    definition,
    diff_of,
    make_repo,
    write_task,
)
from tests.s3 import s3_server  # noqa: E402
from tests.temporal import Worker, start_worker, stop_worker, temporal_server  # noqa: E402

GATES = ("smoke", "nop", "oracle", "determinism", "hack")


def make_pool(root: Path, count: int, seconds: float) -> list[Path]:
    """`count` tasks on one repository: task i holds out its own test of mul (a different
    product each), the gold patch is the same; each selector's tests take seconds / 2."""
    rounds = int(rounds_per_second() * seconds / 2)
    salt = uuid.uuid4().hex[:8]  # a new repository each run: nothing built by an earlier one
    repo, commit = make_repo(
        root / "repo",
        {
            "calc.py": BASE_CALC + f"# bench {salt}\n",
            "tests/__init__.py": "",
            "tests/test_add.py": test_module("add", 1, rounds, "    assert add(2, 3) == 5\n"),
        },
    )
    gold = diff_of(repo, {"calc.py": GOLD_CALC + f"# bench {salt}\n"})
    tasks = []
    for index in range(count):
        check = f"    assert mul({index}, -3) == {-3 * index}\n"
        test_patch = diff_of(repo, {"tests/test_mul.py": test_module("mul", 1, rounds, check)})
        tasks.append(
            write_task(
                root / "tasks" / f"t{index:05d}",
                definition(
                    taskId=f"fleet-{salt}-{index:05d}",
                    repo=str(repo),
                    baseCommit=commit,
                    setupCommand="uv venv -q --python /usr/bin/python3 /opt/venv "
                    "&& uv pip install -q --python /opt/venv pytest==8.3.4",
                    testCommand="PYTHONPATH=. /opt/venv/bin/python -m pytest "
                    "-p no:cacheprovider {tests}",
                    failToPass=["tests/test_mul.py"],
                    passToPass=["tests/test_add.py"],
                    testPaths=["tests/test_mul.py"],
                    toolchains=["uv"],
                    prompt=f"Add mul(a, b) to calc.py (task {index}).",
                    resources={"cpus": 1, "memoryMb": 1024, "storageMb": 4096},
                    environment={
                        "rootSetupCommand": "apt-get update -qq "
                        "&& apt-get install -y -qq python3 > /dev/null"
                    },
                ),
                test_patch=test_patch,
                gold_patch=gold,
                instruction=f"Add mul(a, b) to calc.py, built on add (task {index}).\n",
            )
        )
    return tasks


def make_bash_pool(root: Path, count: int, seconds: float) -> list[Path]:
    """`count` tasks on one bash repository (tests/run.sh runs test scripts; the gold patch adds
    `shout`): task i holds out its own test; each selector's test waits seconds / 2."""
    wait = f"sleep {seconds / 2:g}\n"
    salt = uuid.uuid4().hex[:8]  # a new repository each run: nothing built by an earlier one
    repo, commit = make_repo(
        root / "repo",
        {
            "lib.sh": LIB_BASE + f"# bench {salt}\n",
            "tests/run.sh": RUNNER_SH,
            "tests/test_old.sh": f'. ./lib.sh\n{wait}[ "$(greet x)" = "hello x" ]\n',
        },
    )
    gold = diff_of(repo, {"lib.sh": LIB_GOLD + f"# bench {salt}\n"})
    tasks = []
    for index in range(count):
        test = f'. ./lib.sh\n{wait}[ "$(shout x{index})" = "HELLO X{index}" ]\n'
        tasks.append(
            write_task(
                root / "tasks" / f"t{index:05d}",
                definition(
                    taskId=f"fleet-sh-{salt}-{index:05d}",
                    repo=str(repo),
                    baseCommit=commit,
                    prompt=f"Add shout to lib.sh (task {index}).",
                ),
                test_patch=diff_of(repo, {"tests/test_new.sh": test}),
                gold_patch=gold,
                instruction=f"Add `shout NAME` to lib.sh: NAME in capitals (task {index}).\n",
            )
        )
    return tasks


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _payload_bytes(node: Any) -> list[int]:
    """The size of every payload in a history event (decoded)."""
    sizes: list[int] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "payloads" and isinstance(value, list):
                sizes += [len(base64.b64decode(p.get("data", ""))) for p in value]
            else:
                sizes += _payload_bytes(value)
    elif isinstance(node, list):
        for item in node:
            sizes += _payload_bytes(item)
    return sizes


async def _workflows(server: str, pool_id: str) -> dict[str, Any]:
    """The pool's runs and its children: times, history sizes, the largest payload."""
    from temporalio.client import Client

    client = await Client.connect(server)
    children: dict[str, tuple[float, float]] = {}
    pool_runs: list[tuple[int, int]] = []
    task_histories: list[tuple[int, int]] = []
    largest = 0
    async for execution in client.list_workflows():
        if execution.id != pool_id and not execution.id.startswith(f"{pool_id}/"):
            continue
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        text = history.to_json()
        events = json.loads(text)["events"]
        size = (len(events), len(text))
        largest = max([largest, *_payload_bytes(events)])
        if execution.id == pool_id:
            pool_runs.append(size)
        else:
            task_histories.append(size)
            assert execution.start_time and execution.close_time
            children[execution.id.rsplit("/", 1)[1]] = (
                execution.start_time.timestamp(),
                execution.close_time.timestamp(),
            )
    return {"children": children, "pools": pool_runs, "tasks": task_histories, "largest": largest}


def _events(store: ArtifactStore, key: str) -> list[dict[str, Any]]:
    record = store.get_record(f"runs/{key}")
    assert record is not None, key
    with tarfile.open(store.fetch(record["archive"]), "r:gz") as tar:
        member = tar.extractfile("events.jsonl")
        assert member is not None
        return [json.loads(line) for line in member.read().decode().splitlines() if line]


def _percentiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered):.2f} s, p95 {p95:.2f} s"


def overheads(store: ArtifactStore, children: dict[str, tuple[float, float]]) -> dict[str, str]:
    to_start, to_gate, to_close = [], [], []
    for key, (opened, closed) in children.items():
        events = _events(store, key)
        if not events:
            continue
        to_start.append(_seconds(events[0]["at"]) - opened)
        gates = [e for e in events if e["stage"] in GATES]
        if gates:
            to_gate.append(_seconds(gates[0]["at"]) - opened)
        to_close.append(closed - _seconds(events[-1]["at"]))
    return {
        "submission to the verification's first event": _percentiles(to_start),
        "submission to the first gate": _percentiles(to_gate),
        "last event to the child's close": _percentiles(to_close),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--workers", default="1,2", help="worker counts to measure, e.g. 1,2")
    parser.add_argument("--jobs", type=int, default=2, help="verifications at once per worker")
    parser.add_argument("--seconds", type=float, default=1.0, help="each task's tests' time")
    parser.add_argument("--store", choices=["file", "s3"], default="file")
    parser.add_argument(
        "--kind", choices=["pytest", "bash"], default="pytest", help="the tasks' test runner"
    )
    parser.add_argument("--kill-after", type=int, default=0, help="SIGKILL a worker after K")
    parser.add_argument("--concurrency", type=int, default=0, help="default: workers x jobs")
    parser.add_argument(
        "--worker-option",
        action="append",
        default=[],
        help="a verify option for every worker, e.g. --worker-option=--no-hack-gate",
    )
    args = parser.parse_args()
    # SIGTERM (a run cut short) unwinds like Ctrl-C, so the servers and workers it started are
    # stopped by the `finally` blocks (by default the signal ended only this process).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    options = [*default_options(), "--build-network", "host"]
    # Kept when a task did not end accepted, or the batch failed: its logs say why.
    scratch = tempfile.mkdtemp(prefix="bench-fleet-")
    clean = True
    try:
        root = Path(scratch)
        with temporal_server(root / "temporal") as server:
            env = dict(os.environ)
            if args.store == "s3":
                s3 = s3_server(root / "s3", "selfbench-bench")
                reach = s3.__enter__()
                env.update(reach)
                os.environ.update(reach)  # this process reads the runs' records too
                store_url = "s3://selfbench-bench/fleet"
            else:
                store_url = f"file://{root}/store"
            for count in (int(n) for n in args.workers.split(",")):
                clean &= measure(args, options, root / f"w{count}", server, store_url, env, count)
    except BaseException:
        clean = False
        raise
    finally:
        if clean:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print(f"kept for a look: {scratch} (remove it when done)")
    return 0 if clean else 1


def measure(
    args: argparse.Namespace,
    options: list[str],
    root: Path,
    server: str,
    store_url: str,
    env: dict[str, str],
    count: int,
) -> bool:
    """One pool on `count` workers, its figures printed: whether every task was accepted."""
    make = make_bash_pool if args.kind == "bash" else make_pool
    tasks = make(root / "pool", args.tasks, args.seconds)
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    worker_options = [*options, *args.worker_option, "--store", store_url]
    workers: list[Worker] = []
    try:
        for n in range(count):
            workers.append(
                start_worker(
                    server, root / f"worker{n}", queue, worker_options, jobs=args.jobs, env=env
                )
            )
        out = root / "out"
        concurrency = args.concurrency or count * args.jobs
        command = [sys.executable, "-m", "runner", "batch", *map(str, tasks)]
        command += ["--temporal", server, "--task-queue", queue, "--jobs", str(concurrency)]
        command += ["--store", store_url, "--out", str(out), "-q"]
        started = time.monotonic()
        client_env = {**env, "SELFBENCH_CACHE_DIR": str(root / "client-cache")}
        process = subprocess.Popen(command, cwd=ROOT, env=client_env, stderr=subprocess.PIPE)
        killed = False
        while process.poll() is None:
            answered = sum(w.text().count(" in ") for w in workers)
            if args.kill_after and not killed and answered >= args.kill_after:
                victim = workers[0]
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait(30)
                print(f"  killed worker 0 (SIGKILL) after {answered} answers; starting it again")
                workers[0] = start_worker(
                    server, victim.log.parent, queue, worker_options, jobs=args.jobs, env=env
                )
                killed = True
            time.sleep(1)
        seconds = time.monotonic() - started
        stderr = process.stderr.read().decode() if process.stderr else ""
        if process.returncode not in (0, 1, 3) or not (out / "batch.json").is_file():
            raise SystemExit(f"batch failed (exit {process.returncode}): {stderr[-3000:]}")
    finally:
        for worker in workers:
            stop_worker(worker)
    document = json.loads((out / "batch.json").read_text())
    verdicts: dict[str, int] = {}
    for task in document["tasks"]:
        verdicts[task["verdict"]] = verdicts.get(task["verdict"], 0) + 1
    run_dirs = [t["runDir"] for t in document["tasks"]]
    keys = {d.rsplit("/", 1)[1] for d in run_dirs}
    pool_id = next(iter(keys)).rsplit("-", 1)[0]
    found = asyncio.run(_workflows(server, pool_id))
    store = open_store(store_url, cache=root / "reader-cache")
    print(f"{count} worker(s) x {args.jobs} job(s), {args.tasks} tasks, store {store_url[:5]}:")
    print(f"  {seconds:.1f} s: {args.tasks / seconds * 3600:.0f} tasks/hour; verdicts {verdicts}")
    print(f"  every task recorded once: {len(keys) == args.tasks == len(found['children'])}")
    for task in document["tasks"]:
        if task["verdict"] != "accepted":
            print(f"  {task['runDir'].rsplit('/', 1)[1]}: {task['verdict']}: {task.get('reason')}")
    for name, figure in overheads(store, found["children"]).items():
        print(f"  {name}: {figure}")
    pools, children = found["pools"], found["tasks"]
    print(
        f"  pool runs: {len(pools)}; largest history {max(e for e, _ in pools)} events, "
        f"{max(b for _, b in pools) / 1e6:.2f} MB (JSON); largest child history "
        f"{max(e for e, _ in children)} events, {max(b for _, b in children) / 1e3:.1f} KB; "
        f"largest payload {found['largest']} bytes"
    )
    logs = "".join((root / f"worker{n}" / "worker.log").read_text() for n in range(count))
    again = re.findall(r"worker: (\S+): \w+ in [\d.]+ s \(attempt ([2-9]|\d\d+)", logs)
    print(f"  answered on a later attempt (the killed worker's, or a retry): {again or 'none'}")
    states = [root / f"worker{n}" / "state" for n in range(count)]
    kept = sum(len(list((s / "runs").rglob("report.json"))) for s in states)
    print(
        f"  the workers' state directories after the pool: {sum(map(_size, states)) / 1e6:.1f} MB "
        f"({kept} run archive(s) kept; the store holds {args.tasks})"
    )

    return verdicts == {"accepted": args.tasks}


def _size(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


if __name__ == "__main__":
    raise SystemExit(main())
