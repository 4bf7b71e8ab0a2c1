"""Toolchain layers really built on this machine: registry sources for uv, node, bun and go,
a bun task verified end to end, and the upstream download-and-verify path through a local
mirror on 127.0.0.1: a mirror's own file is refused by the catalog's pin (go, node, rust), and
uv, checked against its published `.sha256`, fails on a wrong one."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.server
import io
import subprocess
import sys
import tarfile
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import docker
import pytest

from runner.model.task import Toolchain
from runner.model.toolchains import load_catalog
from runner.run.artifacts import fetch_registry_artifact
from tests.helpers import bash_task, definition, diff_of, make_repo, write_task
from tests.integration.conftest import ROOT, Run, run_verify

REGISTRY = ["--toolchain-source", "uv=registry,node=registry,go=registry"]


def answers(run_report: dict[str, object]) -> str:
    stages = run_report["stages"]
    assert isinstance(stages, dict)
    return "\n".join(stages["smoke"]["data"]["answers"])


def test_go_bun_uv_from_registries(tmp_path: Path, verify_options: list[str]) -> None:
    task = bash_task(tmp_path, name="go-bun-uv", toolchains=["go", "bun", "uv"])
    # The toolchains are the subject (smoke's answers): no hack gate.
    run = run_verify(
        task.directory, [*verify_options, *REGISTRY], tmp_path / "run", "--no-hack-gate"
    )
    assert run.code == 0, run.stderr
    smoke = answers(run.report)
    assert "go version go1.25.0 linux/" in smoke
    assert "v22.14.0" in smoke.splitlines()  # node, implied by bun
    assert "1.3.14" in smoke.splitlines()  # bun
    assert "uv 0.13.9" in smoke
    assert run.report["settings"]["toolchainSources"] == {
        "uv": "registry",
        "node": "registry",
        "go": "registry",
    }
    # The bundle still renders the upstream path by default: the source is a build arg without
    # a default (the script falls back to upstream), set only by the runner.
    dockerfile = (tmp_path / "run" / "bundle" / "environment" / "Dockerfile").read_text()
    assert "ARG SELFBENCH_GO_SOURCE\n" in dockerfile
    assert "SELFBENCH_GO_SOURCE=" not in dockerfile


SUM_TS = "export function sum(values: number[]): number {\n  return 0;\n}\n"
SUM_GOLD = (
    "export function sum(values: number[]): number {\n"
    "  let total = 0;\n"
    "  for (const value of values) {\n"
    "    if (!Number.isFinite(value)) {\n"
    "      throw new RangeError(`not a finite number: ${value}`);\n"
    "    }\n"
    "    total += value;\n"
    "  }\n"
    "  return total;\n"
    "}\n\n"
    "export function mean(values: number[]): number {\n"
    "  if (values.length === 0) {\n"
    '    throw new RangeError("mean of no values");\n'
    "  }\n"
    "  return sum(values) / values.length;\n"
    "}\n\n"
    "export function range(values: number[]): number {\n"
    "  if (values.length === 0) {\n"
    '    throw new RangeError("range of no values");\n'
    "  }\n"
    "  return Math.max(...values) - Math.min(...values);\n"
    "}\n"
)


def test_bun_task_end_to_end(tmp_path: Path, verify_options: list[str]) -> None:
    repo, commit = make_repo(
        tmp_path / "bun-repo",
        {
            "package.json": '{"name": "stats", "version": "1.0.0", "type": "module"}\n',
            "src/stats.ts": SUM_TS,
            "tests/old.test.ts": (
                'import { expect, test } from "bun:test";\n'
                'test("truth", () => { expect(1 + 1).toBe(2); });\n'
            ),
        },
    )
    test_patch = diff_of(
        repo,
        {
            "tests/stats.test.ts": (
                'import { expect, test } from "bun:test";\n'
                'import { mean, sum } from "../src/stats";\n'
                'test("sum", () => { expect(sum([1, 2, 3])).toBe(6); });\n'
                'test("mean", () => { expect(mean([2, 4])).toBe(3); });\n'
            )
        },
    )
    gold_patch = diff_of(repo, {"src/stats.ts": SUM_GOLD})
    doc = definition(
        taskId="bun-stats",
        repo=str(repo),
        baseCommit=commit,
        setupCommand="bun install",
        testCommand="bun test {tests}",
        failToPass=["tests/stats.test.ts"],
        passToPass=["tests/old.test.ts"],
        testPaths=["tests/stats.test.ts"],
        toolchains=["bun"],
    )
    directory = write_task(
        tmp_path / "bun-stats", doc, test_patch=test_patch, gold_patch=gold_patch
    )
    run = run_verify(directory, [*verify_options, *REGISTRY], tmp_path / "run")
    assert run.code == 0, (run.report["reason"], run.stderr[-2000:])
    nop_log = (tmp_path / "run" / "nop" / "logs" / "verifier" / "fail_to_pass.log").read_text()
    assert " 0 pass" in nop_log
    oracle_log = (
        tmp_path / "run" / "oracle" / "logs" / "verifier" / "fail_to_pass.log"
    ).read_text()
    assert "2 pass" in oracle_log


# ---- upstream path through a local mirror ------------------------------------------------


class Mirror:
    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.base = f"http://127.0.0.1:{port}"
        self.requests: list[str] = []

    def add(
        self, relative: str, data: bytes, *, digest: str | None = None, sidecar: bool = True
    ) -> str:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        real = hashlib.sha256(data).hexdigest()
        if sidecar:
            Path(f"{path}.sha256").write_text(f"{digest or real}  {path.name}\n")
        return real


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    root = tmp_path / "mirror"
    root.mkdir()
    holder: list[Mirror] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            holder[0].requests.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(Handler, directory=str(root))
    )
    holder.append(Mirror(root, server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()


def tarball(files: dict[str, str | bytes], *, mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:  # type: ignore[call-overload]
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


FAKE_GO = "#!/bin/sh\necho 'go version go1.25.0 linux/amd64'\n"


def mirrored_run(
    tmp_path: Path, verify_options: list[str], name: str, toolchains: list[str], mirrors: list[str]
) -> Run:
    task = bash_task(tmp_path, name=name, toolchains=toolchains)
    options = [*verify_options, "--build-network", "host"]
    for item in mirrors:
        # A mirror serves the upstream source: whatever source the suite chose for it.
        options += [
            "--toolchain-mirror",
            item,
            "--toolchain-source",
            f"{item.split('=')[0]}=upstream",
        ]
    return run_verify(task.directory, options, tmp_path / "run", "--no-hack-gate")


FAKE_RUSTUP = (
    '#!/bin/sh\nset -e\nmkdir -p "$CARGO_HOME/bin" "$RUSTUP_HOME"\n'
    'printf \'#!/bin/sh\\necho "cargo 1.90.0 (mirror test)"\\n\' > "$CARGO_HOME/bin/cargo"\n'
    'chmod 755 "$CARGO_HOME/bin/cargo"\n'
)
FAKE_NODE: dict[str, str | bytes] = {
    "node-v22.14.0-linux-x64/bin/node": "#!/bin/sh\necho v22.14.0\n",
    "node-v22.14.0-linux-x64/bin/npm": "#!/bin/sh\necho 10.9.2\n",
    "node-v22.14.0-linux-x64/bin/corepack": "#!/bin/sh\necho 0.31.0\n",
}


@pytest.mark.parametrize("name", ["go", "node", "rust"])
def test_a_mirror_that_serves_its_own_file_and_checksums_is_refused_by_the_pin(
    tmp_path: Path, verify_options: list[str], mirror: Mirror, name: str
) -> None:
    """A mirror (or whoever answers for the upstream) that serves other bytes together with a
    checksum file that matches them: the catalog's pin, not the served checksum, decides."""
    if name == "go":
        relative = "go/go1.25.0.linux-amd64.tar.gz"
        data = tarball({"go/bin/go": FAKE_GO})
    elif name == "node":
        relative = "node/v22.14.0/node-v22.14.0-linux-x64.tar.xz"
        data = tarball(FAKE_NODE, mode="w:xz")
    else:
        relative = "rust/rustup/archive/1.28.2/x86_64-unknown-linux-gnu/rustup-init"
        data = FAKE_RUSTUP.encode()
    served = mirror.add(relative, data)
    if name == "node":
        (mirror.root / "node/v22.14.0/SHASUMS256.txt").write_text(
            f"{served}  node-v22.14.0-linux-x64.tar.xz\n"
        )
    run = mirrored_run(
        tmp_path, verify_options, f"{name}-pin", [name], [f"{name}={mirror.base}/{name}"]
    )
    assert run.code == 3, run.stderr[-3000:]
    build = run.stage("build")
    assert build["status"] == "error"
    assert f"selfbench-toolchains/{name}.sh" in build["data"]["failedStep"]
    pin = load_catalog().toolchains[Toolchain(name)].upstream.arch["amd64"].sha256
    log = (tmp_path / "run" / "build" / "agent.log").read_text()
    url = f"{mirror.base}/{relative}"
    assert f"toolchain {name}: sha256 mismatch for {url}: expected {pin}, got {served}" in log
    # The file was fetched from the mirror; no checksum file was asked for.
    assert f"/{relative}" in mirror.requests
    assert not [r for r in mirror.requests if r.endswith((".sha256", "SHASUMS256.txt"))]


