"""The two sides of a trial: the agent's container (its patch collected) and a fresh verifier
(its services, the patch handed in, test.sh run, its reward read and judged)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from runner import judge
from runner.base.errors import (
    TaskFailedError,
)
from runner.compile.render import UNSEALED_CENSUS
from runner.model.layout import AGENT_PATCH_FILE, CENSUS_FILE
from runner.model.report import (
    GateData,
    KeptContainer,
)
from runner.model.settings import (
    MAX_AGENT_PATCH_BYTES,
)
from runner.plan.runtime import (
    Container,
    FileToPut,
    Service,
    ToPut,
)
from runner.plan.types import ContainerPlan, GateServices, ServicePlan, TrialPlan
from runner.run import collect as left
from runner.run.handoff import handed
from runner.run.images import ensure_image
from runner.run.state import EARLY_DIR, RunState, StageResult, TrialRun


def _patch_file(patch: bytes) -> FileToPut:
    """Where test.sh reads the agent's patch."""
    return FileToPut(directory="/opt/selfbench", name=AGENT_PATCH_FILE, data=patch)


def trial_apart(trial: TrialPlan, suffix: str) -> TrialPlan:
    """The trial's verifier side under names of its own (its container, its services' network
    and containers), so that another verifier of the same trial can run beside or after it (the
    engine removes containers in the background); it logs under `<gate>/<suffix>/`."""

    def renamed(name: str) -> str:
        return f"{name}-{suffix}"

    services = trial.services
    verifier = trial.verifier.model_copy(update={"name": renamed(trial.verifier.name)})
    if services is not None:
        if verifier.network == services.network:
            verifier = verifier.model_copy(update={"network": renamed(services.network)})
        services = services.model_copy(
            update={
                "network": renamed(services.network),
                "services": [
                    s.model_copy(update={"container": renamed(s.container)})
                    for s in services.services
                ],
            }
        )
    return trial.model_copy(
        update={
            "gate": f"{trial.gate}/{suffix}",
            "verifier": verifier,
            "services": services,
            "online_verifier": None,
            "online_services": None,
        }
    )


def adopt_apart(gate_dir: Path, suffix: str) -> None:
    """A run under `<gate>/<suffix>/` (trial_apart) counts as the gate's own: its verifier log,
    copied-out logs and services' logs move into `<gate>/`, the rest goes."""
    apart = gate_dir / suffix
    for name in ("verifier.log", "logs", "services"):
        if (apart / name).exists():
            (apart / name).rename(gate_dir / name)
    shutil.rmtree(apart, ignore_errors=True)


log = logging.getLogger(__name__)


