"""`debug`: the exact state a red stage failed in, as docker CLI commands (pure).

From a run's report and plan it makes a DebugSession: the commands that recreate the state
(the last good build layer, or a gate's verifier with that gate's agent.patch applied and the
held-out tests in place, by test.sh's own prepare-only mode), the interactive shell, the
commands that reproduce the failure without a shell (what `debug --print` prints, a script),
and the cleanup. The same commands are what `debug` runs, so the two cannot drift apart.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.errors import UsageError
from runner.model.layout import RunLayout
from runner.model.report import Report, Status
from runner.model.stages import DEBUGGABLE_STAGES, Gate, GateId, Stage
from runner.plan.debugcheck import LABEL_FORMAT, LAYER_ID, refused_image
from runner.plan.debugcommands import (
    docker_create,
    docker_env,
    docker_exec,
    docker_labels,
    docker_step,
)
from runner.plan.types import TrialPlan, VerifyPlan

STAGES = DEBUGGABLE_STAGES
HISTFILE = "/tmp/.selfbench_history"
# The interactive shell puts the failing command into its history first, so Up + Enter runs it.
_SHELL_WITH_HISTORY = (
    'printf "%s\\n" "$SELFBENCH_DEBUG_COMMAND" >> "$HISTFILE"; '
    'echo "selfbench debug: press Up, then Enter, to run: $SELFBENCH_DEBUG_COMMAND"; '
    "exec bash -i"
)
_VERIFIER_SHELL = (
    'cd "$(cat /opt/selfbench/workdir)" && '
    'echo "selfbench debug: press Up, then Enter, to run the fail-to-pass command" && '
    "exec bash -i"
)


@dataclass(frozen=True, kw_only=True)
class DebugSession:
    stage: str
    why: str  # the stage's status and detail, from the report
    setup: list[list[str]] = field(default_factory=list)
    shell: list[str] = field(default_factory=list)
    reproduce: list[list[str]] = field(default_factory=list)
    cleanup: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    show: list[str] = field(default_factory=list)  # a command whose output the shell's user sees
    # The images its containers start from: each must carry this runner's label on the engine
    # (a run's report.json and plan.json are files anyone may edit).
    images: list[str] = field(default_factory=list)

    def image_check(self, image: str) -> list[str]:
        """The docker command that prints `image`'s runner label ("1": built by this runner)."""
        return ["docker", "image", "inspect", "--format", LABEL_FORMAT, image]

    def script(self) -> str:
        """A bash script that recreates the state, reproduces the failure and cleans up."""
        lines = [
            "#!/bin/bash",
            f"# selfbench-runner debug --print: the {self.stage} state of this run ({self.why})",
            *(f"# {note}" for note in self.notes),
            "set -u",
            *(
                f'[ "$({shlex.join(self.image_check(image))} 2>/dev/null)" = 1 ] || '
                f"{{ echo {shlex.quote(refused_image(image))} >&2; exit 2; }}"
                for image in self.images
            ),
            "trap "
            + shlex.quote("; ".join(shlex.join(c) + " >/dev/null 2>&1" for c in self.cleanup))
            + " EXIT",
            *(
                shlex.join(c) + (" >/dev/null" if c[1] in ("create", "start") else "")
                for c in self.setup
            ),
        ]
        if self.reproduce:
            lines.append("status=0")
            lines += [shlex.join(c) + " || status=$?" for c in self.reproduce]
        lines.append("# For a shell in this state instead (before the cleanup runs):")
        lines.append("#   " + shlex.join(self.shell))
        if self.reproduce:
            lines.append('exit "$status"')
        return "\n".join(lines) + "\n"


def first_red(report: Report) -> str | None:
    for name in STAGES[:4]:
        if report.stages.get(name).status in (Status.FAILED, Status.ERROR):
            return name
    if report.stages.determinism.status in (Status.FAILED, Status.ERROR):
        return Stage.ORACLE
    if report.stages.hack.status is Status.FAILED:
        return Stage.HACK
    return None


def _failing_command(step: str) -> str:
    """The shell command of a failed `RUN` step (shell or exec form)."""
    text = step.strip()
    if text.upper().startswith("RUN "):
        text = text[4:].strip()
    if text.startswith("["):
        try:
            argv = json.loads(text)
            if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
                return shlex.join(argv)
        except ValueError:
            pass
    return text


