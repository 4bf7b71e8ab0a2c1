"""A fake engine for the executor's unit tests: it implements runner.plan.runtime.Engine in memory
and plays a script (what each exec returns, what it writes, what it raises). Integration tests
use the real engine; this one only lets the executor's logic be tested without Docker."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.base.logs import Truncation
from runner.plan.labels import LABEL_FROM_ID
from runner.plan.runtime import (
    ArchiveToPut,
    BuildOutcome,
    BuildRequest,
    ExecOutcome,
    ImageInfo,
    ToPut,
)
from runner.plan.types import ContainerPlan, EngineFacts, ExecStep, ServicePlan

NOP_REWARD = {
    "reward": 0,
    "patch_applied": 1,
    "fail_to_pass": 0,
    "pass_to_pass": 1,
    "deterministic": 0,
    "setup_completed": 1,
}
ORACLE_REWARD = {**NOP_REWARD, "reward": 1, "fail_to_pass": 1, "deterministic": 1}
DETAILS = {
    "fail_to_pass_exit_code": 1,
    "fail_to_pass_repeat_exit_code": -1,
    "pass_to_pass_exit_code": 0,
    "fail_to_pass_ms": 5,
    "fail_to_pass_repeat_ms": 0,
    "pass_to_pass_ms": 5,
    "pids_limit_hits": 0,
    "oom_kills": 0,
    "truncated_logs": 0,
}

# What a scripted exec does: returns an outcome, and may write files into the container.
Action = Callable[["FakeContainer", ExecStep], ExecOutcome]


def ok(container: FakeContainer, step: ExecStep) -> ExecOutcome:
    return ExecOutcome(exit_code=0, seconds=0.01)


def exits(code: int) -> Action:
    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        return ExecOutcome(exit_code=code, seconds=0.01)

    return action


def raises(exc: BaseException) -> Action:
    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        raise exc

    return action


def runs_until_removed(seconds: float) -> Action:
    """A command that takes `seconds`, or ends (killed, exit 137) as soon as its container is
    removed, as a real engine's exec does."""

    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if container.name not in container.engine.live:
                return ExecOutcome(exit_code=137, seconds=0.01)
            time.sleep(0.02)
        return ExecOutcome(exit_code=0, seconds=seconds)

    return action


def writes_reward(reward: Mapping[str, int], details: Mapping[str, int] = DETAILS) -> Action:
    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        container.files["/logs/verifier/reward.json"] = json.dumps(reward).encode()
        container.files["/logs/verifier/details.json"] = json.dumps(details).encode()
        return ExecOutcome(exit_code=0, seconds=0.02)

    return action


@dataclass
class Script:
    """Actions by `<gate>/<step>` (e.g. `nop/verifier`, `oracle/agent`, `smoke/smoke`)."""

    actions: dict[str, Action] = field(default_factory=dict)
    build_fails: str | None = None  # the kind whose build fails (task at fault)
    service_states: dict[str, list[str]] = field(default_factory=dict)  # health, in turn
    create_raises: dict[str, BaseException] = field(default_factory=dict)  # by container role/gate
    said: dict[str, str] = field(default_factory=dict)  # what a `<gate>/<step>` prints, its log's

    def action(self, gate: str, step: str) -> Action:
        if f"{gate}/{step}" in self.actions:
            return self.actions[f"{gate}/{step}"]
        if step == "verifier":
            return writes_reward(ORACLE_REWARD if gate in ("oracle", "determinism") else NOP_REWARD)
        if step == "collect":
            return collect_patch(b"diff --git a/x b/x\n" if gate in ("oracle", "hack") else b"")
        if step == "driver":
            return drive_exploits(b"diff --git a/x b/x\n")
        return ok


def drive_exploits(patch: bytes) -> Action:
    """The hack gate's driver: each exploit (its name after the driver's own arguments) ran and
    ended 0, and `patch` is what was collected after it."""

    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        from runner.plan.inimage import HACK_OUT

        names = step.argv[6:]
        rows = []
        for name in names:
            container.files[f"{HACK_OUT}/logs/{name}.log"] = f"{name} ran\n".encode()
            container.files[f"{HACK_OUT}/patches/{name}.patch"] = patch
            rows.append(f"{name}\t0\t0\t10\t0\n")
        container.files[f"{HACK_OUT}/status.tsv"] = "".join(rows).encode()
        return ExecOutcome(exit_code=0, seconds=0.01)

    return action


def collect_patch(patch: bytes) -> Action:
    def action(container: FakeContainer, step: ExecStep) -> ExecOutcome:
        container.files["/opt/selfbench/agent.patch"] = patch
        return ExecOutcome(exit_code=0, seconds=0.01)

    return action