class Sides:
    def __init__(self, state: RunState) -> None:
        self.state = state

    def _census_file(self, trial: TrialPlan) -> FileToPut:
        """The census a verifier grades by: none yet for nop and the oracle (they record), the
        sealed one for every other (put in before the start, whatever the image holds)."""
        census = self.state.census if trial.census == "sealed" else None
        data = census.to_json().encode() if census is not None else UNSEALED_CENSUS
        return FileToPut(directory="/tests", name=CENSUS_FILE, data=data, mode=0o600)

    def open_verifier(
        self,
        trial: TrialPlan,
        stage: StageResult,
        stack: contextlib.ExitStack,
        patch: bytes | None = None,
    ) -> Container:
        """The trial's verifier container, started (with its services). A patch known already
        goes in before the start (then `_verifier_side(..., patched=True)`)."""
        network = stack.enter_context(self.services(trial.services, trial.gate, stage))
        census = self._census_file(trial)
        files: tuple[ToPut, ...] = (census,) if patch is None else (census, _patch_file(patch))
        files += handed(self.state, trial)
        verifier = stack.enter_context(
            self.state.engine.container(
                trial.verifier, env=self.state.env.proxies, keep=self.state.plan.keep, files=files
            )
        )
        if network is not None and trial.verifier.network != network:
            verifier.connect(network)  # a public verifier also joins its services' network
        log.debug("%s: verifier container started", trial.gate)
        return verifier

    @contextlib.contextmanager
    def services(
        self, services: GateServices | None, gate: str, stage: StageResult
    ) -> Iterator[str | None]:
        """Yields the network's name (what containers are created on or connected to)."""
        """The gate's services on their own network, healthy, logs saved afterwards. The
        agent container never joins it: only the verifier (and smoke) do."""
        if services is None:
            yield None
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(
                self.state.engine.network(
                    services.network, labels=services.network_labels, keep=self.state.plan.keep
                )
            )
            network = services.network
            running: list[tuple[ServicePlan, Service]] = []
            try:
                for plan in services.services:
                    ensure_image(self.state.engine, plan.image, what=f"service {plan.name}'s image")
                    running.append(
                        (
                            plan,
                            stack.enter_context(
                                self.state.engine.service(
                                    plan, network=network, keep=self.state.plan.keep
                                )
                            ),
                        )
                    )
                if self.state.plan.keep:
                    with self.state.lock:
                        self.state.kept.extend(
                            KeptContainer(
                                label=f"{gate} service {plan.name}",
                                name=plan.container,
                                enter=f"docker exec -it {plan.container} sh",
                            )
                            for plan, _ in running
                        )
                self.state.progress(gate, f"waiting for {', '.join(p.name for p, _ in running)}")
                self._wait_healthy(running, services.ready_timeout_seconds, gate)
                yield network
            finally:
                for plan, service in running:
                    path = self.state.path(gate, "services", f"{plan.name}.log")
                    service.save_logs(path, limit=self.state.plan.max_log_bytes)
                    stage.logs.append(str(path))

    def _wait_healthy(
        self, running: list[tuple[ServicePlan, Service]], timeout: float, gate: str
    ) -> None:
        deadline = time.monotonic() + timeout
        pending = list(running)
        while pending:
            for plan, service in list(pending):
                state = service.health()
                if state == "healthy":
                    pending.remove((plan, service))
                elif state in ("unhealthy", "exited"):
                    raise TaskFailedError(self._service_reason(plan, service, gate, f"is {state}"))
            if not pending:
                return
            if time.monotonic() > deadline:
                plan, service = pending[0]
                raise TaskFailedError(
                    self._service_reason(
                        plan, service, gate, f"did not become healthy within {int(timeout)}s"
                    )
                )
            time.sleep(0.2)

    def _service_reason(self, plan: ServicePlan, service: Service, gate: str, what: str) -> str:
        path = self.state.path(gate, "services", f"{plan.name}.log")
        lines = service.save_logs(path, limit=self.state.plan.max_log_bytes)
        tail = " / ".join(line.strip() for line in lines[-3:] if line.strip())
        return (
            f"service {plan.name} {what}"
            + (f"; its last lines: {tail}" if tail else "")
            + (f"; see {path}")
        )

    def agent_side(
        self,
        trial: TrialPlan,
        plan: ContainerPlan,
        stage: StageResult,
        data: GateData,
        run: TrialRun,
        started: Callable[[], None],
    ) -> None:
        assert trial.collect is not None
        limit = self.state.plan.max_log_bytes
        with self.state.engine.container(
            plan, env=self.state.env.proxies, keep=self.state.plan.keep
        ) as agent:
            log.debug("%s: agent container started", trial.gate)
            started()
            self.state.storage_mechanism = agent.storage_mechanism
            if trial.solution_dir and trial.solve:
                agent.put_directory(Path(trial.solution_dir), "/solution")
                stage.logs.append(str(run.agent_log))
                run.solve = agent.exec(trial.solve, run.agent_log, limit=limit)
                data.solve_exit_code = run.solve.exit_code
                if run.solve.timed_out:
                    data.timed_out = "solve"
                if run.solve.truncation:
                    stage.truncated.append(run.solve.truncation)
            if run.solve is None or (run.solve.exit_code == 0 and not run.solve.timed_out):
                stage.logs.append(str(run.collect_log))
                run.collect = agent.exec(trial.collect, run.collect_log, limit=limit)
                data.collect_exit_code = run.collect.exit_code
                if run.collect.timed_out:
                    data.timed_out = "collect"
                if run.collect.exit_code == 0 and not run.collect.timed_out:
                    found = agent.get_file(trial.agent_patch, limit=MAX_AGENT_PATCH_BYTES)
                    run.patch = found or b""
            self.state.keep(f"{trial.gate} agent", agent)
        log.debug("%s: agent side done", trial.gate)
        self.save_patch(trial, stage, data, run)

    def save_patch(
        self, trial: TrialPlan, stage: StageResult, data: GateData, run: TrialRun
    ) -> None:
        if run.patch is not None:
            patch_path = self.state.path(trial.gate, AGENT_PATCH_FILE)
            patch_path.write_bytes(run.patch)
            stage.logs.append(str(patch_path))
            data.agent_patch_bytes = len(run.patch)

    def verifier_side(
        self,
        trial: TrialPlan,
        stage: StageResult,
        data: GateData,
        run: TrialRun,
        verifier: Container,
        *,
        patched: bool = False,
    ) -> None:
        """test.sh on `run.patch` (copied in now, unless `patched`: it went in before the
        start), then the verifier's logs out."""
        assert run.patch is not None
        limit = trial.log_bytes or self.state.plan.max_log_bytes
        log.debug("%s: verifier side starts (agent patch %d bytes)", trial.gate, len(run.patch))
        if not patched:
            file = _patch_file(run.patch)
            verifier.put_file(file.directory, file.name, file.data)
        stage.logs.append(str(run.verifier_log))
        with self.state.verifier_slots.slot(background=trial.verifier.background):
            log.debug("%s: test.sh starts", trial.gate)
            run.test = verifier.exec(trial.test, run.verifier_log, limit=limit)
            log.debug("%s: test.sh ended (exit %s)", trial.gate, run.test.exit_code)
        data.verifier_exit_code = run.test.exit_code
        if run.test.timed_out:
            data.timed_out = "verifier"
        if run.test.truncation:
            stage.truncated.append(run.test.truncation)
        truncated = verifier.copy_out(
            trial.verifier_logs, self.state.path(trial.gate, "logs"), limit=limit
        )
        stage.truncated.extend(truncated or [])
        self.state.keep(f"{trial.gate} verifier", verifier)
        run.evidence = left.read_verifier(self.state.layout.verifier_logs(trial.gate))
        stage.logs.extend(run.evidence.files)
        log.debug("%s: verifier side done", trial.gate)

    def judge_trial(
        self, trial: TrialPlan, stage: StageResult, data: GateData, run: TrialRun
    ) -> None:
        data.reward, data.details = run.reward, run.details
        self.state.evidence[trial.gate] = run.evidence
        last = run.test or run.collect or run.solve
        data.limits = judge.limits_data(last, run.details, self.state.storage_mechanism)
        limits = trial.verifier.limits
        judgement = judge.judge_trial(
            judge.TrialEvidence(
                gate=trial.gate,
                solve=run.solve,
                collect=run.collect,
                test=run.test,
                reward=run.reward,
                details=run.details,
                reward_problem=run.reward_problem,
                limits=data.limits,
                agent_timeout=trial.solve.timeout_seconds if trial.solve else 0.0,
                verifier_timeout=trial.test.timeout_seconds,
                storage_mb=limits.storage_mb,
                memory_mb=limits.memory_mb,
                pids=limits.pids,
                agent_log=str(run.agent_log),
                collect_log=str(run.collect_log),
                verifier_log=str(run.verifier_log),
                last_lines=run.evidence.last_lines,
                problems=run.evidence.problems,
                pass_to_pass=run.evidence.selects_pass_to_pass,
            )
        )
        evidence = run.evidence
        data.evidence = evidence.summary
        data.undone = evidence.undone
        data.discarded = list(evidence.discarded)
        data.selectors = list(evidence.selectors)
        data.pass_to_pass_selectors = list(evidence.pass_to_pass_selectors)
        verdict = judge.judge_selectors(
            judgement,
            gate=trial.gate.kind,
            passing_alone=[s.selector for s in data.selectors if s.exit_code == 0],
            breaking_alone=[s.selector for s in data.pass_to_pass_selectors if s.exit_code != 0],
            undone=judge.undone_words(data.undone, data.discarded) if data.discarded else "",
            unmatched=[u.sentence() for u in evidence.unmatched],
        )
        stage.set(verdict.status, verdict.detail)

    def verify_patch(
        self,
        trial: TrialPlan,
        patch: bytes,
        scratch: StageResult | None = None,
        data: GateData | None = None,
        *,
        before_tests: Callable[[], None] | None = None,
    ) -> TrialRun:
        """A patch through a fresh verifier of the plan's trial (the hack gate, the probe, a
        predicted run), its logs and data in `scratch` and `data` when the caller keeps them."""
        run = TrialRun(
            agent_log=self.state.path(trial.gate, "agent.log"),
            collect_log=self.state.path(trial.gate, "collect.log"),
            verifier_log=self.state.path(trial.gate, "verifier.log"),
            patch=patch,
        )
        scratch = StageResult() if scratch is None else scratch
        data = GateData() if data is None else data
        with contextlib.ExitStack() as stack:
            verifier = self.open_verifier(trial, scratch, stack, patch)
            if before_tests is not None:
                before_tests()
            self.verifier_side(trial, scratch, data, run, verifier, patched=True)
        return run

    @staticmethod
    def early_trial(trial: TrialPlan) -> TrialPlan:
        """`trial` before the census exists: under `<gate>/early/`, graded without it."""
        return trial_apart(trial, EARLY_DIR).model_copy(update={"census": "unsealed"})

    def verify_early(
        self, trial: TrialPlan, patch: bytes, scratch: StageResult | None = None
    ) -> TrialRun:
        """`patch` through a fresh verifier of `trial` before the census exists (early_trial),
        until its caller says it counts (adopt_early); what it truncated goes to `scratch`."""
        early = self.early_trial(trial)
        return self.verify_patch(early, patch, scratch, before_tests=self.state.check_stopping)

    def adopt_early(self, trial: TrialPlan, run: TrialRun) -> TrialRun:
        """An early run (verify_early) counts as the trial's own run: its logs and its kept
        container become the gate's."""
        gate_dir = self.state.layout.gate(trial.gate)
        adopt_apart(gate_dir, EARLY_DIR)
        self.state.adopt_kept(trial.gate, EARLY_DIR)
        run.verifier_log = gate_dir / "verifier.log"
        return run
