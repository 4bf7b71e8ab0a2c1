"""Engines found as the docker CLI finds them: contexts made by the real docker CLI in a
DOCKER_CONFIG of the test's own, the CLI's order (DOCKER_HOST, DOCKER_CONTEXT, the current
context), TLS files of a context, and an unknown context refused rather than defaulted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runner.base.errors import UsageError
from runner.engine.hosts import DEFAULT_HOST, context_endpoint, resolve


def docker_cli(config: Path, *args: str) -> None:
    subprocess.run(
        ["docker", *args],
        env={**os.environ, "DOCKER_CONFIG": str(config)},
        check=True,
        capture_output=True,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    directory = tmp_path / "docker-config"
    docker_cli(directory, "context", "create", "far", "--docker", "host=tcp://10.9.8.7:2375")
    docker_cli(directory, "context", "create", "dead", "--docker", "host=unix:///nothing.sock")
    pems = tmp_path / "pems"
    pems.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=engine", "-keyout", str(pems / "key.pem"), "-out", str(pems / "cert.pem")],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (pems / "ca.pem").write_bytes((pems / "cert.pem").read_bytes())
    docker_cli(
        directory,
        "context", "create", "secure", "--docker",
        f"host=tcp://10.9.8.7:2376,ca={pems}/ca.pem,cert={pems}/cert.pem,key={pems}/key.pem",
    )  # fmt: skip
    return directory


def test_contexts_resolve_as_the_docker_cli_resolves_them(config: Path) -> None:
    env = {"DOCKER_CONFIG": str(config), "HOME": "/nonexistent"}
    assert resolve(env).url == DEFAULT_HOST  # no current context: the default engine
    docker_cli(config, "context", "use", "far")
    assert (resolve(env).url, resolve(env).name) == ("tcp://10.9.8.7:2375", "far")
    named = resolve({**env, "DOCKER_CONTEXT": "dead"})
    assert (named.url, named.name) == ("unix:///nothing.sock", "dead")
    # DOCKER_HOST wins over both, as in the CLI.
    host = resolve({**env, "DOCKER_CONTEXT": "dead", "DOCKER_HOST": "unix:///h.sock"})
    assert host.url == "unix:///h.sock" and host.from_host_variable
    assert resolve({**env, "DOCKER_CONTEXT": "default"}).url == DEFAULT_HOST
    child = named.environment({**env, "DOCKER_CONTEXT": "dead", "PATH": "/bin"})
    assert child["DOCKER_HOST"] == "unix:///nothing.sock" and "DOCKER_CONTEXT" not in child
    assert child["PATH"] == "/bin"


def test_a_context_s_tls_files_come_along(config: Path) -> None:
    env = {"DOCKER_CONFIG": str(config)}
    secure = context_endpoint("secure", env, field="--engine")
    assert secure.url == "tcp://10.9.8.7:2376" and secure.tls_verify
    assert secure.tls_dir is not None
    assert sorted(p.name for p in secure.tls_dir.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    child = secure.environment({"DOCKER_TLS_VERIFY": "", "DOCKER_CERT_PATH": "/elsewhere"})
    assert child["DOCKER_CERT_PATH"] == str(secure.tls_dir) and child["DOCKER_TLS_VERIFY"] == "1"


@pytest.mark.parametrize("where", ["DOCKER_CONTEXT", "currentContext", "--engine"])
def test_an_unknown_context_is_an_error_never_the_default_engine(config: Path, where: str) -> None:
    env = {"DOCKER_CONFIG": str(config)}
    with pytest.raises(UsageError) as caught:
        if where == "DOCKER_CONTEXT":
            resolve({**env, "DOCKER_CONTEXT": "nowhere"})
        elif where == "currentContext":
            (config / "config.json").write_text('{"currentContext": "nowhere"}')
            resolve(env)
        else:
            context_endpoint("nowhere", env, field="--engine")
    assert "'nowhere' does not exist" in caught.value.message
    assert str(config / "contexts") in caught.value.message
    assert caught.value.field == where


def test_a_refused_qgroup_limit_on_a_mount_is_retried_and_nothing_else_is() -> None:
    import requests
    from docker.errors import APIError

    from runner.engine.calls import qgroup_retry

    def refusal(message: str) -> APIError:
        response = requests.Response()
        response.status_code = 500
        return APIError("500 Server Error", response, explanation=message)

    calls: list[int] = []

    @qgroup_retry()
    def copy(fails: int, message: str) -> str:
        calls.append(1)
        if len(calls) <= fails:
            raise refusal(message)
        return "copied"

    assert copy(2, "Failed to limit qgroup for &{}: disk quota exceeded") == "copied"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(APIError, match="No such container"):
        copy(1, "No such container: x")
    assert len(calls) == 1
    calls.clear()
    with pytest.raises(APIError, match="qgroup"):
        copy(9, "Failed to limit qgroup for &{}: invalid argument")
    assert len(calls) == 4
