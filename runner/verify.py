"""The main job: compile -> audit -> build -> smoke -> nop -> oracle -> determinism, one report.

Stages record what happened; exceptions only cross this module's boundary for usage errors.
`failed` means the task is at fault, `error` means the infrastructure is.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.models.containers import Container

from runner import __version__
from runner.audit import audit
from runner.bundle import BundleSpec, read_bundle
from runner.compiler import compile_task
from runner.engine import Engine, Limits, RunResult
from runner.errors import InfrastructureError, InvalidTaskError, RunnerError
from runner.images import (
    DEFAULT_BASE_IMAGE,
    BuildEnvironment,
    context_digest,
    prepare_base,
    proxy_environment,
)
from runner.render import AGENT_PATCH, CompileOptions
from runner.report import Report, Stage, Status, Verdict, write_atomic
from runner.taskdir import load_authored_task
from runner.toolchains import ToolchainSettings, load_catalog

log = logging.getLogger(__name__)

# Instructions whose failure is the task's fault; anything else failing is infrastructure.
TASK_BUILD_STEPS = ("/opt/selfbench-environment/setup.sh", "selfbench-dependency-setup.patch")

Progress = Callable[[str, str], None]


@dataclass(frozen=True, kw_only=True)
class VerifySettings:
    repo: str | None = None
    base_image: str = DEFAULT_BASE_IMAGE
    extra_ca_certs: Path | None = None
    toolchains: ToolchainSettings = field(default_factory=ToolchainSettings)
    logs_dir: Path | None = None
    keep: bool = False
    remove_images: bool = False
    compile_options: CompileOptions = field(default_factory=CompileOptions)
    pids_limit: int = 4096
    build_network: str | None = None

    def build_environment(self) -> BuildEnvironment:
        return BuildEnvironment(
            base_image=self.base_image,
            extra_ca_certs=self.extra_ca_certs,
            toolchains=self.toolchains,
            build_network=self.build_network,
        )


@dataclass(kw_only=True)
class Images:
    agent: str
    verifier: str


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@contextlib.contextmanager
def timed(stage: Stage) -> Iterator[Stage]:
    started = time.monotonic()
    try:
        yield stage
    finally:
        stage.seconds = round(time.monotonic() - started, 3)


def image_repository(task_id: str) -> str:
    return "selfbench/" + task_id.lower()


class Verifier:
    def __init__(self, target: Path, settings: VerifySettings, progress: Progress) -> None:
        self.target = target
        self.settings = settings
        self.progress = progress
        self.run_id = new_run_id()
        self.started = time.monotonic()
        self.report = Report(
            task_id=None,
            verdict=Verdict.ACCEPTED,
            runner_version=__version__,
            run_id=self.run_id,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        self.engine: Engine | None = None
        self.run_dir: Path | None = None
        self.kept: list[str] = []
        self.interrupted = False

    # ---- helpers -----------------------------------------------------------------------

    def _stage(self, name: str) -> Stage:
        return self.report.stages.get(name)

    def _set(self, name: str, status: Status, detail: str, **data: Any) -> None:
        stage = self._stage(name)
        stage.status = status
        stage.detail = detail
        stage.data.update(data)
        self.progress(name, f"{status.value}: {detail}")

    def _run_subdir(self, name: str) -> Path:
        assert self.run_dir is not None
        path = self.run_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _log_path(self, *parts: str) -> Path:
        assert self.run_dir is not None
        path = self.run_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _make_run_dir(self, task_id: str) -> Path:
        if self.settings.logs_dir is not None:
            run_dir = self.settings.logs_dir
        else:
            run_dir = Path("runs") / task_id / self.run_id.split("-")[0]
            if run_dir.exists():
                run_dir = Path("runs") / task_id / self.run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        self.report.run_dir = str(run_dir)
        return run_dir

    # ---- the pipeline ------------------------------------------------------------------

    def run(self) -> Report:
        try:
            bundle = self._compile_and_audit()
            if bundle is not None:
                self._docker_stages(bundle)
        except KeyboardInterrupt:
            self.interrupted = True
            raise
        finally:
            self._finish()
        return self.report

    def _compile_and_audit(self) -> BundleSpec | None:
        compile_stage = self._stage("compile")
        with timed(compile_stage):
            try:
                if (self.target / "task.toml").is_file():
                    spec = read_bundle(self.target)
                    self.report.task_id = spec.task_id
                    self.run_dir = self._make_run_dir(spec.task_id)
                    self.report.bundle = str(self.target)
                    self._set("compile", Status.PASSED, "compiled bundle given; verified as it is")
                    self._set(
                        "audit", Status.SKIPPED, "compiled bundle: no definition.json to audit"
                    )
                    return spec
                task = load_authored_task(self.target)
                self.report.task_id = task.definition.task_id
                self.run_dir = self._make_run_dir(task.definition.task_id)
                out = self.run_dir / "bundle"
                compile_task(
                    task, repo=self.settings.repo, out=out, options=self.settings.compile_options
                )
                self.report.bundle = str(out)
                spec = read_bundle(out)
                self._set("compile", Status.PASSED, f"compiled to {out}")
            except InvalidTaskError as exc:
                self.report.verdict = Verdict.INVALID
                self._set("compile", Status.FAILED, exc.one_line())
                if self.run_dir is None and self.settings.logs_dir is not None:
                    self.run_dir = self._make_run_dir("invalid")
                return None
            except RunnerError as exc:
                self._set("compile", Status.ERROR, exc.one_line())
                return None
        audit_stage = self._stage("audit")
        with timed(audit_stage):
            result = audit(task.definition, gold=task.gold, tests=task.tests)
            metrics = result.metrics
            data = {
                "blockers": result.blockers,
                "metrics": {
                    "implementationFiles": metrics.implementation_files,
                    "implementationChangedLines": metrics.implementation_changed_lines,
                    "testFiles": metrics.test_files,
                },
            }
            if not result.accepted:
                self._set("audit", Status.FAILED, result.reason(), **data)
                return None
            self._set(
                "audit",
                Status.PASSED,
                f"{metrics.implementation_files} implementation file(s), "
                f"{metrics.implementation_changed_lines} changed line(s), "
                f"{metrics.test_files} test file(s)",
                **data,
            )
        return spec

    def _docker_stages(self, spec: BundleSpec) -> None:
        limits = Limits(
            cpus=spec.cpus,
            memory_mb=spec.memory_mb,
            storage_mb=spec.storage_mb,
            pids=self.settings.pids_limit,
        )
        build = self._stage("build")
        with timed(build):
            try:
                self.engine = Engine(self.run_id)
                images = self._build(spec, limits)
            except InfrastructureError as exc:
                self._set("build", Status.ERROR, exc.one_line())
                return
        if images is None:
            return
        with timed(self._stage("smoke")):
            smoke_ok = self._guard("smoke", lambda: self._smoke(spec, images, limits))
        if not smoke_ok:
            self._skip_after("smoke")
            return
        with timed(self._stage("nop")):
            self._guard("nop", lambda: self._trial("nop", spec, images, limits))
        with timed(self._stage("oracle")):
            oracle_ok = self._guard("oracle", lambda: self._trial("oracle", spec, images, limits))
        with timed(self._stage("determinism")):
            self._determinism(oracle_ok)

    def _guard(self, name: str, body: Callable[[], bool]) -> bool:
        try:
            return body()
        except InfrastructureError as exc:
            self._set(name, Status.ERROR, exc.one_line())
            return False

    def _skip_after(self, name: str) -> None:
        for later in ("nop", "oracle", "determinism"):
            self._stage(later).detail = f"skipped: {name} did not pass"

    # ---- build -------------------------------------------------------------------------

    def _build(self, spec: BundleSpec, limits: Limits) -> Images | None:
        engine = self.engine
        assert engine is not None and self.run_dir is not None
        self.progress("build", f"base image {self.settings.base_image}")
        try:
            base, inputs = prepare_base(
                engine,
                self.settings.build_environment(),
                load_catalog().close(spec.toolchains),
                self._log_path("build", "base.log").parent,
                self.progress,
            )
        except InvalidTaskError as exc:
            self.report.verdict = Verdict.INVALID
            self._set("build", Status.FAILED, exc.one_line())
            return None
        catalog = load_catalog()
        buildargs = {
            "BASE_IMAGE": base,
            **self.settings.toolchains.build_args(catalog.close(spec.toolchains)),
        }
        repository = image_repository(spec.task_id)
        built: dict[str, str] = {}
        data: dict[str, Any] = {
            "baseImage": self.settings.base_image,
            "fromImage": base,
            "images": {},
        }
        for kind, directory in (("agent", "environment"), ("verifier", "tests")):
            context = spec.root / directory
            digest = context_digest(context, {**buildargs, **inputs})
            tag = f"{repository}:{kind}-{digest[:16]}"
            log_path = self._log_path("build", f"{kind}.log")
            existing = engine.image_id(tag)
            if existing:
                built[kind] = tag
                data["images"][kind] = {"tag": tag, "id": existing, "cached": True, "seconds": 0.0}
                self.progress("build", f"{kind} image cached ({tag})")
                continue
            self.progress("build", f"building {kind} image {tag}")
            result = engine.build(
                context=context,
                tag=tag,
                buildargs={**buildargs, **proxy_environment()},
                labels={**engine.labels("image", spec.task_id), "org.selfbench.inputs": digest},
                limits=limits,
                timeout=spec.build_timeout,
                log_path=log_path,
                on_line=self._build_line,
                task_steps=TASK_BUILD_STEPS,
                network_mode=self.settings.build_network,
            )
            self._stage("build").logs.append(str(log_path))
            data["images"][kind] = {
                "tag": tag,
                "id": result.image_id,
                "cached": False,
                "seconds": round(result.seconds, 3),
                "cachedSteps": result.cached_steps,
                "totalSteps": result.total_steps,
            }
            if not result.ok:
                data["failedStep"] = result.failed_step
                data["exitCode"] = result.exit_code
                data["tail"] = result.tail
                if result.last_layer:
                    data["lastGoodLayer"] = result.last_layer
                    data["debugCommand"] = f"docker run -it --rm {result.last_layer} bash"
                why = result.error or "failed"
                oom = " (killed: out of memory?)" if result.exit_code == 137 else ""
                detail = f"{kind} image: `{result.failed_step}` failed: {why}{oom}; see {log_path}"
                status = Status.FAILED if result.task_at_fault else Status.ERROR
                self._set("build", status, detail, **data)
                return None
            built[kind] = tag
        self._set(
            "build",
            Status.PASSED,
            "agent and verifier images ready"
            + (" (cached)" if all(v["cached"] for v in data["images"].values()) else ""),
            **data,
        )
        return Images(agent=built["agent"], verifier=built["verifier"])

    def _build_line(self, line: str) -> None:
        if line.startswith("Step "):
            self.progress("build", line)
        else:
            log.debug("%s", line)

    # ---- gates -------------------------------------------------------------------------

    def _container_env(self, home: str) -> dict[str, str]:
        return {"HOME": home, **proxy_environment()}

    def _dispose(self, container: Container, label: str) -> None:
        """Remove a gate container, or with --keep say how to get a shell in it."""
        assert self.engine is not None
        if not self.settings.keep:
            self.engine.remove_container(container)
            return
        container.reload()
        if container.status == "running":
            enter = f"docker exec -it {container.name} bash"
        else:
            # Starting an exited gate container would rerun its command: open its state.
            enter = f"docker run -it --rm --user root $(docker commit {container.name}) bash"
        self.kept.append(f"{label} ({container.name}): {enter}")

    def _smoke(self, spec: BundleSpec, images: Images, limits: Limits) -> bool:
        engine = self.engine
        assert engine is not None
        log_path = self._log_path("smoke", "smoke.log")
        self._stage("smoke").logs.append(str(log_path))
        container = engine.create(
            images.verifier,
            ["bash", "/opt/selfbench-environment/smoke.sh"],
            name_hint="smoke",
            limits=limits,
            labels=engine.labels("smoke", spec.task_id),
            user="verifier",
            environment=self._container_env("/home/verifier"),
            working_dir="/app",
        )
        try:
            result = engine.run_to_end(
                container, timeout=min(spec.verifier_timeout, 600), log_path=log_path
            )
        finally:
            self._dispose(container, "smoke")
        lines = log_path.read_text(errors="replace").splitlines()
        data = {
            "exitCode": result.exit_code,
            "answers": [ln for ln in lines if ln.strip() and not ln.startswith("+ ")][:40],
            "output": lines[-20:],
        }
        if result.timed_out:
            self._set("smoke", Status.FAILED, "smoke command timed out", **data)
            return False
        if result.exit_code != 0:
            failing = next(
                (ln for ln in reversed(lines) if ln.startswith("smoke: failed")),
                f"exit {result.exit_code}",
            )
            self._set(
                "smoke", Status.FAILED, f"smoke check failed: {failing}; see {log_path}", **data
            )
            return False
        self._set("smoke", Status.PASSED, "smoke checks passed in the verifier image", **data)
        return True

    def _trial(self, name: str, spec: BundleSpec, images: Images, limits: Limits) -> bool:
        engine = self.engine
        assert engine is not None
        stage = self._stage(name)
        gate_dir = self._run_subdir(name)
        labels = engine.labels(name, spec.task_id)
        data: dict[str, Any] = {}

        # Agent side: nothing (nop) or the reference solution (oracle), then collect.
        agent = engine.create(
            images.agent,
            ["sleep", "infinity"],
            name_hint=f"{name}-agent",
            limits=limits,
            labels=labels,
            user="agent",
            environment=self._container_env("/home/agent"),
            working_dir="/app",
        )
        try:
            agent.start()
            if name == "oracle":
                engine.put_directory(agent, spec.root / "solution", "/solution")
                solve = engine.exec(
                    agent,
                    ["bash", "/solution/solve.sh"],
                    user="agent",
                    log_path=gate_dir / "agent.log",
                    timeout=spec.agent_timeout,
                    environment=self._container_env("/home/agent"),
                    workdir="/app",
                )
                stage.logs.append(str(gate_dir / "agent.log"))
                data["solveExitCode"] = solve.exit_code
                if solve.timed_out:
                    self._set(
                        name,
                        Status.FAILED,
                        f"solution/solve.sh timed out after {int(spec.agent_timeout)}s",
                        **data,
                    )
                    return False
                if solve.exit_code != 0:
                    self._set(
                        name,
                        Status.FAILED,
                        f"solution/solve.sh exited {solve.exit_code}: the gold patch does not "
                        f"apply to the post-setup tree; see {gate_dir / 'agent.log'}",
                        **data,
                    )
                    return False
            collect = engine.exec(
                agent,
                ["bash", "-c", spec.collect_command],
                user="root",
                log_path=gate_dir / "collect.log",
                timeout=spec.collect_timeout,
            )
            stage.logs.append(str(gate_dir / "collect.log"))
            data["collectExitCode"] = collect.exit_code
            if collect.exit_code != 0:
                raise InfrastructureError(
                    f"collecting the agent patch failed (exit {collect.exit_code}); "
                    f"see {gate_dir / 'collect.log'}"
                )
            engine.get_path(agent, AGENT_PATCH, gate_dir)
        finally:
            self._dispose(agent, f"{name} agent")
        patch_file = gate_dir / "agent.patch"
        patch = patch_file.read_bytes() if patch_file.is_file() else b""
        data["agentPatchBytes"] = len(patch)
        stage.logs.append(str(patch_file))

        # Verifier side: a fresh container of the verifier image runs tests/test.sh.
        verifier = engine.create(
            images.verifier,
            ["/tests/test.sh"],
            name_hint=f"{name}-verifier",
            limits=limits,
            labels=labels,
            user="root",
            environment=self._container_env("/home/verifier"),
            working_dir="/app",
        )
        try:
            engine.put_file(verifier, "/opt/selfbench", "agent.patch", patch)
            result = engine.run_to_end(
                verifier, timeout=spec.verifier_timeout, log_path=gate_dir / "verifier.log"
            )
            engine.get_path(verifier, "/logs/verifier", gate_dir / "logs")
        finally:
            self._dispose(verifier, f"{name} verifier")
        stage.logs.append(str(gate_dir / "verifier.log"))
        reward_path = gate_dir / "logs" / "verifier" / "reward.json"
        data["verifierExitCode"] = result.exit_code
        return self._judge(name, result, reward_path, data, spec)

    def _judge(
        self,
        name: str,
        result: RunResult,
        reward_path: Path,
        data: dict[str, Any],
        spec: BundleSpec,
    ) -> bool:
        if result.timed_out:
            self._set(
                name,
                Status.FAILED,
                f"verifier timed out after {int(spec.verifier_timeout)}s and was killed",
                **data,
            )
            return False
        oom = f"killed for exceeding {spec.memory_mb} MB of memory"
        if not reward_path.is_file():
            if result.oom_killed:
                self._set(name, Status.FAILED, f"verifier was {oom}", **data)
                return False
            raise InfrastructureError(
                f"verifier wrote no reward.json (exit {result.exit_code}); "
                f"see {reward_path.parent.parent.parent / 'verifier.log'}"
            )
        self._stage(name).logs.append(str(reward_path))
        reward = json.loads(reward_path.read_text())
        data["reward"] = reward
        ok, detail = evaluate_gate(name, reward)
        if result.oom_killed:
            data["oomKilled"] = True
            detail += f" (a verifier process was {oom})"
        self._set(name, Status.PASSED if ok else Status.FAILED, detail, **data)
        return ok

    def _determinism(self, oracle_ok: bool) -> None:
        oracle = self._stage("oracle")
        reward = oracle.data.get("reward")
        if not oracle_ok or not isinstance(reward, dict):
            self._stage("determinism").detail = "skipped: oracle did not pass"
            return
        ok, detail = evaluate_gate("determinism", reward)
        self._set(
            "determinism",
            Status.PASSED if ok else Status.FAILED,
            detail,
            deterministic=reward.get("deterministic"),
            repeatExitCode=reward.get("fail_to_pass_repeat_exit_code"),
        )

    # ---- the end -----------------------------------------------------------------------

    def _finish(self) -> None:
        if self.engine is not None and not self.settings.keep:
            try:
                self.engine.cleanup_run()
                if self.settings.remove_images:
                    images = self.report.stages.build.data.get("images", {})
                    for image in images.values():
                        self.engine.remove_image(image["tag"])
            except Exception as exc:  # cleanup must not hide the verdict
                log.warning("cleanup failed: %s", exc)
        self.report.seconds = round(time.monotonic() - self.started, 3)
        self.report.verdict = decide_verdict(self.report)
        self.report.reason = verdict_reason(self.report)
        if self.interrupted:
            self.report.verdict = Verdict.INFRASTRUCTURE_FAILED
            self.report.reason = (
                "interrupted (Ctrl-C or SIGTERM); the run's containers were removed"
            )
        self.report.settings.update(
            {
                "baseImage": self.settings.base_image,
                "extraCaCerts": str(self.settings.extra_ca_certs)
                if self.settings.extra_ca_certs
                else None,
                "toolchainSources": {
                    k.value: v.value for k, v in self.settings.toolchains.sources.items()
                },
                "toolchainMirrors": {
                    k.value: v for k, v in self.settings.toolchains.mirrors.items()
                },
                "kept": self.kept,
            }
        )
        if self.engine is not None and self.engine.storage_probed():
            self.report.settings["storageLimit"] = (
                "enforced"
                if self.engine.storage_enforced()
                else f"not enforced (storage driver {self.engine.storage_driver} cannot limit "
                "container size here)"
            )
        if self.run_dir is not None:
            write_atomic(self.run_dir / "report.json", self.report.to_json())


def evaluate_gate(name: str, reward: dict[str, Any]) -> tuple[bool, str]:
    """Pass criteria from the seeds, with one sentence saying why."""

    def flag(key: str) -> int:
        value = reward.get(key)
        return int(value) if isinstance(value, int) else -1

    f2p_exit = reward.get("fail_to_pass_exit_code")
    p2p_exit = reward.get("pass_to_pass_exit_code")
    if flag("setup_completed") != 1:
        return False, "setup did not complete in the verifier image"
    if name == "nop":
        if flag("patch_applied") != 1:
            return False, "the empty agent patch or test.patch did not apply on the base snapshot"
        if flag("fail_to_pass") != 0:
            return False, "fail-to-pass tests already pass on the base snapshot"
        if flag("pass_to_pass") != 1:
            return False, f"pass-to-pass tests fail on the base snapshot (exit {p2p_exit})"
        return True, f"fail-to-pass fails (exit {f2p_exit}) and pass-to-pass passes on the base"
    if name == "oracle":
        if flag("patch_applied") != 1:
            return False, "the gold patch or test.patch does not apply"
        if flag("fail_to_pass") != 1:
            return False, f"fail-to-pass tests still fail with the gold patch (exit {f2p_exit})"
        if flag("pass_to_pass") != 1:
            return False, f"pass-to-pass tests fail with the gold patch (exit {p2p_exit})"
        return True, "the gold patch applies and every selected test passes"
    if flag("deterministic") != 1:
        return False, (
            "fail-to-pass passed once with the gold patch, then failed on the repeat "
            f"(exit {reward.get('fail_to_pass_repeat_exit_code')})"
        )
    return True, "fail-to-pass passed a second time with the gold patch"


def decide_verdict(report: Report) -> Verdict:
    statuses = [stage.status for _, stage in report.stages.items()]
    if report.verdict is Verdict.INVALID:
        return Verdict.INVALID
    if Status.FAILED in statuses:
        return Verdict.REJECTED
    if Status.ERROR in statuses:
        return Verdict.INFRASTRUCTURE_FAILED
    if all(status is Status.PASSED for status in statuses[2:]):
        return Verdict.ACCEPTED
    return Verdict.INFRASTRUCTURE_FAILED


def verdict_reason(report: Report) -> str:
    for name, stage in report.stages.items():
        if stage.status in (Status.FAILED, Status.ERROR):
            return f"{name}: {stage.detail}"
    return ""


def verify(target: Path, settings: VerifySettings, progress: Progress) -> Report:
    return Verifier(target, settings, progress).run()
