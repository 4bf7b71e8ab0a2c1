"""`grade`: the reward, what the patch policy undid and the per-test evidence for any agent patch,
through the exact fresh-verifier path the gates use (the hack gate's exploits take it too).

The target is a sealed bundle (an accepted run's `bundle/`, or one exported and unpacked) or a
run directory. The verifier grades by the bundle's census (tests/expected-tests.json): the test
ids its verification saw. A bundle without one is graded by the evidence rules alone, and the
result says so.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner import __version__
from runner.base.errors import ExitCode, InvalidTaskError, RunnerError, UsageError
from runner.base.safeio import optional_regular, read_regular, write_atomic
from runner.base.validation import safe_dir_name
from runner.compile.bundle import Bundle, is_bundle, load_bundle
from runner.compile.seal import SealBrokenError, copy_sealed, seal_problem
from runner.model.census import Census, read_census
from runner.model.evidence import EvidenceSummary, PolicyChange
from runner.model.harbor import read_task_toml
from runner.model.layout import MAX_REPORT_BYTES, BundleLayout, RunLayout
from runner.model.report import GateData, Status
from runner.model.reward import Reward, VerifierDetails
from runner.model.settings import MAX_AGENT_PATCH_BYTES, VerifySettings
from runner.run.state import StageResult

log = logging.getLogger(__name__)

GRADE_FILE = "grade.json"
GradeVerdict = Literal["rewarded", "not-rewarded", "invalid", "infrastructure_failed"]


class GradeReport(BaseModel):
    """What `grade --json` prints and writes to <run dir>/grade.json."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )

    schema_version: Literal[1] = 1
    task_id: str | None = None
    verdict: GradeVerdict
    detail: str
    reward: Reward | None = None
    details: VerifierDetails | None = None
    census: Literal["sealed", "unsealed"] = "unsealed"
    bundle: str | None = None
    patch: str | None = None
    patch_bytes: int | None = None
    undone: list[PolicyChange] = Field(default_factory=list)
    discarded: list[str] = Field(default_factory=list)
    evidence: EvidenceSummary | None = None
    # --reward-only: each run stopped at its first failed test (the evidence covers what ran).
    reward_only: bool = False
    logs: list[str] = Field(default_factory=list)
    run_id: str
    run_dir: str | None = None
    seconds: float = 0.0
    runner_version: str = __version__

    @property
    def exit_code(self) -> ExitCode:
        return {
            "rewarded": ExitCode.ACCEPTED,
            "not-rewarded": ExitCode.REJECTED,
            "invalid": ExitCode.INVALID,
            "infrastructure_failed": ExitCode.INFRASTRUCTURE,
        }[self.verdict]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


@dataclass(frozen=True, kw_only=True)
class GradeTarget:
    bundle: Bundle
    census: Census | None


def target_root(target: Path) -> Path:
    """The bundle directory TARGET names: itself, or a run directory's own bundle (whatever
    its report names). Nothing of it is read yet."""
    if is_bundle(target):
        return target
    if RunLayout(target).report.is_file():
        try:
            report = json.loads(read_regular(RunLayout(target).report, limit=MAX_REPORT_BYTES))
        except (ValueError, InvalidTaskError):
            raise UsageError("report.json is not readable", path=str(target)) from None
        if not isinstance(report, dict):
            raise UsageError("report.json is not an object", path=str(target))
        # A run fetched from a fleet's store (or unpacked from a CI artifact) names the bundle
        # where it ran: it is in this copy now, never in whatever that path holds here; and a
        # report naming another bundle on this host is refused.
        named = RunLayout(target).own_bundle(report.get("bundle"), report.get("runDir"))
        if named.is_symlink() or not is_bundle(named):
            raise UsageError(
                "the run's bundle is gone (its report names none that exists)", path=str(target)
            )
        return named
    raise UsageError(
        "is neither a compiled bundle (task.toml) nor a run directory (report.json)",
        path=str(target),
    )


def resolve_target(target: Path, *, unsealed: bool = False) -> GradeTarget:
    """The bundle to grade with: TARGET itself, or the bundle a run directory's report names;
    one whose files do not match its seal is refused unless `unsealed` (a bundle is files
    anyone may edit: a test.sh that writes reward 1, a task.toml asking for a million MB)."""
    bundle = load_bundle(target_root(target))
    if not unsealed:
        problem = seal_problem(bundle.root)
        if problem is not None:
            raise UsageError(
                f"the bundle does not match its seal: {problem}; grade a bundle as an accepted "
                "verification left it, or pass --unsealed to grade it anyway",
                path=str(bundle.root),
            )
    census = read_census(optional_regular(BundleLayout(bundle.root).census, limit=64 * 1024 * 1024))
    return GradeTarget(bundle=bundle, census=census)


