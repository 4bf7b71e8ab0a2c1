"""What `debug` checks before it starts anything (pure): a run's plan.json and report.json are
files anyone may edit, and debug hands their images, networks and directories to `docker create`. A
plan must name only what this runner writes; an image must carry the runner's label on the engine
(the command that reads it is here, the engine answers it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TypeVar

from pydantic import BaseModel

from runner.base.validation import MAX_ENV_VALUE, check_env_key, check_text
from runner.model.stages import Stage
from runner.plan.inimage import KEEP_ALIVE, SMOKE_SCRIPT, SOLVE_ARGV, VERIFIER_TEST_ARGV
from runner.plan.labels import LABEL_RUNNER
from runner.plan.types import ContainerPlan, ExecStep, TrialPlan, VerifyPlan

_IMAGE = re.compile(r"selfbench/[a-z0-9][a-z0-9-]*:(agent|verifier)-[0-9a-f]{16}")
LAYER_ID = re.compile(r"sha256:[0-9a-f]{64}")
LABEL_FORMAT = "{{index .Config.Labels " + json.dumps(LABEL_RUNNER) + "}}"


def refused_image(image: str) -> str:
    return (
        f"refused: image {image[:100]} is not on this engine with the label {LABEL_RUNNER}=1 "
        "(debug opens only what this runner built)"
    )


_T = TypeVar("_T")
_NETWORK = re.compile(r"none|bridge|selfbench-[a-z0-9][a-z0-9-]*")
# Every gate works in the repository's checkout: /app (a step may be in a directory of it).
_WORKDIR = re.compile(r"/app(/[A-Za-z0-9._-]+)*")
_SECONDS = re.compile(r"[1-9][0-9]{0,6}")
# The steps debug runs itself (the rest of a step it builds from its own constants): the
# oracle's solve.sh as the agent, the smoke script as the verifier, test.sh's preparation.
_SMOKE_ARGV = ("bash", SMOKE_SCRIPT)
_STEP_USERS = {"agent", "verifier", "root"}


def plan_problem(plan: VerifyPlan) -> str | None:
    """What in a run's plan.json this runner would never have written (None: nothing): the
    plan is a file anyone may edit, and debug hands its images, networks and directories to
    `docker create`. Only the runner's own image tags, a gate's own network or none, and plain
    absolute directories pass."""
    containers = list(_all(plan, ContainerPlan))
    tags = {b.tag for b in plan.builds}
    for build in plan.builds:
        if not _IMAGE.fullmatch(build.tag):
            return f"builds: image {build.tag[:100]!r} is not one of this runner's tags"
    for container in containers:
        if container.image not in tags:
            return f"{container.name}: image {container.image[:100]!r} is not the plan's build"
        problem = _container_problem(container)
        if problem is not None:
            return f"{container.name}: {problem}"
    steps: list[tuple[str, ExecStep, tuple[str, ...], str]] = [
        (Stage.SMOKE.value, plan.smoke.run, _SMOKE_ARGV, "verifier")
    ]
    for trial in _all(plan, TrialPlan):  # the gates', the exploits', the probe's, grade's
        steps.append((f"{trial.gate} test", trial.test, VERIFIER_TEST_ARGV, "root"))
        if trial.solve is not None:
            steps.append((f"{trial.gate} solve", trial.solve, SOLVE_ARGV, "agent"))
    for name, step, argv, user in steps:
        problem = _step_problem(step, argv, user)
        if problem is not None:
            return f"{name}: {problem}"
    return None


def _container_problem(container: ContainerPlan) -> str | None:
    """What in one container plan the runner never writes: a network not its own, a command
    other than its keep-alive, an entry point, a workdir outside the checkout, a limit that is
    no limit, or a variable the task contract would refuse."""
    if not _NETWORK.fullmatch(container.network):
        return f"network {container.network[:100]!r} is not one the runner uses"
    command = container.command
    if len(command) != 2 or command[0] != KEEP_ALIVE or not _SECONDS.fullmatch(command[1]):
        return f"command {_shown(command)} is not the runner's `{KEEP_ALIVE} SECONDS`"
    if container.entrypoint is not None:
        return f"entrypoint {_shown(container.entrypoint)} is not the image's"
    if not _WORKDIR.fullmatch(container.workdir) or "/../" in f"{container.workdir}/":
        return f"workdir {container.workdir[:100]!r} is not /app or a plain directory in it"
    limits = container.limits
    for name, value in (
        ("cpus", limits.cpus),
        ("requested_cpus", limits.requested_cpus),
        ("memory_mb", limits.memory_mb),
        ("pids", limits.pids),
    ):
        if not value > 0:  # NaN too
            return f"limits: {name} {value} is not a limit (above 0)"
    if limits.storage_mb < 0:
        return f"limits: storage_mb {limits.storage_mb} is not a limit (0 or above)"
    return _env_problem(container.env) or _env_problem({k: "" for k in container.proxy_env})


def _step_problem(step: ExecStep, argv: tuple[str, ...], user: str) -> str | None:
    if tuple(step.argv) != argv:
        return f"argv {_shown(step.argv)} is not the runner's {_shown(list(argv))}"
    if step.user != user or step.user not in _STEP_USERS:
        return f"user {step.user[:40]!r} is not {user!r}"
    if not _WORKDIR.fullmatch(step.workdir) or "/../" in f"{step.workdir}/":
        return f"workdir {step.workdir[:100]!r} is not /app or a plain directory in it"
    return _env_problem(step.env)


def _env_problem(env: dict[str, str]) -> str | None:
    for key, value in env.items():
        problem = check_env_key(key) or check_text(
            value, max_length=MAX_ENV_VALUE, allow_empty=True
        )
        if problem is not None:
            return f"variable {key[:40]!r}: {problem}"
    return None


def _shown(argv: list[str]) -> str:
    return repr(argv[:4])[:120]


def _all(value: object, kind: type[_T]) -> Iterator[_T]:
    """Every `kind` anywhere in `value` (a plan, its parts, lists and maps of them)."""
    if isinstance(value, kind):
        yield value
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _all(getattr(value, name), kind)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _all(item, kind)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _all(item, kind)
