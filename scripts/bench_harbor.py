"""Benchmark: the same compiled bundle through our `verify` and through real Harbor 0.26's
`nop` and `oracle` trials (the two runs a task author would otherwise make), warm, side by side.

Our verify runs on the main engine. Harbor runs in its image (scripts/make-harbor-image.sh)
driving a private engine that holds a stand-in `ubuntu:24.04` (the runner's derived base with
`ENV SELFBENCH_UV_SOURCE=registry`), exactly as `make test-harbor` does; the stand-in never
exists on the main engine. Each side runs once to build its images, then `--runs` times; the
medians and their ratio are printed.

Usage: python scripts/bench_harbor.py [--runs N] [--keep-workdir]
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


def standin_tar(workdir: Path, base_image: str) -> Path:
    """The stand-in, saved to a tar for the private engine and removed from the main one."""
    options = [
        "--toolchains",
        "uv",
        "--toolchain-source",
        "uv=registry",
        "--base-image",
        base_image,
    ]
    if HOST_CA.is_file():
        options += ["--extra-ca-certs", str(HOST_CA)]
    derived = json.loads(runner("prepare", *options, "--plan"))["base"]["derived"]["tag"]
    runner("prepare", *options, "-q")
    context = workdir / "standin"
    context.mkdir(exist_ok=True)
    (context / "Dockerfile").write_text(f"FROM {derived}\nENV SELFBENCH_UV_SOURCE=registry\n")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    try:
        # The example with its tests' network declared public: Harbor 0.26 enforces the default
        # no-network with an egress-control sidecar this machine cannot pull.
        example = workdir / "example"
        shutil.copytree(ROOT / "examples" / "bash-calc", example)
        definition = json.loads((example / "definition.json").read_text())
        definition["environment"] = {"testsNetwork": "public"}
        (example / "definition.json").write_text(json.dumps(definition, indent=2) + "\n")
        bundle = workdir / "bundle"
        runner("compile", str(example), "-o", str(bundle))
        tar = standin_tar(workdir, base_image)

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
    print("bundle: examples/bash-calc, compiled")
    print(f"harbor's first nop + oracle (images built): {sum(firsts):.1f} s")
    print(f"warm, {args.runs} runs:")
    print(f"  ours   verify (smoke, nop, oracle, determinism): median {ours_median:.2f} s")
    print(
        "  ours   verify with the hack gate and --repeat 1 (the default): "
        f"median {statistics.median(full):.2f} s"
    )
    print(f"  harbor run -a nop, then -a oracle:              median {harbor_median:.2f} s")
    print(f"  ratio harbor / ours: {harbor_median / ours_median:.1f}x")


if __name__ == "__main__":
    main()
