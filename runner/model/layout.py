"""Where things are in a run directory and in a bundle: every path and file name of each, in one
place (pure: paths are made, never touched)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import UsageError
from runner.model.stages import Gate, Stage

REPORT_FILE = "report.json"
REPORT_HTML_FILE = "report.html"
PLAN_FILE = "plan.json"
RUN_LOG_FILE = "runner.log"
AGENT_PATCH_FILE = "agent.patch"
SMOKE_LOG = "smoke.log"
CENSUS_FILE = "expected-tests.json"
CANARY_FILE = "canaries.json"
SMOKE_SCRIPT_FILE = "smoke.sh"
TASK_TOML_FILE = "task.toml"
AUTHORED_DIR = "task"
# The compiler's record beside Harbor's files (runner.model.manifest), and the seal.
MANIFEST_FILE = ".selfbench-manifest.json"
INSTRUCTION_FILE = "instruction.md"
DOCKERFILE = "Dockerfile"
BUNDLE_DIR = "bundle"  # a run's sealed bundle, in its run directory
# The most a reader takes of a run's report.json or plan.json (files others may have written).
MAX_REPORT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RunLayout:
    """A run directory: its report, plan and log, a directory per stage that writes files, and
    one per gate (`nop`, `oracle`, `hack/<exploit>`, `determinism/probe-N`, `grade`), each
    holding the patch its agent side made and what its verifier left."""

    root: Path

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    def here(self, recorded: str, recorded_root: object) -> Path:
        """A path the report recorded, in this run directory: a run moved since (a CI artifact
        unpacked elsewhere, a fleet's run fetched from its store) names its files under the
        directory it ran in (`recorded_root`, the report's runDir); they are here now. A path
        outside that directory is left as it is."""
        path = Path(recorded)
        if isinstance(recorded_root, str) and recorded_root and path.is_absolute():
            old = Path(recorded_root)
            if path.is_relative_to(old) and old != self.root:
                return self.root / path.relative_to(old)
        return path

    @property
    def bundle(self) -> Path:
        return self.root / BUNDLE_DIR

    def own_bundle(self, named: object, recorded_root: object) -> Path:
        """The run's own bundle (<run>/bundle), whatever its report names. A report.json is a
        file anyone may edit: one naming a bundle elsewhere that is there (a host directory,
        another run's bundle) is refused, UsageError on field `bundle`; one that is gone is a
        run moved since, whose bundle is its own."""
        own = self.bundle
        if isinstance(named, str) and named:
            path = self.here(named, recorded_root)
            try:
                elsewhere = path.exists() and path.resolve() != own.resolve()
            except OSError as exc:  # a name too long, a directory this user cannot enter
                raise UsageError(
                    f"names a bundle that cannot be looked at ({exc.strerror})",
                    path=str(self.report),
                    field="bundle",
                ) from None
            if elsewhere:
                raise UsageError(
                    f"names a bundle outside its run directory ({str(path)[:200]})",
                    path=str(self.report),
                    field="bundle",
                )
        return own

    @property
    def report_html(self) -> Path:
        return self.root / REPORT_HTML_FILE

    @property
    def plan(self) -> Path:
        return self.root / PLAN_FILE

    @property
    def runner_log(self) -> Path:
        return self.root / RUN_LOG_FILE

    @property
    def authored(self) -> Path:
        """The authored task as it was verified (definition.json, the patches, instruction.md):
        what a verification round's reviewer and fix start from."""
        return self.root / AUTHORED_DIR

    def stage(self, stage: Stage) -> Path:
        return self.root / stage.value

    def gate(self, gate: str) -> Path:
        """A gate's directory: a Gate, or a gate below one (Gate.below)."""
        return self.root / gate

    def verifier_logs(self, gate: str) -> Path:
        """What a gate's verifier left: its logs, its evidence and its reward."""
        return self.gate(gate) / "logs" / "verifier"

    def agent_patch(self, gate: str) -> Path:
        return self.gate(gate) / AGENT_PATCH_FILE

    def exploit(self, name: str) -> Path:
        return self.gate(Gate.HACK.below(name))


# The most files a bundle this runner renders holds, with room (a task's files, its
# Dockerfiles and scripts, the helper and its hooks): a walk of one stops past it.
MAX_BUNDLE_FILES = 10_000


@dataclass(frozen=True)
class BundleLayout:
    """A Harbor bundle: task.toml and the instruction at its root, the verifier's files under
    tests/ (test.sh, the smoke script, the census), the oracle's under solution/, each image's
    build context under environment/."""

    root: Path

    @property
    def task_toml(self) -> Path:
        return self.root / TASK_TOML_FILE

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_FILE

    @property
    def instruction(self) -> Path:
        return self.root / INSTRUCTION_FILE

    @property
    def tests(self) -> Path:
        return self.root / "tests"

    @property
    def census(self) -> Path:
        return self.tests / CENSUS_FILE

    @property
    def canaries(self) -> Path:
        return self.tests / CANARY_FILE

    @property
    def smoke_script(self) -> Path:
        return self.tests / SMOKE_SCRIPT_FILE

    @property
    def solution(self) -> Path:
        return self.root / "solution"

    def dockerfile(self, context: str) -> Path:
        return self.root / context / DOCKERFILE
