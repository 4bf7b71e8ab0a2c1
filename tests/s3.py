"""A real S3-compatible server for the store's tests and the fleet benchmark: moto's server mode
(the PyPI package moto[server]) on a free loopback port, stopped by its pid. No real S3 endpoint
is reachable from this machine; moto answers the same object API (put, get, head, multipart)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.temporal import free_port, stop_process

MOTO = Path(sys.executable).with_name("moto_server")


def s3_environment(endpoint: str) -> dict[str, str]:
    """What a worker or a client needs to reach `endpoint` (boto3's standard variables)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "selfbench-test",
        "AWS_SECRET_ACCESS_KEY": "selfbench-test-secret",
        "AWS_REGION": "us-east-1",
        # The loopback server is never reached through a proxy of the environment.
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


@contextlib.contextmanager
def s3_server(directory: Path, bucket: str) -> Iterator[dict[str, str]]:
    """moto's S3 server with `bucket` made; the environment that reaches it."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = directory / "moto.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(MOTO), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    endpoint = f"http://127.0.0.1:{port}"
    environment = s3_environment(endpoint)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto did not start: {log_path.read_text()}") from None
                time.sleep(0.2)
        saved = {k: os.environ.get(k) for k in environment}
        os.environ.update(environment)
        try:
            import boto3

            boto3.client("s3").create_bucket(Bucket=bucket)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        yield environment
    finally:
        stop_process(process)
