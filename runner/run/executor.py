"""Carry out a VerifyPlan on an engine the caller provides; return the stages' results.

Order: build -> smoke -> nop -> oracle -> determinism. A stage that does not pass skips what
depends on it (build and smoke gate everything after them; the oracle gates determinism; nop
and oracle run independently so an author sees both). A RunnerError becomes the stage's status
(`error` for infrastructure), any other exception `error` with its traceback in the run log, and
Ctrl-C/SIGTERM marks the running stage interrupted. The run's containers are removed on every
path unless the plan keeps them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from runner.base.errors import (
    Interrupted,
)
from runner.model.report import (
    Status,
)
from runner.run.hack import HackStage
from runner.run.state import HACK_DISABLED, HACK_NONE, Execution


class Executor(HackStage):
    def run(self) -> Execution:
        """build, then smoke, both agent sides and the hack gate's at once (the verifier
        containers start meanwhile), then the two verifiers once smoke passed; determinism once
        the oracle passed, the hack gate's verifiers once nop did."""
        interrupted: str | None = None
        pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gate")
        try:
            self._stage("build", self._build)
            if self.stages["build"].status is Status.PASSED:
                # The oracle's agent side is the longest path: it starts first.
                futures = [pool.submit(self._oracle_and_determinism), pool.submit(self._nop)]
                if self.plan.hack is not None:
                    futures.append(pool.submit(self._stage, "hack", self._hack))
                else:
                    self.stages["hack"].detail = HACK_NONE if self.plan.hack_gate else HACK_DISABLED
                if self.plan.smoke.container is not None:
                    futures.append(pool.submit(self._run_smoke))
                for future in futures:
                    future.result()
            else:
                for name in ("smoke", "nop", "oracle", "hack"):
                    self.stages[name].detail = "skipped: build did not pass"
                self.stages["determinism"].detail = "skipped: oracle did not pass"
        except (KeyboardInterrupt, Interrupted) as exc:
            interrupted = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
            self._interrupted.set()
        finally:
            self._smoke_done.set()
            self._nop_done.set()
            self._census_ready.set()
            self._cleanup()
            pool.shutdown(wait=interrupted is None, cancel_futures=True)
            self._opener.shutdown(wait=interrupted is None, cancel_futures=True)
        if interrupted is not None:
            with self._lock:
                running = set(self._running)
            for name, stage in self.stages.items():
                if name in running:
                    stage.set(
                        Status.ERROR,
                        f"interrupted ({interrupted}); the run's containers were removed",
                    )
                elif stage.detail == "not run":
                    stage.detail = "skipped: interrupted"
        return Execution(
            stages=self.stages,
            kept=self.kept,
            interrupted=interrupted,
            storage_mechanism=self.storage_mechanism,
            census=self._census,
        )
