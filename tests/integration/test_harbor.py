"""The compiled bundle under real Harbor 0.26.0 (its built-in `oracle` and `nop` agents, its
Docker environment), unchanged, under BuildKit and the classic builder; and a bundle with
services checked against Harbor's own TaskConfig and compose merge.

How it runs here (no registry): Harbor in its image (scripts/make-harbor-image.sh) on the main
engine, driving a private engine through its socket (the work directory mounted at the same path,
since Harbor bind-mounts trial directories by path). The bundle's default `FROM ubuntu:24.04`
cannot be pulled, so the private engine holds a stand-in under that tag: the runner's own base
(the host CA and the uv wheel) with `ENV SELFBENCH_UV_SOURCE=registry`, which the bundle's
toolchain ARGs (declared without defaults) let through under BuildKit, the way a user switches
sources when Harbor passes no build args. The stand-in never exists on the main engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from runner.compile.compiler import compile_task
from runner.compile.taskdir import load_authored_task
from runner.model.canaries import CANARY_RULE
from runner.model.settings import CompileOptions
from tests.engines import PrivateEngine, private_engine
from tests.harbor import harbor, harbor_run
from tests.helpers import bash_task, diff_of
from tests.integration.conftest import HOST_CA, ROOT, run_cli, run_verify
from tests.realistic import GO_VENDORED
from tests.realistic.forgers import forgers

# One worker holds the module (its image, stand-in and private engine are module fixtures). In
# `make test` it runs beside the rest: about half of its time Harbor waits (measured: 52 % of the
# two cores busy over its 205 s alone), which the other worker's tests fill.
pytestmark = [pytest.mark.harbor, pytest.mark.xdist_group("test_harbor")]
STANDIN = "selfbench-test/harbor-standin:ubuntu-24.04"


def runner(*args: str) -> str:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def harbor_image() -> str:
    result = subprocess.run(
        [str(ROOT / "scripts" / "make-harbor-image.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    # Mounted at the same path in Harbor's container: keep it short and outside pytest's tree.
    path = Path(f"/tmp/selfbench-harbor-{os.getpid()}")
    path.mkdir(exist_ok=True)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.fixture(scope="module")
def standin(base_image: str, docker_client: docker.DockerClient, workdir: Path) -> Path:
    options = [
        "--toolchains",
        "uv,go",
        "--toolchain-source",
        "uv=registry",
        "--toolchain-source",
        "go=registry",
        "--base-image",
        base_image,
    ]
    if HOST_CA.is_file():
        options += ["--extra-ca-certs", str(HOST_CA)]
    derived = json.loads(runner("prepare", *options, "--plan"))["base"]["derived"]["tag"]
    runner("prepare", *options, "-q")
    context = workdir / "standin"
    context.mkdir(exist_ok=True)
    (context / "Dockerfile").write_text(
        f"FROM {derived}\nENV SELFBENCH_UV_SOURCE=registry SELFBENCH_GO_SOURCE=registry\n"
    )
    for chunk in docker_client.api.build(path=str(context), tag=STANDIN, decode=True, rm=True):
        assert "error" not in chunk, chunk
    tar = workdir / "standin.tar"
    with tar.open("wb") as handle:
        for block in docker_client.images.get(STANDIN).save(named=True):
            handle.write(block)
    docker_client.images.remove(STANDIN)
    return tar


@pytest.fixture(scope="module")
def harbor_engine(
    tmp_path_factory: pytest.TempPathFactory, standin: Path
) -> Iterator[PrivateEngine]:
    with private_engine(tmp_path_factory.mktemp("harbor-engine"), nat=True) as engine:
        docker_at = ["docker", "-H", engine.url]
        subprocess.run([*docker_at, "load", "-q", "-i", str(standin)], check=True)
        subprocess.run([*docker_at, "tag", STANDIN, "ubuntu:24.04"], check=True)
        yield engine


def public_example(directory: Path) -> Path:
    """The example task, its contract declaring testsNetwork: public."""
    shutil.copytree(ROOT / "examples" / "bash-calc", directory)
    definition = json.loads((directory / "definition.json").read_text())
    definition["environment"] = {"testsNetwork": "public"}
    (directory / "definition.json").write_text(json.dumps(definition, indent=2) + "\n")
    return directory


def digest(tree: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        sha.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()


def trial(jobs: Path, job: str) -> dict[str, Any]:
    (result,) = [p for p in (jobs / job).glob("*/result.json")]
    document = json.loads(result.read_text())
    assert isinstance(document, dict)
    return document


def trial_ran(jobs: Path, job: str) -> dict[str, Any]:
    """The trial's result, which must carry no exception. On failure the message shows the end
    of Harbor's exception whole (a compose build's output ends with the failing step's lines,
    apt's `Err:` lines among them), which the dict's repr cuts at 100 characters."""
    result = trial(jobs, job)
    info = result["exception_info"]
    assert info is None, f"{info['exception_type']}: ...{str(info['exception_message'])[-4000:]}"
    return result


@pytest.mark.parametrize("buildkit", ["1", "0"], ids=["buildkit", "classic"])
def test_bundle_runs_unchanged_under_real_harbor(
    buildkit: str, harbor_image: str, harbor_engine: PrivateEngine, workdir: Path
) -> None:
    bundle = workdir / f"bundle-{buildkit}"
    # The example with its tests' network declared public: Harbor enforces the default
    # `no-network` with an egress-control sidecar whose images this machine cannot pull (see
    # the test below).
    task = load_authored_task(public_example(workdir / f"example-{buildkit}"))
    compile_task(task, repo=None, out=bundle, options=CompileOptions())
    before = digest(bundle)
    lint = harbor(harbor_image, harbor_engine, workdir, "harbor", "lint", str(bundle))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    jobs = workdir / f"jobs-{buildkit}"
    rewards = {}
    for agent in ("oracle", "nop"):
        run = harbor_run(
            harbor_image,
            harbor_engine,
            workdir,
            bundle,
            agent,
            jobs,
            "--no-delete",
            env={"DOCKER_BUILDKIT": buildkit},
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        result = trial_ran(jobs, agent)
        assert result["verifier_environment_mode"] == "separate"
        rewards[agent] = result["verifier_result"]["rewards"]
        # The builder asked for is the one that ran: BuildKit marks every step it builds.
        image = f"{result['trial_name']}__env-main:latest".lower()
        history = subprocess.run(
            [
                "docker",
                "-H",
                harbor_engine.url,
                "history",
                "--no-trunc",
                "--format",
                "{{.CreatedBy}}",
                image,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert ("# buildkit" in history) is (buildkit == "1"), history[-500:]
    assert rewards["oracle"]["reward"] == 1
    assert rewards["nop"]["reward"] == 0
    # reward.json holds only the verdict's 0/1 metrics: Harbor averages every numeric key.
    assert set(rewards["oracle"]) == {
        "reward",
        "patch_applied",
        "fail_to_pass",
        "pass_to_pass",
        "deterministic",
        "setup_completed",
    }
    assert digest(bundle) == before


def test_a_sealed_bundle_grades_by_its_census_under_harbor(
    harbor_image: str,
    harbor_engine: PrivateEngine,
    workdir: Path,
    verify_options: list[str],
) -> None:
    """A go test task verified by the runner (its census of test ids sealed into the bundle),
    then run by real Harbor unchanged: the same test.sh grades Harbor's oracle 1 and nop 0 by
    the sealed ids, with per-test evidence and nothing of the runner present."""
    from tests.integration.test_verdicts import go_case

    case = go_case(workdir / "sealed-task")
    definition = json.loads((case.task / "definition.json").read_text())
    definition["environment"] = {"testsNetwork": "public"}
    (case.task / "definition.json").write_text(json.dumps(definition, indent=2) + "\n")
    verified = run_verify(
        case.task, [*verify_options, *case.options], workdir / "sealed-run", "--no-hack-gate"
    )
    assert verified.report["verdict"] == "accepted", verified.report["reason"]
    bundle = Path(verified.report["bundle"])
    census = json.loads((bundle / "tests" / "expected-tests.json").read_text())
    assert census["sealed"] and census["failToPass"]["mode"] == "per-test"
    jobs = workdir / "jobs-sealed"
    rewards, evidence = {}, {}
    for agent in ("oracle", "nop"):
        run = harbor_run(
            harbor_image, harbor_engine, workdir, bundle, agent, jobs, job=f"sealed-{agent}"
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        result = trial_ran(jobs, f"sealed-{agent}")
        rewards[agent] = result["verifier_result"]["rewards"]["reward"]
        (summary,) = list((jobs / f"sealed-{agent}").glob("*/verifier/evidence.json"))
        evidence[agent] = json.loads(summary.read_text())
    assert rewards == {"oracle": 1, "nop": 0}
    assert evidence["oracle"]["mode"] == "per-test" and evidence["oracle"]["sealed"] is True
    assert evidence["oracle"]["runners"] == ["go"]
    assert evidence["nop"]["runs"]["fail_to_pass"]["passed"] is False

    # A forger as Harbor's oracle (the bundle's solution replaced by it): a test main of its own
    # that reports every test in the package's files passed. The sealed canaries are among them,
    # and the same test.sh gives it 0 by their rule alone: the in-process checks (which catch
    # this one too) are off through Harbor's own verifier env, as `--evidence-checks canaries`.
    forged = workdir / "sealed-forged"
    shutil.copytree(bundle, forged)
    with (forged / "task.toml").open("a") as toml:
        toml.write('\n[verifier.env]\nSELFBENCH_EVIDENCE_CHECKS = "canaries"\n')
    forger = forgers(GO_VENDORED, "go")["everything-passes"]
    (forged / "solution" / "gold.patch").write_bytes(diff_of(case.repo, forger.files))
    run = harbor_run(harbor_image, harbor_engine, workdir, forged, "oracle", jobs, job="forged")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = trial(jobs, "forged")
    assert result["verifier_result"]["rewards"]["reward"] == 0
    (summary,) = list((jobs / "forged").glob("*/verifier/evidence.json"))
    problems = json.loads(summary.read_text())["runs"]["fail_to_pass"]["problems"]
    assert CANARY_RULE in problems, problems


def test_the_default_bundle_asks_harbor_for_a_verifier_without_network(
    harbor_image: str, harbor_engine: PrivateEngine, workdir: Path
) -> None:
    """The rendered task.toml says `no-network` for the verifier, Harbor's own TaskConfig reads
    it so, and Harbor acts on it: it runs the trial with its egress control where that works,
    and otherwise refuses to run the verifier rather than run the tests online (here: its
    kernel probe and sidecar images cannot be pulled, so it cannot switch the verifier's
    network after start)."""
    bundle = workdir / "bundle-no-network"
    task = load_authored_task(ROOT / "examples" / "bash-calc")
    compile_task(task, repo=None, out=bundle, options=CompileOptions())
    script = f"""
