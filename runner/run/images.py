"""The images a plan starts from: the base present (or pulled, digest-checked), the derived
base (CA and toolchain artifacts) built once, and `prepare`'s base and toolchain layers."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from runner.base.errors import (
    EngineError,
    InfrastructureError,
)
from runner.compile.templates import render_derived_base, render_toolchain_context
from runner.judge.images import build_failure
from runner.model.layout import DOCKERFILE
from runner.model.settings import (
    DEFAULT_MAX_LOG_BYTES,
    HELPER_BUILD_TIMEOUT_SECONDS,
    HELPER_MEMORY_MB,
    LOCAL_BASE_HINT,
)
from runner.model.stages import Stage
from runner.model.task import Toolchain
from runner.model.toolchains import load_catalog
from runner.plan.labels import LABEL_FROM_ID, runner_labels
from runner.plan.runtime import (
    BuildRequest,
    Engine,
    ImageInfo,
)
from runner.plan.types import BasePlan, EngineFacts, PreparePlan
from runner.run.context import ExecutionEnv, Progress


def ensure_image(engine: Engine, ref: str, *, what: str = "base image") -> ImageInfo:
    """An image present, or pulled. A reference pinned by digest must resolve to exactly that
    digest: a local image under the same name and tag with another digest is an error, never a
    silent substitute."""
    found = engine.image(ref)
    if found is not None:
        return found
    if "@" in ref:
        name_tag = ref.split("@", 1)[0]
        local = engine.image(name_tag) if ":" in name_tag.rsplit("/", 1)[-1] else None
        try:
            return engine.pull(ref)
        except EngineError as exc:
            if local is not None:
                digests = ", ".join(local.repo_digests) or "no registry digest"
                raise InfrastructureError(
                    f"{what} {ref}: the local {name_tag} is {local.id} ({digests}), not the pinned "
                    f"digest, and the pinned image cannot be pulled ({exc.message})"
                ) from None
            raise InfrastructureError(
                f"{what} {ref} is not present and cannot be pulled ({exc.message})"
            ) from None
    try:
        return engine.pull(ref)
    except EngineError as exc:
        hint = f"; {LOCAL_BASE_HINT}" if what == "base image" else ""
        raise InfrastructureError(
            f"{what} {ref} is not present and cannot be pulled ({exc.message}){hint}"
        ) from None


def build_derived_base(
    engine: Engine,
    base: BasePlan,
    base_id: str,
    *,
    env: ExecutionEnv,
    facts: EngineFacts,
    network: str | None,
    log_path: Path,
    max_log_bytes: int,
    progress: Progress,
) -> str:
    """The runner-only base (extra CA, registry artifacts), reused while its inputs and the
    image it builds FROM are unchanged. Returns its image id."""
    derived = base.derived
    assert derived is not None
    existing = engine.image(derived.tag)
    if existing is not None and existing.labels.get(LABEL_FROM_ID) == base_id:
        return existing.id
    with tempfile.TemporaryDirectory(prefix="selfbench-base.") as tmp:
        context = Path(tmp)
        if env.extra_ca_pem is not None:
            (context / "selfbench-extra-ca.crt").write_bytes(env.extra_ca_pem)
        for artifact in derived.artifacts:
            progress(Stage.BUILD, f"registry artifact {artifact.file}")
            source = env.fetch_artifact(artifact.toolchain, facts.arch)
            target = context / "artifacts" / artifact.toolchain / artifact.file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        (context / DOCKERFILE).write_bytes(
            render_derived_base(
                extra_ca=env.extra_ca_pem is not None, artifacts=bool(derived.artifacts)
            )
        )
        progress(Stage.BUILD, f"building base image {derived.tag}")
        outcome = engine.build(
            BuildRequest(
                context=context,
                tag=derived.tag,
                buildargs={"BASE_IMAGE": base.image, **env.proxies},
                labels=runner_labels(kind="base", inputs=derived.digest, from_id=base_id),
                memory_mb=HELPER_MEMORY_MB,
                cpuset="0-1" if facts.ncpu > 1 else "0",
                timeout_seconds=HELPER_BUILD_TIMEOUT_SECONDS,
                network=network,
            ),
            log_path,
            limit=max_log_bytes,
            on_line=lambda line: progress(Stage.BUILD, line) if line.startswith("Step ") else None,
        )
    if not outcome.ok or outcome.image_id is None:
        raise InfrastructureError(
            f"the runner's base image did not build: {build_failure(outcome)}; see {log_path}"
        )
    return outcome.image_id


def prepare(
    plan: PreparePlan, engine: Engine, *, env: ExecutionEnv, workdir: Path, progress: Progress
) -> bool:
    """Build the base and toolchain layers of `plan`. Returns whether they were cached."""
    base = ensure_image(engine, plan.base.image)
    from_id = base.id
    if plan.base.derived is not None:
        from_id = build_derived_base(
            engine,
            plan.base,
            base.id,
            env=env,
            facts=plan.facts,
            network=plan.network,
            log_path=workdir / "base.log",
            max_log_bytes=DEFAULT_MAX_LOG_BYTES,
            progress=progress,
        )
    existing = engine.image(plan.tag)
    if existing is not None and existing.labels.get(LABEL_FROM_ID) == from_id:
        return True
    context = workdir / "toolchains"
    layers = load_catalog().close(Toolchain(name) for name in plan.toolchains)
    for name, content in render_toolchain_context(layers).items():
        path = context / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    progress(Stage.BUILD, f"building toolchain layers {plan.tag}")
    outcome = engine.build(
        BuildRequest(
            context=context,
            tag=plan.tag,
            buildargs={
                **plan.build_args,
                **{k: v for k, v in env.proxies.items() if k in plan.proxy_build_args},
            },
            labels=runner_labels(kind="toolchains", inputs=plan.tag, from_id=from_id),
            memory_mb=plan.limits.memory_mb,
            cpuset=plan.limits.cpuset,
            timeout_seconds=plan.timeout_seconds,
            network=plan.network,
        ),
        workdir / "toolchains.log",
        limit=DEFAULT_MAX_LOG_BYTES,
        on_line=lambda line: progress(Stage.BUILD, line) if line.startswith("Step ") else None,
    )
    if not outcome.ok:
        raise InfrastructureError(
            f"toolchain layers did not build: {build_failure(outcome)}; "
            f"see {workdir / 'toolchains.log'}"
        )
    return False
