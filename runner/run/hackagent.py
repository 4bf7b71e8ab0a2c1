"""The hack gate's agent side: every exploit's script as the agent on the post-setup tree, its
patch collected and the tree reset after it, all in one exec of the driver
(runner.plan.inimage.HACK_DRIVER_SCRIPT) in one agent container; then everything it left
(each script's log, each patch, the status of each) read out at once."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from runner.base.errors import InfrastructureError
from runner.compile.exploits import NOT_APPLICABLE
from runner.model.layout import AGENT_PATCH_FILE
from runner.model.settings import MAX_AGENT_PATCH_BYTES
from runner.model.stages import Stage
from runner.plan.inimage import DRIVER_RESET_FAILED, HACK_IN, HACK_OUT
from runner.plan.runtime import Container, ExecOutcome
from runner.plan.types import ExploitPlan
from runner.run import collect as left
from runner.run.remembered import RememberedSide, log_tail
from runner.run.state import ExploitSide, RunState, StageResult

SCRIPT_LOG = "exploit.log"
COLLECT_LOG = "collect.log"


def _scripts(exploits: list[ExploitPlan]) -> bytes:
    """A tar of HACK_IN (unpacked into its parent, which exists) with each exploit's script as
    `<name>.sh`, root's alone: the driver reads them and hands each to the agent's shell."""
    folder = PurePosixPath(HACK_IN).name
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        directory = tarfile.TarInfo(folder)
        directory.type, directory.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(directory)
        for exploit in exploits:
            data = exploit.run.argv[-1].encode()
            info = tarfile.TarInfo(f"{folder}/{exploit.name}.sh")
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _status(path: Path) -> dict[str, tuple[int, bool, float, int]]:
    """status.tsv: by exploit, (exit code, hit its deadline, seconds, collect status or -1)."""
    rows: dict[str, tuple[int, bool, float, int]] = {}
    if not path.is_file():
        return rows
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 5:
            continue
        name, code, timed, ms, collected = parts
        try:
            rows[name] = (int(code), timed == "1", int(ms) / 1000, int(collected))
        except ValueError:
            continue
    return rows


class ExploitAgent:
    def __init__(self, state: RunState) -> None:
        self.state = state

    def run_all(
        self, agent: Container, stage: StageResult, exploits: list[ExploitPlan]
    ) -> dict[str, ExploitSide]:
        """The side of each of `exploits`, in their order (one exec)."""
        plan = self.state.plan.hack
        assert plan is not None
        hack_dir = self.state.layout.stage(Stage.HACK)
        hack_dir.mkdir(parents=True, exist_ok=True)
        agent.put_archive(str(PurePosixPath(HACK_IN).parent), _scripts(exploits))
        driver = plan.driver.model_copy(
            update={"argv": [*plan.driver.argv, *(e.name for e in exploits)]}
        )
        log = self.agent_log(stage)
        ran = agent.exec(driver, log, limit=self.state.plan.max_log_bytes)
        staging = hack_dir / ".agent-side"
        try:
            return self._sides(exploits, agent, ran, staging, log, stage)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def agent_log(self, stage: StageResult) -> Path:
        log = self.state.layout.stage(Stage.HACK) / "agent.log"
        if str(log) not in stage.logs:
            log.parent.mkdir(parents=True, exist_ok=True)
            stage.logs.append(str(log))
        return log

    def adopt(
        self, exploit: ExploitPlan, remembered: RememberedSide, stage: StageResult
    ) -> ExploitSide:
        """The side an earlier run saw (runner.run.remembered), its logs and patch in place as
        if the driver had left them."""
        directory = self.state.layout.gate(exploit.trial.gate)
        directory.mkdir(parents=True, exist_ok=True)
        script_log = directory / SCRIPT_LOG
        script_log.write_bytes(remembered.script_log)
        stage.logs.append(str(script_log))
        if remembered.collected >= 0 and remembered.collect_log:
            (directory / COLLECT_LOG).write_bytes(remembered.collect_log)
        return self._made(
            exploit,
            remembered.exit_code,
            False,
            remembered.seconds,
            remembered.collected,
            remembered.patch,
            stage,
        )

    def remembers(self, exploit: ExploitPlan, side: ExploitSide) -> RememberedSide | None:
        """What of `side` a later run may take as its own (runner.run.remembered): a script
        that exited 0 with its patch collected, or one that does not apply; None otherwise."""
        code = side.script.exit_code
        if side.script.timed_out or code is None:
            return None
        if code == NOT_APPLICABLE and side.patch is None and not side.collect_failed:
            collected = -1
        elif code == 0 and side.patch is not None and not side.collect_failed:
            collected = 0
        else:
            return None
        directory = self.state.layout.gate(exploit.trial.gate)
        return RememberedSide(
            exit_code=code,
            seconds=side.script.seconds,
            collected=collected,
            patch=side.patch,
            script_log=log_tail(directory / SCRIPT_LOG),
            collect_log=log_tail(directory / COLLECT_LOG),
        )

    def _sides(
        self,
        exploits: list[ExploitPlan],
        agent: Container,
        ran: ExecOutcome,
        staging: Path,
        log: Path,
        stage: StageResult,
    ) -> dict[str, ExploitSide]:
        out = PurePosixPath(HACK_OUT)
        limit = self.state.plan.max_log_bytes
        stage.truncated.extend(agent.copy_out(str(out / "logs"), staging, limit=limit) or [])
        truncated = agent.copy_out(str(out / "patches"), staging, limit=MAX_AGENT_PATCH_BYTES)
        if truncated:
            raise InfrastructureError(
                f"an exploit's patch is larger than {MAX_AGENT_PATCH_BYTES} bytes: "
                f"{truncated[0].path}"
            )
        status_tsv = agent.get_file(str(out / "status.tsv"), limit=1 << 20) or b""
        (staging / "status.tsv").write_bytes(status_tsv)
        rows = _status(staging / "status.tsv")
        if ran.timed_out or ran.exit_code != 0:
            last = list(rows)[-1] if rows else "the first exploit"
            what = (
                "timed out"
                if ran.timed_out
                else "could not reset the tree"
                if ran.exit_code == DRIVER_RESET_FAILED
                else f"exited {ran.exit_code}"
            )
            raise InfrastructureError(f"the hack gate's agent side {what} after {last}; see {log}")
        sides = {}
        for exploit in exploits:
            sides[exploit.name] = self._side(exploit, rows.get(exploit.name), staging, stage)
        return sides

    def _side(
        self,
        exploit: ExploitPlan,
        row: tuple[int, bool, float, int] | None,
        staging: Path,
        stage: StageResult,
    ) -> ExploitSide:
        if row is None:
            raise InfrastructureError(
                f"the hack gate's agent side left no status of {exploit.name}"
            )
        code, timed_out, seconds, collected = row
        directory = self.state.layout.gate(exploit.trial.gate)
        directory.mkdir(parents=True, exist_ok=True)
        script_log = directory / SCRIPT_LOG
        found = staging / "logs" / f"{exploit.name}.log"
        if found.is_file():
            shutil.move(found, script_log)
        else:
            script_log.write_bytes(b"")
        stage.logs.append(str(script_log))
        collect_log = staging / "logs" / f"{exploit.name}.collect.log"
        if collect_log.is_file():
            shutil.move(collect_log, directory / COLLECT_LOG)
        patch_file = staging / "patches" / f"{exploit.name}.patch"
        patch = patch_file.read_bytes() if collected == 0 and patch_file.is_file() else b""
        return self._made(exploit, code, timed_out, seconds, collected, patch, stage)

    def _made(
        self,
        exploit: ExploitPlan,
        code: int,
        timed_out: bool,
        seconds: float,
        collected: int,
        patch: bytes | None,
        stage: StageResult,
    ) -> ExploitSide:
        directory = self.state.layout.gate(exploit.trial.gate)
        script = ExecOutcome(exit_code=code, seconds=seconds, timed_out=timed_out)
        side = ExploitSide(script=script, said=left.last_meaningful(directory / SCRIPT_LOG))
        if collected >= 0:
            side.collect_failed = collected != 0
        if collected == 0:
            side.patch = patch or b""
            (directory / AGENT_PATCH_FILE).write_bytes(side.patch)
        return side
