"""The build and smoke gates: an image that does not build, a verifier that does not start
or cannot reach its services."""

from __future__ import annotations

import re
from collections.abc import Sequence

from runner.judge.base import (
    Judgement,
    errored,
    failed,
    passed,
    storage_reason,
    with_limit_notes,
)
from runner.model.report import LimitsData
from runner.plan.runtime import BuildOutcome, ExecOutcome

# What a failed RUN step was, by the script it runs (the Dockerfile templates' own steps).
_STEP_NAMES: tuple[tuple[str, str], ...] = (
    (
        "selfbench-dependency-setup.patch",
        "the dependency-setup pass (setupCommand again, with the gold patch's manifests)",
    ),
    ("/opt/selfbench-environment/root-setup.sh", "the root setup (rootSetupCommand)"),
    ("/opt/selfbench-environment/setup.sh", "the setup command (setupCommand)"),
    ("selfbench-repo.tar.gz", "the repository snapshot"),
    ("update-ca-certificates", "the runner's base image (extra CA certificates)"),
    ("apt-get", "the base layer (apt packages)"),
    ("useradd --create-home --shell /bin/bash agent", "the agent user layer"),
    ("useradd --create-home --shell /bin/bash verifier", "the verifier layer"),
    (
        "verifier.pl prepare-image",
        "the verifier's preparation of what setup installed (verifier.pl prepare-image)",
    ),
    ("chmod 0700 /tests", "the verifier layer"),
)
_TOOLCHAIN_STEP = re.compile(r"/opt/selfbench-toolchains/([a-z]+)\.sh")
# Builder chatter and the summary line that quotes the RUN line again: never the cause.
_NOISE = re.compile(
    r"^(Step \d+/\d+ : |---> |Removing intermediate container |Successfully |"
    r"The command .* returned a non-zero code|ERROR: |$)"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")
MAX_ERROR_LINES = 3
MAX_ERROR_LINE = 240


def step_label(step: str | None, number: int = 0) -> str:
    """The failed step as a reader names it: base, a toolchain, the setup command, the
    dependency-setup pass, the root setup... (the instruction itself goes in the data)."""
    if not step:
        return "the build"
    if match := _TOOLCHAIN_STEP.search(step):
        return f"the {match.group(1)} toolchain layer"
    for marker, name in _STEP_NAMES:
        if marker in step:
            return name
    instruction = step.split(None, 1)[0].upper() if step.split() else "a"
    return f"step {number} ({instruction})" if number else f"a {instruction} step"


def error_lines(tail: Sequence[str]) -> list[str]:
    """The last lines of a failed step's output that say something (at most MAX_ERROR_LINES,
    each cut to MAX_ERROR_LINE characters)."""
    # The classic builder paints a step's stderr red: the escapes are no part of the words.
    plain = (_ANSI.sub("", line).strip() for line in tail)
    meaningful = [line for line in plain if not _NOISE.match(line)]
    return [
        line if len(line) <= MAX_ERROR_LINE else line[: MAX_ERROR_LINE - 1] + "…"
        for line in meaningful[-MAX_ERROR_LINES:]
    ]


def build_failure(outcome: BuildOutcome) -> str:
    """`<step> failed (exit N): <its last error lines>`, without the RUN line."""
    code = f" (exit {outcome.exit_code})" if outcome.exit_code is not None else ""
    lines = error_lines(outcome.tail)
    if lines:
        cause = " | ".join(lines)
    elif outcome.error and outcome.exit_code is None:
        cause = outcome.error  # the engine's own words (no step output to quote)
    else:
        cause = "no output"
    return f"{step_label(outcome.failed_step, outcome.step_number)} failed{code}: {cause}"


def judge_build(
    kind: str,
    outcome: BuildOutcome,
    *,
    task_fault: bool,
    memory_mb: int,
    log_path: str,
    pids: int = 0,
    storage_mb: int = 0,
    limited_step: bool = False,
) -> Judgement:
    """A build that did not finish. `pids` and `storage_mb` are the task's limits, which hold in
    the steps that run its code (runner.engine.steps). `limited_step`: the step ran under
    them though it is the runner's (the verifier's preparation, which runs what setup
    installed): a limit that stopped it is the task's doing, any other failure the runner's."""
    step = step_label(outcome.failed_step, outcome.step_number)
    limits = LimitsData(
        pids_limit_hits=outcome.limits.pids_limit_hits if outcome.limits else -1,
        oom_kills=outcome.limits.oom_kills if outcome.limits else -1,
        pids_at_limit=outcome.limits.pids_at_limit if outcome.limits else False,
    )
    if limited_step and _limit_stopped(outcome, limits):
        task_fault = True
    if outcome.storage_exceeded_mb is not None:
        reason = storage_reason(outcome.storage_exceeded_mb, storage_mb, outcome.storage_mechanism)
        detail = f"{kind} image: {step}: {reason}; see {log_path}"
        return failed(detail) if task_fault else errored(detail)
    if outcome.timed_out:
        # The runner stopped it: never blame memory for the runner's own kill.
        detail = with_limit_notes(
            f"{kind} image: {outcome.error} while running {step}; the runner stopped it",
            limits.model_copy(update={"oom_kills": -1}),
            memory_mb=memory_mb,
            pids=pids,
        )
        detail += f"; see {log_path}"
        return failed(detail) if task_fault else errored(detail)
    why = outcome.error or "failed"
    if outcome.engine_lost:
        # Not the task: the engine went away under the step (a restart, a shutdown).
        return errored(
            f"{kind} image: {step} was killed and the Docker engine stopped answering: "
            f"{why}; see {log_path}"
        )
    failure = build_failure(outcome)
    if outcome.exit_code == 137:
        if outcome.oom_killed:
            failure += f" (killed by the build's memory limit, {memory_mb} MB)"
        elif outcome.oom_killed is None:
            failure += f" (killed by SIGKILL; the build's memory limit is {memory_mb} MB)"
        else:
            failure += " (killed by SIGKILL; not the memory limit: the engine recorded no OOM kill)"
        limits = limits.model_copy(update={"oom_kills": -1})  # said just above
    failure = with_limit_notes(failure, limits, memory_mb=memory_mb, pids=pids)
    detail = f"{kind} image: {failure}; see {log_path}"
    return failed(detail) if task_fault else errored(detail)


def _limit_stopped(outcome: BuildOutcome, limits: LimitsData) -> bool:
    """One of the task's limits ended the step: storage, time, memory, or process slots."""
    return (
        outcome.storage_exceeded_mb is not None
        or outcome.timed_out
        or (outcome.exit_code == 137 and bool(outcome.oom_killed))
        or limits.pids_at_limit
        or limits.pids_limit_hits > 0
    )


# ---- smoke --------------------------------------------------------------------------------------


def judge_smoke(
    outcome: ExecOutcome,
    lines: Sequence[str],
    limits: LimitsData,
    *,
    storage_mb: int,
    memory_mb: int,
    pids: int,
    log_path: str,
) -> Judgement:
    if outcome.timed_out:
        return failed(
            f"smoke command timed out after {int(outcome.seconds)}s; the runner stopped it"
        )
    if limits.storage_exceeded_mb is not None:
        return failed(
            storage_reason(limits.storage_exceeded_mb, storage_mb, limits.storage_mechanism)
        )
    if outcome.exit_code != 0:
        failing = next(
            (ln for ln in reversed(lines) if ln.startswith("smoke: failed")),
            f"exit {outcome.exit_code}",
        )
        detail = f"smoke check failed: {failing}; see {log_path}"
        return failed(with_limit_notes(detail, limits, memory_mb=memory_mb, pids=pids))
    return passed("smoke checks passed in the verifier image")
