"""A request's payload digest: what decides its verification's outcome (the task, the base
commit's tree, the runner's version and the settings that matter, the base image's id). Two
requests with one digest get one verification: the second is answered from the first's
accepted report."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from runner import __version__
from runner.base.errors import RunnerError
from runner.sidecar.engineops import EngineOps
from runner.sidecar.jobs import Job
from runner.sidecar.policy import RepositoryPolicy, RequestRefusedError
from runner.sidecar.request import payload_digest

log = logging.getLogger(__name__)

BASE_IMAGE_ID_SECONDS = 10.0  # how long a base image's id is taken as known


class PayloadDigests:
    def __init__(
        self,
        *,
        policy: RepositoryPolicy,
        engine: EngineOps,
        settings: Mapping[str, Any],
        base_image: str | None,
    ) -> None:
        self.policy = policy
        self.engine = engine
        self.settings = dict(settings)
        self.base_image = base_image
        self._image_ids: dict[str, tuple[float, str | None]] = {}

    def of(self, job: Job) -> str:
        """The payload digest, or "" when it cannot be known (no reuse then)."""
        from runner.compile.repository import resolve_repository, tree_of

        request = job.request
        commit = request.base_commit()
        try:
            spec = self.policy.repository(request)
            if spec is None or commit is None or len(commit) != 40:
                return ""
            repo = resolve_repository(spec, spec, commit)
            tree = tree_of(repo, commit)
        except (RequestRefusedError, RunnerError) as exc:
            log.info("no payload digest for %s: %s", job.id, exc)
            return ""
        settings = dict(self.settings)
        if self.base_image:
            settings["baseImageId"] = self._base_image_id(self.base_image)
        return payload_digest(
            request, base_tree=tree, runner_version=__version__, settings=settings
        )

    def _base_image_id(self, ref: str) -> str | None:
        cached = self._image_ids.get(ref)
        if cached is not None and time.monotonic() - cached[0] < BASE_IMAGE_ID_SECONDS:
            return cached[1]
        value = self.engine.image_id(ref)
        self._image_ids[ref] = (time.monotonic(), value)
        return value