def uv_tarball() -> bytes:
    """The real uv binary in uv's upstream archive layout."""
    wheel = fetch_registry_artifact(load_catalog().toolchains[Toolchain.UV], "amd64")
    with zipfile.ZipFile(wheel) as archive:
        uv = archive.read("uv-0.13.9.data/scripts/uv")
    return tarball(
        {
            "uv-x86_64-unknown-linux-gnu/uv": uv,
            "uv-x86_64-unknown-linux-gnu/uvx": '#!/bin/sh\nexec uv tool run "$@"\n',
        }
    )


def test_uv_upstream_layout_through_a_mirror(
    tmp_path: Path, verify_options: list[str], mirror: Mirror
) -> None:
    """uv is the one upstream without a public pin: its `.sha256` beside the archive decides."""
    mirror.add("uv/0.13.9/uv-x86_64-unknown-linux-gnu.tar.gz", uv_tarball())
    run = mirrored_run(tmp_path, verify_options, "uv-mirror", ["uv"], [f"uv={mirror.base}/uv"])
    assert run.code == 0, run.stderr[-3000:]
    assert "uv 0.13.9" in answers(run.report)
    assert "/uv/0.13.9/uv-x86_64-unknown-linux-gnu.tar.gz.sha256" in mirror.requests


def test_wrong_digest_fails_the_build(
    tmp_path: Path, verify_options: list[str], mirror: Mirror
) -> None:
    wrong = "0" * 64
    real = mirror.add("uv/0.13.9/uv-x86_64-unknown-linux-gnu.tar.gz", uv_tarball(), digest=wrong)
    run = mirrored_run(tmp_path, verify_options, "uv-bad-digest", ["uv"], [f"uv={mirror.base}/uv"])
    assert run.code == 3
    build = run.stage("build")
    assert build["status"] == "error"
    assert "selfbench-toolchains/uv.sh" in build["data"]["failedStep"]
    log = (tmp_path / "run" / "build" / "agent.log").read_text()
    url = f"{mirror.base}/uv/0.13.9/uv-x86_64-unknown-linux-gnu.tar.gz"
    assert f"toolchain uv: sha256 mismatch for {url}: expected {wrong}, got {real}" in log


