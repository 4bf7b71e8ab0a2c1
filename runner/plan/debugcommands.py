"""The docker CLI commands a debug session is made of (pure): a gate container as the plan
makes it, an exec of a plan's step in it, the labels that let `clean` find them."""

from __future__ import annotations

from collections.abc import Sequence

from runner.plan.labels import runner_labels
from runner.plan.types import ContainerPlan, ExecStep, VerifyPlan


def docker_labels(plan: VerifyPlan, debug_id: str, owner: str) -> list[str]:
    labels = runner_labels(
        run=f"debug-{debug_id}", task=plan.task_id, kind="debug", owner=owner or None
    )
    out: list[str] = []
    for key, value in labels.items():
        out += ["--label", f"{key}={value}"]
    return out


def docker_limits(container: ContainerPlan) -> list[str]:
    limits = container.limits
    return [
        "--cpus",
        f"{limits.cpus:g}",
        "--memory",
        f"{limits.memory_mb}m",
        "--memory-swap",
        f"{limits.memory_mb}m",
        "--pids-limit",
        str(limits.pids),
    ]


def docker_env(env: dict[str, str], proxies: list[str]) -> list[str]:
    out: list[str] = []
    for key, value in sorted(env.items()):
        out += ["-e", f"{key}={value}"]
    for name in proxies:  # by name only: the value comes from the caller's environment
        out += ["-e", name]
    return out


def docker_create(
    name: str, container: ContainerPlan, labels: list[str], proxies: list[str]
) -> list[list[str]]:
    """A gate container as the plan makes it (image, limits, network, workdir, environment),
    kept alive for the debugging session, and started."""
    return [
        [
            "docker",
            "create",
            "--name",
            name,
            *labels,
            *docker_limits(container),
            "--init",  # as the gates' containers (runner.engine.docker: PID 1 reaps orphans)
            "--network",
            container.network,
            "-w",
            container.workdir,
            *docker_env(container.env, [*container.proxy_env, *proxies]),
            container.image,
            "sleep",
            "infinity",
        ],
        ["docker", "start", name],
    ]


def docker_exec(
    name: str,
    argv: list[str],
    *,
    user: str,
    workdir: str | None = None,
    env: Sequence[str] = (),
    interactive: bool = False,
) -> list[str]:
    return [
        "docker",
        "exec",
        *(["-it"] if interactive else []),
        "-u",
        user,
        *(["-w", workdir] if workdir else []),
        *env,
        name,
        *argv,
    ]


def docker_step(
    name: str,
    step: ExecStep,
    *,
    extra_env: Sequence[str] = (),
    interactive: bool = False,
    argv: list[str] | None = None,
) -> list[str]:
    """A plan's exec step (its user, workdir and environment) in the debug container."""
    return docker_exec(
        name,
        step.argv if argv is None else argv,
        user=step.user,
        workdir=step.workdir,
        env=[*docker_env(step.env, []), *extra_env],
        interactive=interactive,
    )
