"""The environment contract on a real engine, with real digests from a local registry: a
digest-pinned base, root setup, a verifier-only PostgreSQL service, evidence, and toolchain
caches that serve the verifier with the network off."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.helpers import bash_task
from tests.integration.conftest import ROOT, leftovers, run_verify
from tests.registry import Registry, local_registry

# Its tests share module-scoped fixtures: one worker runs them all (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_environment")

POSTGRES_CONTEXT = ROOT / "tests" / "data" / "services" / "postgres"
ROOT_SETUP = (
    "apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql-client "
    "> /dev/null && rm -rf /var/lib/apt/lists/*"
)
# The new test needs the gold fix and the database; the old one needs the database.
NEW_TEST = (
    '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ] || exit 1\n[ "$(psql -tAc "select 40 + 2")" = 42 ]\n'
)
OLD_TEST = '. ./lib.sh\n[ "$(greet x)" = "hello x" ] || exit 1\npsql -tAc "select 1"\n'


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with local_registry(tmp_path_factory.mktemp("registry")) as started:
        yield started


@pytest.fixture(scope="module")
def pinned(
    registry: Registry, base_image: str, docker_client: docker.DockerClient
) -> dict[str, str]:
    """The local base and a PostgreSQL service image, pushed and pinned by their digests."""
    base = registry.push(docker_client, base_image, "selfbench-test/debian", "bookworm")
    for chunk in docker_client.api.build(
        path=str(POSTGRES_CONTEXT),
        tag="selfbench-test/postgres:15",
        buildargs={"BASE_IMAGE": base_image},
        network_mode="host",
        decode=True,
        rm=True,
    ):
        if "error" in chunk:
            raise RuntimeError(f"building the postgres service image: {chunk['error']}")
    postgres = registry.push(docker_client, "selfbench-test/postgres:15", "selfbench-test/pg", "15")
    return {"base": base, "postgres": postgres}


def contract(pinned: dict[str, str], *, services: bool = True) -> dict[str, Any]:
    document: dict[str, Any] = {
        "baseImage": pinned["base"],
        "rootSetupCommand": ROOT_SETUP,
        "environmentVariables": {"PGHOST": "db", "PGUSER": "postgres", "PGPASSWORD": "postgres"},
        "evidence": [
            {"field": "services", "path": "tests/run.sh", "note": "the suite talks to postgres"}
        ],
    }
    if services:
        document["services"] = [
            {
                "name": "db",
                "image": pinned["postgres"],
                "env": {"POSTGRES_PASSWORD": "postgres"},
                "healthcheck": {
                    "command": "pg_isready -h 127.0.0.1 -U postgres",
                    "intervalSeconds": 0.5,
                    "retries": 120,
                },
                "ports": [5432],
            }
        ]
    return document


def options(verify_options: list[str]) -> list[str]:
    # The pinned base replaces --base-image; builds reach Debian's mirror through the host.
    return [*verify_options, "--build-network", "host"]


def test_postgres_service_task_is_accepted_and_isolated_from_the_agent(
    tmp_path: Path,
    pinned: dict[str, str],
    verify_options: list[str],
    docker_client: docker.DockerClient,
) -> None:
    task = bash_task(
        tmp_path,
        name="pg-task",
        new_test=NEW_TEST,
        extra_base={"tests/test_old.sh": OLD_TEST},
        environment=contract(pinned),
    )
    # A first run records the oracle's patch: the kept run below verifies it as predicted (its
    # verifier and services under names of their own, beside the agent side).
    first = run_verify(
        task.directory,
        options(verify_options),
        tmp_path / "first",
        "--no-hack-gate",
        "--repeat",
        "0",
    )
    assert first.code == 0, first.report["reason"]
    # No hack gate: an exit-code task's exploits each start a verifier with its own database
    # (most of this test's CI minutes), and none reads the service (the agent has no network);
    # the services' own subject (names, networks, isolation, --keep) is the gates' below.
    run = run_verify(
        task.directory, options(verify_options), tmp_path / "run", "--keep", "--no-hack-gate"
    )
    try:
        assert run.code == 0, run.report["reason"]
        assert run.stage("oracle")["data"]["predictedPatch"] == "confirmed"
        build = first.stage("build")["data"]
        assert build["baseImage"] == pinned["base"]
        assert pinned["base"].split("@")[1] in " ".join(build["baseImageDigests"])
        # Root setup ran once: the verifier build found the agent's layer in the cache.
        log = (tmp_path / "first" / "build" / "verifier.log").read_text()
        step = re.search(
            r"Step \d+/\d+ : RUN bash /opt/selfbench-environment/root-setup.sh\n(.*)", log
        )
        assert step and "Using cache" in step.group(1), log[-2000:]
        assert (tmp_path / "run" / "oracle" / "services" / "db.log").is_file()
        kept = {k["label"]: k["name"] for k in run.report["kept"]}
        # The agent has no network at all: it cannot resolve or reach the service.
        agent = docker_client.containers.get(kept["oracle agent"])
        assert set(agent.attrs["NetworkSettings"]["Networks"]) == {"none"}
        assert agent.exec_run(["getent", "hosts", "db"]).exit_code != 0
        verifier = docker_client.containers.get(kept["oracle verifier"])
        networks = set(verifier.attrs["NetworkSettings"]["Networks"])
        assert len(networks) == 1 and next(iter(networks)).startswith("selfbench-pg-task-oracle-")
        # --keep keeps the services too: the kept verifier still reaches its database.
        assert verifier.exec_run(["getent", "hosts", "db"]).exit_code == 0
    finally:
        subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "python"),
                "-m",
                "runner",
                "clean",
                "--run",
                run.report["runId"],
            ],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
    assert leftovers(docker_client, run.report["runId"]) == []
    assert (
        docker_client.networks.list(filters={"label": f"org.selfbench.run={run.report['runId']}"})
        == []
    )


def test_without_its_service_the_task_is_red_with_the_connection_error(
    tmp_path: Path, pinned: dict[str, str], verify_options: list[str]
) -> None:
    task = bash_task(
        tmp_path,
        name="pg-missing",
        new_test=NEW_TEST,
        extra_base={"tests/test_old.sh": OLD_TEST},
        environment=contract(pinned, services=False),
    )
    # --keep-going: the oracle is red too (its tests need the database as well), and whichever
    # of the two ended first would settle the verdict and stop the other (CI saw the oracle win).
    run = run_verify(task.directory, options(verify_options), tmp_path / "run", "--keep-going")
    assert run.code == 1
    nop = run.stage("nop")
    assert nop["status"] == "failed"
    assert nop["detail"].startswith("pass-to-pass tests fail on the base snapshot (exit 1): ")
    assert 'could not translate host name "db"' in nop["detail"]


def test_a_wrong_digest_is_refused_not_substituted(
    tmp_path: Path, pinned: dict[str, str], verify_options: list[str]
) -> None:
    name = pinned["base"].split("@")[0]
    wrong = f"{name}@sha256:{'0' * 64}"
    task = bash_task(tmp_path, name="wrong-digest", environment={"baseImage": wrong})
    run = run_verify(task.directory, options(verify_options), tmp_path / "run")
    assert run.code == 3
    detail = run.stage("build")["detail"]
    assert detail.startswith(f"base image {wrong}: the local {name} is sha256:")
    assert "not the pinned digest" in detail


def test_a_missing_evidence_path_is_an_audit_blocker(
    tmp_path: Path, pinned: dict[str, str], verify_options: list[str]
) -> None:
    document = contract(pinned, services=False)
    document["evidence"] = [{"field": "baseImage", "path": "Dockerfile", "note": "the CI image"}]
    task = bash_task(tmp_path, name="no-evidence", environment=document)
    run = run_verify(task.directory, options(verify_options), tmp_path / "run")
    assert run.code == 1
    assert run.stage("audit")["detail"] == "evidence path 'Dockerfile' does not exist at baseCommit"


NO_NETWORK = (
    "! grep -q $'^[^\\t]*\\t00000000' /proc/net/route || { echo 'network is on'; exit 3; }\n"
)
FIXED = '. ./lib.sh\n[ "$(shout x)" = "HELLO X" ] || exit 1\n' + NO_NETWORK
CACHE_CASES: dict[str, dict[str, Any]] = {
    "npm": {
        "toolchains": ["node"],
        "setupCommand": "npm install --no-audit --no-fund --no-save is-number@7.0.0 > /dev/null",
        "test": FIXED
        + "node -e \"require('is-number')\"\n"
        + "mkdir -p /tmp/o && cd /tmp/o && npm install --offline --no-audit --no-fund "
        "is-number@7.0.0\n",
    },
    "uv": {
        # uv's managed Pythons download from a host this network does not reach: Debian's.
        "toolchains": ["uv"],
        "rootSetupCommand": "apt-get update -qq && apt-get install -y -qq python3 > /dev/null",
        "setupCommand": "uv venv -q --python /usr/bin/python3 /opt/venv "
        "&& uv pip install -q --python /opt/venv six==1.16.0",
        "test": FIXED
        + "/opt/venv/bin/python -c 'import six'\n"
        + 'v=$(mktemp -d) && uv venv -q --python /usr/bin/python3 "$v/venv" '
        '&& uv pip install -q --offline --python "$v/venv" six==1.16.0\n',
    },
    "bun": {
        "toolchains": ["bun"],
        "extra": {"package.json": '{"name": "x", "dependencies": {"is-number": "7.0.0"}}\n'},
        "setupCommand": "bun install --no-save > /dev/null",
        "test": FIXED
        + "bun -e \"require('is-number')\"\n"
        + '[ "$(bun pm cache)" = /opt/selfbench-cache/bun ]\n'
        + 'ls "$(bun pm cache)" | grep -q is-number\n',
    },
    "go": {
        "toolchains": ["go"],
        "extra": {
            "go.mod": "module example.com/x\n\ngo 1.25\n",
            "main.go": 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("x") }\n',
        },
        "setupCommand": "go build ./...",
        "test": FIXED
        + '[ "$(go env GOCACHE)" = /opt/selfbench-cache/go-build ]\n'
        + '[ "$(ls "$(go env GOCACHE)" | wc -l)" -gt 10 ]\n'
        + 'touch "$(go env GOCACHE)/written-by-$(id -un)"\n'
        + "go build -o /tmp/x ./... && /tmp/x\n",
    },
}


@pytest.mark.parametrize("name", sorted(CACHE_CASES))
def test_setup_caches_serve_the_verifier_with_the_network_off(
    tmp_path: Path, name: str, verify_options: list[str]
) -> None:
    case = CACHE_CASES[name]
    sources = "uv=registry,node=registry,go=registry"
    task = bash_task(
        tmp_path,
        name=f"cache-{name}",
        new_test=case["test"],
        extra_base=case.get("extra"),
        toolchains=case["toolchains"],
        setupCommand=case["setupCommand"],
        **(
            {"environment": {"rootSetupCommand": case["rootSetupCommand"]}}
            if "rootSetupCommand" in case
            else {}
        ),
    )
    run = run_verify(
        task.directory,
        [*verify_options, "--toolchain-source", sources, "--build-network", "host"],
        tmp_path / "run",
        "--no-hack-gate",  # the caches are the subject: no exploit reads them
    )
    assert run.code == 0, run.report["reason"]
    assert run.report["settings"]["testsNetwork"] == "no-network"


def test_a_test_that_downloads_is_red_with_the_network_off_and_green_when_declared(
    tmp_path: Path, verify_options: list[str]
) -> None:
    # npm asks its registry (the one thing here that answers): fails with the network off, and
    # says why in the log (a resolver error), which is what sends the red oracle online again.
    fetch = (
        FIXED.replace(NO_NETWORK, "")
        + "npm view --fetch-retries=0 is-number@7.0.0 name | grep -qx is-number\n"
    )
    options = [*verify_options, "--toolchain-source", "node=registry"]
    task = bash_task(tmp_path, name="needs-network", new_test=fetch, toolchains=["node"])
    run = run_verify(task.directory, options, tmp_path / "off")
    assert run.report["verdict"] == "rejected", run.report["reason"]
    oracle = run.stage("oracle")
    assert oracle["status"] == "failed"
    assert oracle["detail"].startswith("fail-to-pass tests still fail with the gold patch")
    assert (
        "the tests ran with the network off, and pass with it on: they need the network "
        '(declare environment.testsNetwork: "public")' in oracle["detail"]
    )
    assert oracle["data"]["passesOnline"] is True
    assert run.report["settings"]["testsNetwork"] == "no-network"

    declared = bash_task(
        tmp_path,
        name="declares-network",
        new_test=fetch,
        toolchains=["node"],
        environment={"testsNetwork": "public"},
    )
    # Green once declared: the network is the subject (no exploits, each online).
    accepted = run_verify(declared.directory, options, tmp_path / "on", "--no-hack-gate")
    assert accepted.report["verdict"] == "accepted", accepted.report["reason"]
    assert accepted.report["settings"]["testsNetwork"] == "public"
    toml = (tmp_path / "on" / "bundle" / "task.toml").read_text()
    assert 'network_mode = "public"' in toml.split("[verifier]")[1].split("[")[0]
    default_toml = (tmp_path / "off" / "bundle" / "task.toml").read_text()
    assert 'network_mode = "no-network"' in default_toml.split("[verifier]")[1].split("[")[0]
