"""What `debug` checks before it starts anything (pure): a run's plan.json and report.json are
files anyone may edit, and debug hands their images, networks and directories to `docker create`. A
plan must name only what this runner writes; an image must carry the runner's label on the engine
(the command that reads it is here, the engine answers it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from pydantic import BaseModel

from runner.plan.labels import LABEL_RUNNER
from runner.plan.types import ContainerPlan, VerifyPlan

_IMAGE = re.compile(r"selfbench/[a-z0-9][a-z0-9-]*:(agent|verifier)-[0-9a-f]{16}")
LAYER_ID = re.compile(r"sha256:[0-9a-f]{64}")
LABEL_FORMAT = "{{index .Config.Labels " + json.dumps(LABEL_RUNNER) + "}}"


def refused_image(image: str) -> str:
    return (
        f"refused: image {image[:100]} is not on this engine with the label {LABEL_RUNNER}=1 "
        "(debug opens only what this runner built)"
    )


_NETWORK = re.compile(r"none|bridge|selfbench-[a-z0-9][a-z0-9-]*")
_WORKDIR = re.compile(r"/[A-Za-z0-9._/-]*")


def plan_problem(plan: VerifyPlan) -> str | None:
    """What in a run's plan.json this runner would never have written (None: nothing): the
    plan is a file anyone may edit, and debug hands its images, networks and directories to
    `docker create`. Only the runner's own image tags, a gate's own network or none, and plain
    absolute directories pass."""
    containers = list(_containers(plan))
    tags = {b.tag for b in plan.builds}
    for build in plan.builds:
        if not _IMAGE.fullmatch(build.tag):
            return f"builds: image {build.tag[:100]!r} is not one of this runner's tags"
    for container in containers:
        if container.image not in tags:
            return f"{container.name}: image {container.image[:100]!r} is not the plan's build"
        if not _NETWORK.fullmatch(container.network):
            return (
                f"{container.name}: network {container.network[:100]!r} is not one the runner uses"
            )
        if not _WORKDIR.fullmatch(container.workdir) or "/../" in f"{container.workdir}/":
            return f"{container.name}: workdir {container.workdir[:100]!r} is not a plain path"
    return None


def _containers(value: object) -> Iterator[ContainerPlan]:
    """Every container plan anywhere in `value` (a plan, its parts, lists of them)."""
    if isinstance(value, ContainerPlan):
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _containers(getattr(value, name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _containers(item)