def plan_debug(
    report: Report,
    plan: VerifyPlan | None,
    run_dir: Path,
    *,
    stage: str | None,
    debug_id: str,
    owner: str,
    proxies: list[str],
) -> DebugSession:
    chosen = stage or first_red(report)
    if chosen is None:
        raise UsageError(
            f"nothing is red in this run ({report.verdict.value}); pass --stage "
            f"{'|'.join(STAGES)} to open a stage anyway",
            field="--stage",
        )
    if chosen not in STAGES:
        raise UsageError(f"expected one of {', '.join(STAGES)}", field="--stage")
    record = report.stages.get(chosen)
    why = f"{record.status.value}: {record.detail}"
    if chosen == Stage.BUILD:
        return _build_session(report, plan, run_dir, why, debug_id, owner, proxies)
    if plan is None:
        raise UsageError(
            f"{RunLayout(run_dir).plan} is missing: this run stopped before its plan was made",
            path=str(run_dir),
        )
    if report.stages.build.status is not Status.PASSED:
        raise UsageError(
            f"the images were not built in this run (build {report.stages.build.status.value}); "
            "open --stage build",
            field="--stage",
        )
    if chosen == Stage.HACK:
        return _hack_session(report, plan, run_dir, why, debug_id, owner, proxies)
    return _gate_session(plan, run_dir, chosen, why, debug_id, owner, proxies)


def _hack_session(
    report: Report,
    plan: VerifyPlan,
    run_dir: Path,
    why: str,
    debug_id: str,
    owner: str,
    proxies: list[str],
) -> DebugSession:
    """The verifier of the exploit that earned a reward (the first one), its patch applied."""
    exploits = report.stages.hack.data.exploits
    won = [e.name for e in exploits if e.outcome == "earned-reward"]
    planned = {e.name: e for e in plan.hack.exploits} if plan.hack else {}
    name = next((n for n in won if n in planned), None)
    if name is None:
        raise UsageError(
            "no exploit earned a reward in this run: the hack gate has no failed state to open",
            field="--stage",
        )
    return _gate_session(
        plan,
        run_dir,
        Stage.HACK,
        why,
        debug_id,
        owner,
        proxies,
        trial=planned[name].trial,
        label=f"exploit {name}",
    )


def _build_session(
    report: Report,
    plan: VerifyPlan | None,
    run_dir: Path,
    why: str,
    debug_id: str,
    owner: str,
    proxies: list[str],
) -> DebugSession:
    data = report.stages.build.data
    if not data.last_good_layer or not data.failed_step:
        raise UsageError(
            "this build left no layer to open (it failed before its first step, or no build "
            f"failed): {report.stages.build.detail}",
            field="--stage",
        )
    if not LAYER_ID.fullmatch(data.last_good_layer):
        raise UsageError(
            f"stages.build.data.lastGoodLayer {data.last_good_layer[:100]!r} is not an image id "
            "(debug starts a container from it)",
            path=str(RunLayout(run_dir).report),
        )
    command = _failing_command(data.failed_step)
    name = f"selfbench-debug-{debug_id}"
    build = next((b for b in plan.builds if b.kind == data.failed_image), None) if plan else None
    limits: list[str] = []
    if build is not None:
        limits = [
            "--memory",
            f"{build.limits.memory_mb}m",
            "--memory-swap",
            f"{build.limits.memory_mb}m",
            "--cpuset-cpus",
            build.limits.cpuset,
        ]
    labels = docker_labels(plan, debug_id, owner) if plan else []
    base = ["docker", "run", "--rm", "--name", name, *labels, *limits, *docker_env({}, proxies)]
    # The layer's own user and working directory are docker run's defaults: the step's.
    shell = [
        *base[:2],
        "-it",
        *base[2:],
        "-e",
        f"HISTFILE={HISTFILE}",
        "-e",
        f"SELFBENCH_DEBUG_COMMAND={command}",
        data.last_good_layer,
        "bash",
        "-c",
        _SHELL_WITH_HISTORY,
    ]
    notes = [
        f"build of the {data.failed_image or 'task'} image, step {data.step_number}: "
        f"{data.failed_step}",
        f"exit code {data.exit_code}" if data.exit_code is not None else "no exit code",
    ]
    if report.run_dir:
        notes.append(f"the step's log: {RunLayout(Path(report.run_dir)).stage(Stage.BUILD)}")
    return DebugSession(
        stage=Stage.BUILD,
        why=why,
        shell=shell,
        reproduce=[[*base, data.last_good_layer, "/bin/sh", "-c", command]],
        cleanup=[["docker", "rm", "-f", name]],
        notes=notes,
        images=[data.last_good_layer],
    )


