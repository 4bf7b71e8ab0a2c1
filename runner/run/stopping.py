"""The run's engine as its stages see it: it opens nothing once the run is stopping."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from runner.plan.runtime import (
    BuildOutcome,
    BuildRequest,
    Container,
    Engine,
    ImageInfo,
    Service,
    ToPut,
)
from runner.plan.types import ContainerPlan, EngineFacts, ServicePlan


class StoppingEngine:
    """The run's engine, which opens no container, network or service once the run is
    stopping (a settled verdict, an interrupt): a stage that would start one is skipped."""

    def __init__(self, engine: Engine, check: Callable[[], None]) -> None:
        self._engine = engine
        self._check = check  # raises SkippedError once the run is stopping

    def facts(self) -> EngineFacts:
        return self._engine.facts()

    def image(self, ref: str) -> ImageInfo | None:
        return self._engine.image(ref)

    def pull(self, ref: str) -> ImageInfo:
        return self._engine.pull(ref)

    def build(
        self, request: BuildRequest, log_path: Path, *, limit: int, on_line: Callable[[str], None]
    ) -> BuildOutcome:
        return self._engine.build(request, log_path, limit=limit, on_line=on_line)

    def container(
        self,
        plan: ContainerPlan,
        *,
        env: Mapping[str, str],
        keep: bool,
        files: Sequence[ToPut] = (),
    ) -> contextlib.AbstractContextManager[Container]:
        self._check()
        return self._engine.container(plan, env=env, keep=keep, files=files)

    def network(
        self, name: str, *, labels: Mapping[str, str], keep: bool
    ) -> contextlib.AbstractContextManager[str]:
        self._check()
        return self._engine.network(name, labels=labels, keep=keep)

    def service(
        self, plan: ServicePlan, *, network: str, keep: bool
    ) -> contextlib.AbstractContextManager[Service]:
        self._check()
        return self._engine.service(plan, network=network, keep=keep)

    def remove_image(self, ref: str) -> None:
        self._engine.remove_image(ref)

    def cleanup(self, labels: Mapping[str, str], *, images: bool = False) -> int:
        return self._engine.cleanup(labels, images=images)

    def close(self) -> None:
        self._engine.close()
