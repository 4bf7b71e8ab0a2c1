"""The images a plan builds on (pure): the base (the contract's pinned one or --base-image, and
a derived base when this machine needs one), the prepared toolchain layers (`prepare`), and
the limits a task's containers and builds get."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from functools import cache

from runner.base.errors import InvalidTaskError
from runner.base.resources import dockerfiles_dir
from runner.compile.bundle import Bundle
from runner.model.layout import BundleLayout
from runner.model.settings import (
    HELPER_BUILD_TIMEOUT_SECONDS,
    HELPER_CPUS,
    HELPER_MEMORY_MB,
    StorageLimit,
    VerifySettings,
)
from runner.model.task import Toolchain
from runner.model.toolchains import Arch, Source, load_catalog
from runner.plan.types import (
    BasePlan,
    BuildLimits,
    DerivedBase,
    EngineFacts,
    Limits,
    PreparePlan,
    RegistryArtifact,
)


@cache
def _template_digest(name: str) -> str:
    return hashlib.sha256((dockerfiles_dir() / name).read_bytes()).hexdigest()


def digest_of(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def plan_base(
    settings: VerifySettings,
    toolchains: Iterable[Toolchain],
    arch: Arch,
    pinned: str | None = None,
) -> BasePlan:
    """The image task builds start FROM: the contract's pinned base when the task has one, else
    the runner's --base-image. A derived base exists only when this machine needs one (an extra
    CA, registry-sourced toolchains); its tag is a hash of its inputs."""
    build = settings.build
    image = pinned or build.base_image
    catalog = load_catalog()
    layers = catalog.close(toolchains)
    artifacts = [
        RegistryArtifact(
            toolchain=layer.name.value,
            file=layer.registry.arch[arch].file,
            sha256=layer.registry.arch[arch].sha256,
        )
        for layer in layers
        if build.toolchains.source(layer.name) is Source.REGISTRY and layer.registry is not None
    ]
    ca_sha = hashlib.sha256(build.extra_ca_pem).hexdigest() if build.extra_ca_pem else None
    if ca_sha is None and not artifacts:
        return BasePlan(image=image, derived=None)
    digest = digest_of(
        {
            "base": image,
            "ca": ca_sha,
            "artifacts": [a.model_dump() for a in artifacts],
            "template": _template_digest("derived-base.Dockerfile.j2"),
        }
    )
    return BasePlan(
        image=image,
        derived=DerivedBase(
            tag=f"selfbench/base:{digest[:16]}",
            digest=digest,
            extra_ca_sha256=ca_sha,
            artifacts=artifacts,
        ),
    )


def container_limits(
    bundle: Bundle, settings: VerifySettings, facts: EngineFacts
) -> tuple[Limits, BuildLimits]:
    environment = bundle.config.environment
    if facts.memory_mb is not None and environment.memory_mb > facts.memory_mb:
        # Obeyed, a limit above what the engine has is no limit: refused, as the task's error.
        raise InvalidTaskError(
            f"{environment.memory_mb} MB is more memory than the engine has "
            f"({facts.memory_mb} MB); the definition's resources.memoryMb sets it",
            path=str(BundleLayout(bundle.root).task_toml),
            field="environment.memory_mb",
        )
    applied = min(float(facts.ncpu), environment.cpus)
    cores = max(1, min(facts.ncpu, math.ceil(environment.cpus)))
    return (
        Limits(
            cpus=applied,
            requested_cpus=environment.cpus,
            memory_mb=environment.memory_mb,
            storage_mb=environment.storage_mb,
            pids=settings.pids_limit,
        ),
        BuildLimits(memory_mb=environment.memory_mb, cpuset=f"0-{cores - 1}" if cores > 1 else "0"),
    )


def resolve_storage(requested: StorageLimit, facts: EngineFacts) -> StorageLimit:
    if requested is not StorageLimit.AUTO:
        return requested
    if facts.storage_quota is True:
        return StorageLimit.QUOTA
    if facts.storage_quota is False:
        return StorageLimit.WATCHDOG
    return StorageLimit.AUTO


def plan_prepare(
    toolchains: Iterable[Toolchain], settings: VerifySettings, facts: EngineFacts
) -> PreparePlan:
    from runner.compile.templates import render_toolchain_context

    selected = list(toolchains)
    base = plan_base(settings, selected, facts.arch)
    layers = load_catalog().close(selected)
    files = {
        name: hashlib.sha256(content).hexdigest()
        for name, content in render_toolchain_context(layers).items()
    }
    build_args = {"BASE_IMAGE": base.from_image, **settings.build.toolchains.build_args(layers)}
    digest = digest_of(
        {
            "files": files,
            "args": build_args,
            "base": base.derived.digest if base.derived else base.image,
        }
    )
    cores = min(facts.ncpu, int(HELPER_CPUS))
    return PreparePlan(
        toolchains=[layer.name.value for layer in layers],
        facts=facts,
        base=base,
        tag=f"selfbench/toolchains:{digest[:16]}",
        files=files,
        build_args=build_args,
        proxy_build_args=sorted(settings.build.proxies),
        limits=BuildLimits(
            memory_mb=HELPER_MEMORY_MB, cpuset=f"0-{cores - 1}" if cores > 1 else "0"
        ),
        timeout_seconds=HELPER_BUILD_TIMEOUT_SECONDS,
        network=settings.build.build_network,
    )