def _gate_session(
    plan: VerifyPlan,
    run_dir: Path,
    stage: str,
    why: str,
    debug_id: str,
    owner: str,
    proxies: list[str],
    *,
    trial: TrialPlan | None = None,
    label: str | None = None,
) -> DebugSession:
    if trial is None:
        trial = plan.trial(Gate.NOP if stage == Stage.SMOKE else GateId(stage))
    gate = trial.gate  # hack/<exploit>: its run directory
    label = label or gate
    verifier = trial.verifier
    if stage == Stage.SMOKE and plan.smoke.container is not None:
        verifier = plan.smoke.container
    name = f"selfbench-debug-{debug_id}-verifier"
    labels = docker_labels(plan, debug_id, owner)
    setup = docker_create(name, verifier, labels, proxies)
    cleanup = [["docker", "rm", "-f", name]]
    images = [verifier.image]
    notes: list[str] = []
    if trial.services is not None or (stage == Stage.SMOKE and plan.smoke.services is not None):
        notes.append(
            "this gate's services are not started by debug: tests that need them will fail "
            "to connect"
        )
    if stage == Stage.SMOKE:
        return _smoke_session(plan, why, name, setup, cleanup, notes, images)
    setup.append(
        ["docker", "cp", str(RunLayout(run_dir).agent_patch(gate)), f"{name}:{trial.agent_patch}"]
    )
    verifier_env = ["-e", "HOME=/home/verifier"]
    setup.append(
        ["docker", "exec", "-e", "SELFBENCH_PREPARE_ONLY=1", *verifier_env, name, *trial.test.argv]
    )
    shell = docker_exec(
        name, ["bash", "-c", _VERIFIER_SHELL], user="verifier", env=verifier_env, interactive=True
    )
    reproduce = [
        docker_exec(name, ["bash", f"/opt/selfbench/{script}"], user="verifier", env=verifier_env)
        for script in ("fail_to_pass.sh", "pass_to_pass.sh")
    ]
    notes.append(
        f"the {label} verifier with {label}'s agent.patch applied and the held-out tests in place"
    )
    show = [
        "docker",
        "exec",
        name,
        "cat",
        "/opt/selfbench/fail_to_pass.sh",
        "/opt/selfbench/pass_to_pass.sh",
    ]
    if gate.kind is Gate.ORACLE and trial.agent is not None and trial.solve is not None:
        agent_name = f"selfbench-debug-{debug_id}-agent"
        setup += docker_create(agent_name, trial.agent, labels, proxies)
        images.append(trial.agent.image)
        if trial.solution_dir:
            setup.append(["docker", "cp", f"{trial.solution_dir}/.", f"{agent_name}:/solution"])
        setup.append(docker_step(agent_name, trial.solve))
        cleanup.append(["docker", "rm", "-f", agent_name])
        notes.append(f"the agent side after solve.sh: docker exec -it -u agent {agent_name} bash")
    return DebugSession(
        stage=stage,
        why=why,
        setup=setup,
        shell=shell,
        reproduce=reproduce,
        cleanup=cleanup,
        notes=notes,
        show=show,
        images=images,
    )


def _smoke_session(
    plan: VerifyPlan,
    why: str,
    name: str,
    setup: list[list[str]],
    cleanup: list[list[str]],
    notes: list[str],
    images: list[str],
) -> DebugSession:
    """The smoke container, its command first in the shell's history."""
    smoke = plan.smoke.run
    command = shlex.join(smoke.argv)
    history = ["-e", f"HISTFILE={HISTFILE}", "-e", f"SELFBENCH_DEBUG_COMMAND={command}"]
    notes.append(f"the smoke command: {command}")
    return DebugSession(
        stage=Stage.SMOKE,
        why=why,
        setup=setup,
        shell=docker_step(
            name,
            smoke,
            extra_env=history,
            interactive=True,
            argv=["bash", "-c", _SHELL_WITH_HISTORY],
        ),
        reproduce=[docker_step(name, smoke)],
        cleanup=cleanup,
        notes=notes,
        images=images,
    )
