"""Benchmark: the same compiled bundle through our `verify` and through real Harbor 0.26's
`nop` and `oracle` trials (the two runs a task author would otherwise make), warm, side by side.

Our verify runs on the main engine. Harbor runs in its image (scripts/make-harbor-image.sh)
driving a private engine that holds a stand-in `ubuntu:24.04` (the runner's derived base, with
the registry artifacts of the task's toolchains and `ENV SELFBENCH_<TOOLCHAIN>_SOURCE=registry`),
exactly as `make test-harbor` does; the stand-in never exists on the main engine. Each side runs
once to build its images, then `--runs` times; the medians and their ratios are printed.

Any authored task: `--task DIR` (its tests' network is declared public in a copy: Harbor 0.26
refuses a no-network verifier without a registry) and `--repo PATH|URL` when the definition's
repo is not at hand. Its toolchains must have a registry source here (uv, node, go; bun is
installed from npm either way): python and rust download from hosts this machine cannot reach.

Usage: python scripts/bench_harbor.py [--task DIR] [--repo PATH|URL] [--runs N] [--keep-workdir]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_warm_verify import default_options  # noqa: E402

from tests.engines import PrivateEngine, private_engine  # noqa: E402
from tests.harbor import harbor_run  # noqa: E402

STANDIN = "selfbench-bench/harbor-standin:ubuntu-24.04"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def runner(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"selfbench-runner {args[0]} failed: {result.stderr[-2000:]}")
    return result.stdout


def script_output(name: str) -> str:
    made = subprocess.run(
        [str(ROOT / "scripts" / name)], capture_output=True, text=True, check=True
    )
    return made.stdout.strip().splitlines()[-1]


def registry_sources(toolchains: list[str]) -> list[str]:
    """`NAME=registry` for each toolchain of the task's closed set that has a registry source;
    exits when one can only be downloaded from a host this machine cannot reach."""
    from runner.model.task import Toolchain
    from runner.model.toolchains import load_catalog

    catalog = load_catalog()
    layers = catalog.close(Toolchain(name) for name in toolchains)
    unreachable = [
        s.name.value for s in layers if s.registry is None and s.upstream.integrity != "npm"
    ]
    if unreachable:
        raise SystemExit(
            f"toolchains {', '.join(unreachable)} have no registry source: their upstream "
            "downloads do not answer here"
        )
    return [f"{s.name.value}=registry" for s in layers if s.registry is not None]


def standin_tar(workdir: Path, base_image: str, toolchains: list[str], sources: list[str]) -> Path:
    """The stand-in, saved to a tar for the private engine and removed from the main one."""
    options = [
        "--toolchains",
        ",".join(toolchains),
        "--toolchain-source",
        ",".join(sources),
        "--base-image",
        base_image,
    ]
    if HOST_CA.is_file():
        options += ["--extra-ca-certs", str(HOST_CA)]
    derived = json.loads(runner("prepare", *options, "--plan"))["base"]["derived"]["tag"]
    runner("prepare", *options, "-q")
    context = workdir / "standin"
    context.mkdir(exist_ok=True)
    env = "".join(
        f"ENV SELFBENCH_{item.split('=')[0].upper()}_SOURCE=registry\n" for item in sources
    )
    (context / "Dockerfile").write_text(f"FROM {derived}\n{env}")
    subprocess.run(
        ["docker", "build", "-q", "-t", STANDIN, str(context)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    tar = workdir / "standin.tar"
    subprocess.run(["docker", "save", "-o", str(tar), STANDIN], check=True)
    subprocess.run(["docker", "rmi", "-f", STANDIN], check=True, stdout=subprocess.DEVNULL)
    return tar


def harbor_trial(
    image: str, engine: PrivateEngine, workdir: Path, bundle: Path, agent: str, job: str
) -> tuple[float, float]:
    """One `harbor run` (wall seconds, reward)."""
    jobs = workdir / "jobs"
    started = time.perf_counter()
    result = harbor_run(image, engine, workdir, bundle, agent, jobs, job=job, timeout=1800)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(
            f"harbor run -a {agent} failed: {result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    (trial,) = list((jobs / job).glob("*/result.json"))
    document = json.loads(trial.read_text())
    if document.get("exception_info"):
        raise SystemExit(f"harbor trial {job} raised: {document['exception_info']}")
    return wall, float(document["verifier_result"]["rewards"]["reward"])


def our_verify(bundle: Path, options: list[str], logs: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "verify",
            str(bundle),
            "--json",
            "-q",
            "--logs",
            str(logs),
            *options,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    report = json.loads(result.stdout)
    if report["verdict"] != "accepted":
        raise SystemExit(f"our verify: {report['verdict']}: {report['reason']}")
    return wall


def public_copy(task: Path, workdir: Path) -> tuple[Path, dict[str, object]]:
    """The task with its tests' network declared public (Harbor 0.26 enforces the default
    no-network with an egress-control sidecar this machine cannot pull)."""
    copy = workdir / "task"
    shutil.copytree(task, copy, symlinks=True)
    definition = json.loads((copy / "definition.json").read_text())
    environment = definition.setdefault("environment", {})
    environment["testsNetwork"] = "public"
    (copy / "definition.json").write_text(json.dumps(definition, indent=2) + "\n")
    return copy, definition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, default=ROOT / "examples" / "bash-calc")
    parser.add_argument("--repo", help="the repository holding baseCommit, as verify takes it")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep-workdir", action="store_true")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "runner")], check=True)
    options = default_options()
    base_image = options[options.index("--base-image") + 1]
    harbor_image = script_output("make-harbor-image.sh")
    # Mounted at the same path inside Harbor's container (it bind-mounts trial directories).
    workdir = Path(f"/tmp/selfbench-bench-harbor-{os.getpid()}")
    workdir.mkdir()
    task_name = str(args.task)
    try:
        task, definition = public_copy(args.task.resolve(), workdir)
        declared = definition["toolchains"]
        if not isinstance(declared, list):
            raise SystemExit(f"{args.task}/definition.json: toolchains is not a list")
        toolchains = [str(t) for t in declared]
        sources = registry_sources(toolchains)
        options += ["--toolchain-source", ",".join(sources)]
        repo = ["--repo", args.repo] if args.repo else []
        bundle = workdir / "bundle"
        runner("compile", str(task), "-o", str(bundle), *repo)
        tar = standin_tar(workdir, base_image, toolchains, sources)

        # Like for like with Harbor's nop + oracle trials: no hack gate, no flakiness probe.
        same = [*options, "--no-hack-gate", "--repeat", "0"]
        our_verify(bundle, same, workdir / "runs")  # builds (or finds) its images
        ours = [our_verify(bundle, same, workdir / "runs") for _ in range(args.runs)]
        full = [our_verify(bundle, options, workdir / "runs") for _ in range(args.runs)]

        with private_engine(workdir / "engine", nat=True) as engine:
            docker_at = ["docker", "-H", engine.url]
            subprocess.run(
                [*docker_at, "load", "-q", "-i", str(tar)], check=True, stdout=subprocess.DEVNULL
            )
            subprocess.run([*docker_at, "tag", STANDIN, "ubuntu:24.04"], check=True)
            firsts = []
            for agent in ("nop", "oracle"):
                wall, _ = harbor_trial(
                    harbor_image, engine, workdir, bundle, agent, f"first-{agent}"
                )
                firsts.append(wall)
            harbor = []
            for index in range(args.runs):
                nop, nop_reward = harbor_trial(
                    harbor_image, engine, workdir, bundle, "nop", f"nop-{index}"
                )
                oracle, oracle_reward = harbor_trial(
                    harbor_image, engine, workdir, bundle, "oracle", f"oracle-{index}"
                )
                if (nop_reward, oracle_reward) != (0.0, 1.0):
                    raise SystemExit(f"harbor rewards: nop {nop_reward}, oracle {oracle_reward}")
                harbor.append(nop + oracle)
    finally:
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    ours_median, harbor_median = statistics.median(ours), statistics.median(harbor)
    full_median = statistics.median(full)
    print(f"task: {task_name}, compiled (toolchains {', '.join(toolchains)})")
    print(f"harbor's first nop + oracle (images built): {sum(firsts):.1f} s")
    print(f"warm, {args.runs} runs:")
    print(f"  ours   like for like (smoke, nop, oracle, determinism): median {ours_median:.2f} s")
    print(f"  ours   defaults (hack gate, --repeat 1):                median {full_median:.2f} s")
    print(f"  harbor run -a nop, then -a oracle:                      median {harbor_median:.2f} s")
    print(
        f"  ratios harbor / ours: like for like {harbor_median / ours_median:.2f}x, "
        f"defaults {harbor_median / full_median:.2f}x; defaults / like for like "
        f"{full_median / ours_median:.2f}x"
    )


if __name__ == "__main__":
    main()