import tomllib
from pathlib import Path
from harbor.models.task.config import TaskConfig
config = TaskConfig.model_validate(tomllib.loads(Path("{bundle}/task.toml").read_text()))
print(config.verifier.network_mode.value, config.agent.network_mode.value)
"""
    parsed = harbor(harbor_image, harbor_engine, workdir, "python3", "-c", script)
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    assert parsed.stdout.split()[-2:] == ["no-network", "public"]
    jobs = workdir / "jobs-no-network"
    run = harbor_run(harbor_image, harbor_engine, workdir, bundle, "oracle", jobs)
    results = list((jobs / "oracle").glob("*/result.json"))
    if results and json.loads(results[0].read_text()).get("verifier_result"):
        rewards = json.loads(results[0].read_text())["verifier_result"]["rewards"]
        assert rewards["reward"] == 1  # egress control works on this engine
    else:
        # Seen here (Harbor 0.26.0, no egress control): "The execution phase network policy
        # differs from a broader setup or shared phase policy, but this environment cannot
        # change network policy after start. Execution mode: 'no-network'; ..."
        said = run.stdout + run.stderr + "".join(p.read_text() for p in results)
        assert "Execution mode: 'no-network'" in said or (
            "network_mode='no-network' is not supported" in said
        ), said[-3000:]


def test_a_services_bundle_passes_harbors_task_config_and_compose_merge(
    tmp_path: Path, harbor_image: str, harbor_engine: PrivateEngine, workdir: Path
) -> None:
    pinned = "127.0.0.1:5000/selfbench-test/pg:15@sha256:" + "c" * 64
    task = bash_task(
        tmp_path,
        name="harbor-services",
        environment={
            "services": [
                {
                    "name": "db",
                    "image": pinned,
                    "env": {"POSTGRES_PASSWORD": "postgres"},
                    "healthcheck": {"command": "pg_isready -h 127.0.0.1"},
                    "ports": [5432],
                }
            ]
        },
    )
    bundle = workdir / "services-bundle"
    compile_task(
        load_authored_task(task.directory), repo=None, out=bundle, options=CompileOptions()
    )
    script = f"""
import json, subprocess, tomllib
from pathlib import Path
import harbor.environments.docker as docker_env
from harbor.models.task.config import TaskConfig
config = TaskConfig.model_validate(tomllib.loads(Path("{bundle}/task.toml").read_text()))
assert config.verifier.environment_mode.value == "separate", config.verifier
build = Path(docker_env.__file__).parent / "docker-compose-build.yaml"
merged = subprocess.run(
    ["docker", "compose", "-f", str(build), "-f", "{bundle}/tests/docker-compose.yaml",
     "config", "--format", "json"],
    capture_output=True, text=True, check=True,
    env={{"CONTEXT_DIR": "{bundle}/tests", "PATH": "/usr/bin:/bin"}},
)
print(json.dumps(json.loads(merged.stdout)["services"]))
"""
    result = harbor(harbor_image, harbor_engine, workdir, "python3", "-c", script)
    assert result.returncode == 0, result.stderr[-3000:]
    services = json.loads(result.stdout.strip().splitlines()[-1])
    assert services["main"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert services["main"]["command"] == ["sh", "-c", "sleep infinity"]
    assert services["db"]["image"] == pinned
    assert services["db"]["healthcheck"]["test"] == ["CMD-SHELL", "pg_isready -h 127.0.0.1"]