@pytest.mark.serial  # acts on every runner container or image of the engine
def test_prepare_warms_the_layers_tasks_use(
    tmp_path: Path, verify_options: list[str], docker_client: docker.DockerClient
) -> None:
    """prepare builds exactly the layers a task with the same toolchains will use."""
    started = time.time()
    try:
        _prepare_then_verify(tmp_path, verify_options)
    finally:
        # This test's CA makes images no other run can use: remove them.
        for image in docker_client.images.list(filters={"label": "org.selfbench.runner=1"}):
            created = image.attrs["Created"].split(".")[0].rstrip("Z")
            made = datetime.datetime.fromisoformat(created).replace(tzinfo=datetime.UTC)
            if made.timestamp() >= started - 1:
                with contextlib.suppress(docker.errors.APIError):
                    docker_client.images.remove(str(image.id), force=True)


def _prepare_then_verify(tmp_path: Path, verify_options: list[str]) -> None:
    # A CA bundle of its own gives this test a fresh derived base, so nothing is cached yet.
    options = list(verify_options)
    ca = tmp_path / "ca.pem"
    host_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    ca.write_text(
        (host_ca.read_text() if host_ca.is_file() else "")
        + f"\n# prepare test {uuid.uuid4().hex}\n"
    )
    if "--extra-ca-certs" in options:
        index = options.index("--extra-ca-certs")
        del options[index : index + 2]
    options += ["--extra-ca-certs", str(ca), *REGISTRY]
    prepared = subprocess.run(
        [sys.executable, "-m", "runner", "prepare", "--toolchains", "go,uv", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert prepared.stdout.strip().startswith("selfbench/toolchains:")
    assert "built: uv, go" in prepared.stderr
    task = bash_task(tmp_path, name="after-prepare", toolchains=["go", "uv"])
    run = run_verify(task.directory, options, tmp_path / "run", "--no-hack-gate")
    assert run.code == 0, run.stderr[-3000:]
    log = (tmp_path / "run" / "build" / "agent.log").read_text().splitlines()
    for toolchain in ("uv", "go"):
        step = next(
            i
            for i, line in enumerate(log)
            if line.endswith(f"RUN bash /opt/selfbench-toolchains/{toolchain}.sh")
        )
        following = [line.strip() for line in log[step + 1 :] if line.strip()]
        assert following[0] == "---> Using cache", toolchain


GO_CACHE = "/opt/selfbench-cache/go-build"
# Cache files no newer than the marker put in before the container started: what the image
# held, and what was handed in (nop's files keep the times nop's tests wrote them at).
OLDER_THAN_START = f"find {GO_CACHE} -type f ! -newer /opt/selfbench/agent.patch | wc -l"


def test_nop_s_go_build_cache_reaches_the_side_verifiers_only(
    tmp_path: Path,
    verify_options: list[str],
    docker_client: docker.DockerClient,
    fresh_cache: Path,
) -> None:
    """A Go task whose setup compiles nothing: nop's verifier builds the test binaries, and what
    it added to Go's build cache is in the probe's and the exploits' verifiers before they
    start (with its owner: their own builds write beside it and pass), never in the oracle's."""
    from tests.helpers import files_task
    from tests.integration.test_verdicts import GO_BASE, GO_GOLD, GO_TEST

    task = files_task(
        tmp_path,
        "handoff-go",
        base=GO_BASE,
        tests={"mul/mul_test.go": GO_TEST},
        gold={"mul/mul.go": GO_GOLD},
        setupCommand="go mod download",
        testCommand="go test {tests}",
        failToPass=["./mul"],
        passToPass=["./add"],
        testPaths=["mul/mul_test.go"],
        toolchains=["go"],
    )
    run = run_verify(
        task,
        [*verify_options, "--toolchain-source", "go=registry", "--repeat", "1", "--keep"],
        tmp_path / "run",
        # On go the default gate proves the exploits and starts none of their verifiers, and
        # this test follows the caches into them.
        "--hack-gate",
        "full",
    )
    run_id = run.report["runId"]
    try:
        assert run.report["verdict"] == "accepted", run.report["reason"]
        assert run.report["settings"]["handCaches"] is True
        assert run.stage("nop")["data"]["handedCacheBytes"] > 0
        assert "its build caches (" in (run.run_dir / "runner.log").read_text()
        kept = {k["label"]: k["name"] for k in run.report["kept"]}
        image = docker_client.containers.get(kept["oracle verifier"]).image
        assert image is not None
        listed = docker_client.containers.run(
            image, ["sh", "-c", f"find {GO_CACHE} -type f | wc -l"], remove=True
        )
        assert isinstance(listed, bytes)
        in_image = int(listed.decode())

        def older(label: str) -> int:
            result = docker_client.containers.get(kept[label]).exec_run(
                ["sh", "-c", OLDER_THAN_START]
            )
            assert result.exit_code == 0 and isinstance(result.output, bytes), result
            return int(result.output.decode())

        assert older("oracle verifier") == in_image
        probes = [label for label in kept if label.startswith("determinism/")]
        exploits = [
            label for label in kept if label.startswith("hack/") and label.endswith(" verifier")
        ]
        assert probes and exploits, sorted(kept)
        for label in probes + exploits:
            assert older(label) > in_image, label
        assert run.stage("determinism")["status"] == "passed"
    finally:
        for container in docker_client.containers.list(
            all=True, filters={"label": f"org.selfbench.run={run_id}"}
        ):
            container.remove(force=True)