class FakeContainer:
    def __init__(self, engine: FakeEngine, plan: ContainerPlan) -> None:
        self.engine = engine
        self.plan = plan
        self.name = plan.name
        self.storage_mechanism = "watchdog"
        self.files: dict[str, bytes] = {}
        self.archives: list[tuple[str, bytes]] = []
        self.gate = plan.labels["org.selfbench.kind"]

    def exec(self, step: ExecStep, log_path: Path, *, limit: int) -> ExecOutcome:
        # The smoke check is scripted as `smoke/smoke` wherever it runs (in a container of its
        # own, or in the nop verifier's).
        gate = "smoke" if step.name == "smoke" else self.gate
        self.engine.record(f"exec {gate}/{step.name} as {step.user} in {self.plan.name}")
        outcome = self.engine.script.action(gate, step.name)(self, step)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as handle:
            handle.write(f"ran {' '.join(step.argv)}\n")
            handle.write(self.engine.script.said.get(f"{gate}/{step.name}", ""))
        return outcome

    def connect(self, network: str) -> None:
        self.engine.record(f"connect {self.gate}/{self.plan.role} {network}")

    def put_file(self, directory: str, name: str, data: bytes, *, mode: int = 0o644) -> None:
        self.files[f"{directory}/{name}"] = data

    def put_files(self, files: Sequence[tuple[str, str, bytes, int]]) -> None:
        for directory, name, data, _mode in files:
            self.files[f"{directory}/{name}"] = data

    def put_directory(self, source: Path, destination: str) -> None:
        for path in source.rglob("*"):
            if path.is_file():
                self.files[f"{destination}/{path.relative_to(source)}"] = path.read_bytes()

    def put_archive(self, directory: str, data: bytes) -> None:
        self.archives.append((directory, data))
        self.engine.record(f"archive into {self.plan.name} at {directory}: {data!r}")

    def get_file(self, path: str, *, limit: int) -> bytes | None:
        return self.files.get(path)

    def copy_out(self, path: str, destination: Path, *, limit: int) -> list[Truncation] | None:
        found = {k: v for k, v in self.files.items() if k.startswith(path + "/")}
        if not found:
            return None
        top = path.rsplit("/", 1)[-1]
        for name, data in found.items():
            target = destination / top / name[len(path) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return []

    def storage_used_mb(self) -> int | None:
        return 0

    def enter_hint(self) -> str:
        return f"docker exec -it {self.name} bash"


class FakeService:
    def __init__(self, name: str, states: list[str]) -> None:
        self.name = name
        self.states = states

    def health(self) -> str:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def save_logs(self, path: Path, *, limit: int) -> list[str]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{self.name} log line\n")
        return [f"{self.name} log line"]


class FakeEngine:
    def __init__(self, script: Script | None = None, *, ncpu: int = 2) -> None:
        self.script = script or Script()
        self.ncpu = ncpu
        self.images: dict[str, ImageInfo] = {"base:1": ImageInfo(id="sha256:base", labels={})}
        self.events: list[str] = []
        self.live: set[str] = set()
        self.removed: list[str] = []
        self.cleanups: list[Mapping[str, str]] = []
        self._lock = threading.Lock()

    def record(self, event: str) -> None:
        with self._lock:
            self.events.append(event)

    def facts(self) -> EngineFacts:
        return EngineFacts(ncpu=self.ncpu, arch="amd64", storage_quota=False)

    def image(self, ref: str) -> ImageInfo | None:
        return self.images.get(ref)

    def pull(self, ref: str) -> ImageInfo:
        from runner.base.errors import EngineError

        raise EngineError(f"pull access denied for {ref}")

    def build(
        self, request: BuildRequest, log_path: Path, *, limit: int, on_line: Callable[[str], None]
    ) -> BuildOutcome:
        kind = request.labels.get("org.selfbench.kind", "?")
        self.record(f"build {kind}")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"Step 1/1 : RUN setup for {kind}\n")
        if self.script.build_fails == kind:
            return BuildOutcome(
                ok=False,
                failed_step="RUN chmod 0755 /opt/selfbench-environment/setup.sh && setup",
                exit_code=3,
                error="The command returned a non-zero code: 3",
                tail=["broken setup"],
                last_layer="abc123abc123",
            )
        image_id = f"sha256:{kind}"
        self.images[request.tag] = ImageInfo(
            id=image_id, labels={LABEL_FROM_ID: request.labels[LABEL_FROM_ID]}
        )
        return BuildOutcome(ok=True, image_id=image_id, total_steps=1)

    @contextlib.contextmanager
    def container(
        self,
        plan: ContainerPlan,
        *,
        env: Mapping[str, str],
        keep: bool,
        files: Sequence[ToPut] = (),
    ) -> Iterator[FakeContainer]:
        role = plan.labels.get("org.selfbench.side", "smoke")
        key = f"{plan.labels['org.selfbench.kind']}/{role}"
        self.record(f"create {key}")
        self.record(f"network of {key}: {plan.network}")
        if key in self.script.create_raises:
            raise self.script.create_raises[key]
        container = FakeContainer(self, plan)
        for file in files:
            if isinstance(file, ArchiveToPut):
                container.put_archive(file.directory, file.data)
            else:
                container.put_file(file.directory, file.name, file.data, mode=file.mode)
        with self._lock:
            self.live.add(plan.name)
        try:
            yield container
        finally:
            if not keep:
                with self._lock:
                    self.live.discard(plan.name)
                    self.removed.append(plan.name)

    @contextlib.contextmanager
    def network(self, name: str, *, labels: Mapping[str, str], keep: bool) -> Iterator[str]:
        self.record(f"network {name}")
        yield name
        self.record(f"network removed {name}")

    @contextlib.contextmanager
    def service(self, plan: ServicePlan, *, network: str, keep: bool) -> Iterator[FakeService]:
        self.record(f"service {plan.name} on {network}")
        self.record(f"service container {plan.container}")
        yield FakeService(plan.name, self.script.service_states.get(plan.name, ["healthy"]))
        self.record(f"service removed {plan.name}")

    def remove_image(self, ref: str) -> None:
        self.images.pop(ref, None)

    def cleanup(self, labels: Mapping[str, str], *, images: bool = False) -> int:
        self.cleanups.append(dict(labels))
        with self._lock:
            count = len(self.live)
            self.live.clear()
        return count

    def close(self) -> None:
        pass
