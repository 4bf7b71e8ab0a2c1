"""Read a compiled Harbor bundle: what verify needs from task.toml (pure apart from reading)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import InvalidTaskError
from runner.models import Toolchain


@dataclass(frozen=True, kw_only=True)
class BundleSpec:
    root: Path
    task_id: str
    toolchains: tuple[Toolchain, ...]
    agent_timeout: float
    verifier_timeout: float
    collect_timeout: float
    collect_command: str
    build_timeout: float
    cpus: float
    memory_mb: int
    storage_mb: int


def _get(data: dict[str, Any], dotted: str, path: Path) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise InvalidTaskError("missing field", path=str(path), field=dotted)
        node = node[part]
    return node


def load_task_toml(root: Path) -> dict[str, Any]:
    path = root / "task.toml"
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise InvalidTaskError("not a compiled bundle (no task.toml)", path=str(root)) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidTaskError(f"invalid TOML: {exc}", path=str(path)) from None


def read_metadata(root: Path) -> dict[str, Any]:
    metadata = load_task_toml(root).get("metadata")
    if not isinstance(metadata, dict):
        raise InvalidTaskError(
            "missing [metadata] table", path=str(root / "task.toml"), field="metadata"
        )
    return metadata


def read_bundle(root: Path) -> BundleSpec:
    path = root / "task.toml"
    data = load_task_toml(root)
    for required in (
        "environment/Dockerfile",
        "tests/Dockerfile",
        "tests/test.sh",
        "solution/solve.sh",
    ):
        if not (root / required).is_file():
            raise InvalidTaskError("file not found", path=str(root / required))
    name = str(_get(data, "task.name", path))
    task_id = str(data.get("metadata", {}).get("selfbench_task_id") or name.rsplit("/", 1)[-1])
    collect = _get(data, "verifier.collect", path)
    if not isinstance(collect, list) or not collect or not isinstance(collect[0], dict):
        raise InvalidTaskError(
            "expected one [[verifier.collect]]", path=str(path), field="verifier.collect"
        )
    try:
        toolchains = tuple(Toolchain(t) for t in data.get("metadata", {}).get("toolchains", []))
    except ValueError as exc:
        raise InvalidTaskError(str(exc), path=str(path), field="metadata.toolchains") from None
    environment = _get(data, "environment", path)
    return BundleSpec(
        root=root,
        task_id=task_id,
        toolchains=toolchains,
        agent_timeout=float(_get(data, "agent.timeout_sec", path)),
        verifier_timeout=float(_get(data, "verifier.timeout_sec", path)),
        collect_timeout=float(collect[0].get("timeout_sec", 300)),
        collect_command=str(collect[0].get("command", "")),
        build_timeout=float(environment.get("build_timeout_sec", 1800)),
        cpus=float(environment.get("cpus", 1)),
        memory_mb=int(environment.get("memory_mb", 2048)),
        storage_mb=int(environment.get("storage_mb", 10240)),
    )
