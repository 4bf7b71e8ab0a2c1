"""The build stage: the base image, the derived base, the agent and verifier images."""

from __future__ import annotations

import logging
from pathlib import Path

from runner import judge
from runner.engine.buildlog import is_task_step
from runner.model.report import (
    BuildData,
    ImageData,
    Status,
)
from runner.model.stages import Stage
from runner.plan.inimage import LIMITED_BUILD_STEPS
from runner.plan.labels import LABEL_FROM_ID
from runner.plan.runtime import (
    BuildRequest,
)
from runner.plan.types import ImageBuild
from runner.run.images import build_derived_base, ensure_image
from runner.run.state import RunState, StageResult

log = logging.getLogger(__name__)


class Builder:
    def __init__(self, state: RunState) -> None:
        self.state = state

    def build(self, stage: StageResult) -> None:
        plan = self.state.plan
        data = BuildData(base_image=plan.base.image, from_image=plan.base.from_image)
        stage.data = data
        self.state.progress(Stage.BUILD, f"base image {plan.base.image}")
        base = ensure_image(self.state.engine, plan.base.image)
        data.base_image_id = base.id
        data.base_image_digests = list(base.repo_digests)
        from_id = base.id
        if plan.base.derived is not None:
            log_path = self.state.path(Stage.BUILD, "base.log")
            from_id = build_derived_base(
                self.state.engine,
                plan.base,
                base.id,
                env=self.state.env,
                facts=self.state.plan.facts,
                network=plan.builds[0].network,
                log_path=log_path,
                max_log_bytes=plan.max_log_bytes,
                progress=self.state.progress,
            )
        for build in plan.builds:
            if not self._image(build, from_id, stage, data):
                return
        cached = all(image.cached for image in data.images.values())
        stage.set(
            Status.PASSED, "agent and verifier images ready" + (" (cached)" if cached else "")
        )

    def _build_line(self, line: str) -> None:
        if line.startswith("Step "):
            self.state.progress(Stage.BUILD, line)
        else:
            log.debug("%s", line)

    def _image(self, build: ImageBuild, from_id: str, stage: StageResult, data: BuildData) -> bool:
        existing = self.state.engine.image(build.tag)
        if existing is not None and existing.labels.get(LABEL_FROM_ID) == from_id:
            data.images[build.kind] = ImageData(tag=build.tag, id=existing.id, cached=True)
            self.state.progress(Stage.BUILD, f"{build.kind} image cached ({build.tag})")
            return True
        log_path = self.state.path(Stage.BUILD, f"{build.kind}.log")
        log_path.unlink(missing_ok=True)
        stage.logs.append(str(log_path))
        self.state.progress(Stage.BUILD, f"building {build.kind} image {build.tag}")
        proxies = {k: v for k, v in self.state.env.proxies.items() if k in build.proxy_build_args}
        outcome = self.state.engine.build(
            BuildRequest(
                context=Path(build.context),
                tag=build.tag,
                buildargs={**build.build_args, **proxies},
                labels={**build.labels, LABEL_FROM_ID: from_id},
                memory_mb=build.limits.memory_mb,
                cpuset=build.limits.cpuset,
                timeout_seconds=build.timeout_seconds,
                network=build.network,
                steps=build.steps,
            ),
            log_path,
            limit=self.state.plan.max_log_bytes,
            on_line=self._build_line,
        )
        if outcome.truncation:
            stage.truncated.append(outcome.truncation)
        data.images[build.kind] = ImageData(
            tag=build.tag,
            id=outcome.image_id,
            cached=False,
            seconds=round(outcome.seconds, 3),
            cached_steps=outcome.cached_steps,
            total_steps=outcome.total_steps,
        )
        if outcome.ok:
            return True
        data.failed_image = build.kind
        data.failed_step = outcome.failed_step
        data.step_number = outcome.step_number or None
        data.exit_code = outcome.exit_code
        data.timed_out = outcome.timed_out
        data.tail = outcome.tail
        if outcome.last_layer:
            data.last_good_layer = outcome.last_layer
            data.debug_command = f"docker run -it --rm {outcome.last_layer} bash"
        judgement = judge.judge_build(
            build.kind,
            outcome,
            task_fault=is_task_step(outcome.failed_step, build.task_steps),
            limited_step=is_task_step(outcome.failed_step, LIMITED_BUILD_STEPS),
            memory_mb=build.limits.memory_mb,
            log_path=str(log_path),
            pids=build.steps.limits.pids if build.steps else 0,
            storage_mb=build.steps.limits.storage_mb if build.steps else 0,
        )
        stage.set(judgement.status, judgement.detail)
        return False