def _sealed_copy(root: Path, out: Path) -> GradeTarget:
    """The sealed bundle at `root` copied to `out` through sealed_files (each file taken only
    as sealed, its mode bits kept but for write by others), and the grade's target read from
    that copy. UsageError when anything differs from the seal."""
    try:
        copy_sealed(root, out)
    except (SealBrokenError, InvalidTaskError) as exc:
        raise UsageError(
            f"the bundle does not match its seal: {exc.message}", path=str(root)
        ) from None
    census = read_census(optional_regular(BundleLayout(out).census, limit=64 * 1024 * 1024))
    return GradeTarget(bundle=load_bundle(out), census=census)


def _copy_or_leave(root: Path, run_dir: Path, *, made: bool) -> GradeTarget:
    """The sealed copy in the grade's run directory; on a seal that does not hold, nothing of
    the grade is left (the run directory too, when this grade made it)."""
    try:
        return _sealed_copy(root, RunLayout(run_dir).bundle)
    except UsageError:
        shutil.rmtree(run_dir if made else RunLayout(run_dir).bundle, ignore_errors=True)
        raise


def read_patch(path: Path) -> bytes:
    try:
        return read_regular(path, limit=MAX_AGENT_PATCH_BYTES)
    except InvalidTaskError as exc:
        raise UsageError(exc.message, path=str(path), field="--patch") from None


def grade(
    target: Path,
    patch_path: Path,
    settings: VerifySettings,
    *,
    progress: object = None,
    unsealed: bool = False,
    run_id: str | None = None,
) -> GradeReport:
    """Grade one patch. Raises UsageError for bad arguments; every other outcome is a report."""
    from runner.plan.types import RunIdentity
    from runner.plan.verify import plan_verify
    from runner.run.executor import Executor
    from runner.run.pipeline import _docker_engine, _owner, default_env, new_run_id
    from runner.run.rundir import make_run_dir, run_log

    started = time.monotonic()
    root = target_root(target)
    # --unsealed grades the bundle in place; else what is graded is a copy of this grade's own,
    # made by one checked read of the seal (a file swapped at the bundle once its seal was
    # checked is never graded), and the bundle is read once for it: its task.toml alone names
    # the run directory.
    resolved = resolve_target(target, unsealed=True) if unsealed else None
    task_id = resolved.bundle.task_id if resolved else read_task_toml(root).task_id
    patch = read_patch(patch_path)
    run_id = run_id or new_run_id()
    run_dir = make_run_dir(settings, safe_dir_name(task_id), f"grade-{run_id}", root)
    if resolved is None:
        resolved = _copy_or_leave(root, run_dir, made=settings.run_dir is None)
    bundle = resolved.bundle
    report = GradeReport(
        task_id=bundle.task_id,
        verdict="infrastructure_failed",
        detail="not run",
        census="sealed" if resolved.census else "unsealed",
        bundle=str(root),
        patch=str(patch_path),
        patch_bytes=len(patch),
        reward_only=settings.reward_only,
        run_id=run_id,
        run_dir=str(run_dir),
    )
    with run_log(run_dir, limit=settings.max_log_bytes):
        log.info("selfbench-runner %s grade %s --patch %s", __version__, target, patch_path)
        try:
            engine = _docker_engine()
        except RunnerError as exc:
            report.detail = exc.one_line()
            return _finish(report, run_dir, started)
        try:
            plan = plan_verify(
                resolved.bundle,
                settings,
                engine.facts(),
                RunIdentity(run_id=run_id, owner=_owner()),
            )
            RunLayout(run_dir).plan.write_text(plan.to_json())
            executor = Executor(
                plan,
                engine,
                run_dir=run_dir,
                env=default_env(settings),
                progress=progress if callable(progress) else (lambda stage, line: None),
            )
            build, graded = executor.grade(patch, resolved.census)
        except RunnerError as exc:
            report.detail = exc.one_line()
            report.verdict = "invalid" if exc.exit_code is ExitCode.INVALID else report.verdict
            return _finish(report, run_dir, started)
        finally:
            engine.close()
    return _graded(report, build, graded, run_dir, started)


def _graded(
    report: GradeReport, build: StageResult, graded: StageResult, run_dir: Path, started: float
) -> GradeReport:
    """The report of a grade whose build and verifier ran."""
    if build.status is not Status.PASSED:
        report.detail = f"build: {build.detail}"
        report.verdict = "invalid" if build.status is Status.FAILED else "infrastructure_failed"
        report.logs = list(build.logs)
        return _finish(report, run_dir, started)
    data = graded.data if isinstance(graded.data, GateData) else GateData()
    report.detail = graded.detail
    report.reward = data.reward
    report.details = data.details
    report.undone = data.undone
    report.discarded = data.discarded
    report.evidence = data.evidence
    report.logs = list(dict.fromkeys(graded.logs))
    if graded.status is Status.PASSED:
        report.verdict = "rewarded"
    elif graded.status is Status.FAILED:
        report.verdict = "not-rewarded"
    return _finish(report, run_dir, started)


def _finish(report: GradeReport, run_dir: Path, started: float) -> GradeReport:
    report.seconds = round(time.monotonic() - started, 3)
    write_atomic(run_dir / GRADE_FILE, report.to_json())
    return report
