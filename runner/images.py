"""Runner-side image preparation shared by `verify` and `prepare`: the derived base (extra CA,
registry artifacts), content-addressed tags, and prebuilt toolchain layers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from runner.artifacts import fetch_registry_artifact
from runner.engine import LABEL_INPUTS, BuildResult, Engine, Limits
from runner.errors import InfrastructureError, InvalidTaskError
from runner.render import render_toolchain_context
from runner.resources import dockerfiles_dir
from runner.toolchains import Source, ToolchainSettings, ToolchainSpec

DEFAULT_BASE_IMAGE = "ubuntu:24.04"
LOCAL_BASE_HINT = (
    "build a local base with scripts/make-base-image.sh and pass "
    "--base-image selfbench/debian-base:bookworm (or set SELFBENCH_BASE_IMAGE)"
)
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")
HELPER_LIMITS = Limits(cpus=2, memory_mb=4096, storage_mb=0)

Progress = Callable[[str, str], None]


@dataclass(frozen=True, kw_only=True)
class BuildEnvironment:
    """Runner-only build inputs: never written into a bundle."""

    base_image: str = DEFAULT_BASE_IMAGE
    extra_ca_certs: Path | None = None
    toolchains: ToolchainSettings = field(default_factory=ToolchainSettings)
    build_network: str | None = None


def proxy_environment() -> dict[str, str]:
    env: dict[str, str] = {}
    for name in PROXY_VARIABLES:
        for variant in (name, name.lower()):
            value = os.environ.get(variant)
            if value:
                env[variant] = value
    return env


def context_digest(context: Path, extra: dict[str, str]) -> str:
    """What a build of `context` depends on: every file's path, mode and content, and `extra`."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        relative = path.relative_to(context).as_posix()
        digest.update(f"{relative}\0{path.stat().st_mode & 0o777:o}\0".encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    digest.update(json.dumps(extra, sort_keys=True).encode())
    return digest.hexdigest()


def _build_or_fail(
    engine: Engine,
    context: Path,
    tag: str,
    digest: str,
    kind: str,
    buildargs: dict[str, str],
    env: BuildEnvironment,
    log_path: Path,
    progress: Progress,
) -> BuildResult | None:
    if engine.image_id(tag) is not None:
        return None
    progress("build", f"building {kind} image {tag}")
    result = engine.build(
        context=context,
        tag=tag,
        buildargs={**buildargs, **proxy_environment()},
        labels={**engine.labels(kind), LABEL_INPUTS: digest},
        limits=HELPER_LIMITS,
        timeout=1800,
        log_path=log_path,
        on_line=lambda line: progress("build", line) if line.startswith("Step ") else None,
        network_mode=env.build_network,
    )
    if not result.ok:
        raise InfrastructureError(
            f"{kind} image failed to build at `{result.failed_step}`: {result.error}; "
            f"see {log_path}"
        )
    return result


def prepare_base(
    engine: Engine,
    env: BuildEnvironment,
    layers: Sequence[ToolchainSpec],
    workdir: Path,
    progress: Progress,
) -> tuple[str, dict[str, str]]:
    """The image bundles build FROM, and the identity of what it depends on.

    The derived base's tag is a hash of its inputs (base image id, CA bytes, pinned artifact
    digests, template), so an existing one is reused without touching the artifacts.
    """
    base = env.base_image
    base_id = engine.ensure_base_image(base, hint=LOCAL_BASE_HINT)
    ca = env.extra_ca_certs
    registry_layers = [
        layer for layer in layers if env.toolchains.source(layer.name) is Source.REGISTRY
    ]
    inputs = {"base": base_id}
    if ca is None and not registry_layers:
        return base, inputs
    try:
        ca_bytes = ca.read_bytes() if ca is not None else None
    except OSError as exc:
        raise InvalidTaskError(
            f"cannot read extra CA certificates: {exc.strerror}", path=str(ca)
        ) from None
    template = (dockerfiles_dir() / "derived-base.Dockerfile.j2").read_text()
    identity = {
        "base": base_id,
        "ca": hashlib.sha256(ca_bytes).hexdigest() if ca_bytes is not None else None,
        "artifacts": {
            layer.name.value: layer.registry.arch[engine.arch].sha256
            for layer in registry_layers
            if layer.registry is not None
        },
        "template": hashlib.sha256(template.encode()).hexdigest(),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    tag = f"selfbench/base:{digest[:16]}"
    inputs["derived"] = digest
    if engine.image_id(tag) is not None:
        return tag, inputs
    with tempfile.TemporaryDirectory(prefix="selfbench-base.") as tmp:
        context = Path(tmp)
        (context / "artifacts").mkdir()
        if ca_bytes is not None:
            (context / "selfbench-extra-ca.crt").write_bytes(ca_bytes)
        for layer in registry_layers:
            progress("build", f"registry artifact for {layer.name} {layer.version}")
            artifact = fetch_registry_artifact(layer, engine.arch)
            target = context / "artifacts" / layer.name.value
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(artifact, target / artifact.name)
        (context / "Dockerfile").write_text(
            jinja2.Template(template).render(
                extra_ca=ca_bytes is not None, artifacts=bool(registry_layers)
            )
        )
        _build_or_fail(
            engine,
            context,
            tag,
            digest,
            "base",
            {"BASE_IMAGE": base},
            env,
            workdir / "base.log",
            progress,
        )
    return tag, inputs


def prepare_toolchains(
    engine: Engine,
    env: BuildEnvironment,
    layers: Sequence[ToolchainSpec],
    workdir: Path,
    progress: Progress,
) -> tuple[str, bool]:
    """Build the base and toolchain layers exactly as bundles render them, so later task
    builds find them in the layer cache. Returns the tag and whether it was already built."""
    base, inputs = prepare_base(engine, env, layers, workdir, progress)
    context = workdir / "toolchains"
    shutil.rmtree(context, ignore_errors=True)
    for name, content in render_toolchain_context(layers).items():
        path = context / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    buildargs = {"BASE_IMAGE": base, **env.toolchains.build_args(layers)}
    digest = context_digest(context, {**buildargs, **inputs})
    tag = f"selfbench/toolchains:{digest[:16]}"
    result = _build_or_fail(
        engine,
        context,
        tag,
        digest,
        "toolchains",
        buildargs,
        env,
        workdir / "toolchains.log",
        progress,
    )
    return tag, result is None
