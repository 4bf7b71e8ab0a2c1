"""One verification a supervisor starts, and what it learns back: an exit code and the report."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runner.model.layout import RunLayout
from runner.model.report import Report
from runner.model.settings import SharedSettings
from runner.model.stages import Gate

# The exit codes verify gives (accepted, rejected, invalid, infrastructure); anything else
# (a signal, a crash before the CLI's own handling) means it did not end on its own terms.
VERIFY_CODES = frozenset({0, 1, 2, 3})
INTERRUPTED = 130


@dataclass(frozen=True, kw_only=True)
class VerifyJob:
    """`verify TARGET` with a run directory, a run id and an events file of the supervisor's
    choosing, the supervisor's own options, and where its output goes."""

    target: Path
    run_dir: Path
    run_id: str
    events: Path
    stderr: Path
    stdout: Path | None = None  # the --json report on stdout, or nowhere
    report: Path | None = None  # --report: a copy of report.json for the supervisor
    repo: str | None = None  # --repo: where the task's base commit is (None: its own)
    settings: SharedSettings | None = None  # the supervisor's checked settings (None: defaults)
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        args = [
            "verify",
            str(self.target),
            "--run-dir",
            str(self.run_dir),
            "--run-id",
            self.run_id,
            "--events",
            str(self.events),
        ]
        if self.report is not None:
            args += ["--report", str(self.report)]
        if self.repo is not None:
            args += ["--repo", self.repo]
        if self.settings is not None:
            args += ["--settings-json", self.settings.model_dump_json()]
        return [*args, "--json", "-q"]


@dataclass(frozen=True, kw_only=True)
class GradeJob:
    """`grade TARGET --patch PATCH` into a run directory and under a run id of the supervisor's
    choosing, with grade's own options (checked by the supervisor's command line, passed as
    arguments, never through a shell). Its result is <run_dir>/grade.json."""

    target: Path
    patch: Path
    run_dir: Path
    run_id: str
    stderr: Path
    options: tuple[str, ...] = ()
    stdout: Path | None = None
    report: Path | None = None  # grade writes no report.json: ChildResult reads none
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        return [
            Gate.GRADE.value,  # the command is named as its one gate
            str(self.target),
            "--patch",
            str(self.patch),
            "--run-dir",
            str(self.run_dir),
            "--run-id",
            self.run_id,
            *self.options,
            "--json",
            "-q",
        ]


Job = VerifyJob | GradeJob


def grade_arguments(settings: SharedSettings, *, reward_only: bool = False) -> tuple[str, ...]:
    """grade's options for a child, from a supervisor's checked settings (evaluate's, or a
    worker's own): what builds the images, the limits, and how the evidence is judged."""
    args = ["--base-image", settings.base_image]
    if settings.extra_ca_certs is not None:
        args += ["--extra-ca-certs", str(settings.extra_ca_certs.resolve())]
    for source in settings.sources:
        args += ["--toolchain-source", source]
    for mirror in settings.mirrors:
        args += ["--toolchain-mirror", mirror]
    if settings.build_network:
        args += ["--build-network", settings.build_network]
    args += ["--pids-limit", str(settings.pids_limit), "--max-log-size", str(settings.max_log_size)]
    args += ["--storage-limit", settings.storage_limit.value]
    args += ["--evidence-checks", settings.evidence_checks.value]
    if reward_only:
        args.append("--reward-only")
    return tuple(args)


@dataclass(frozen=True, kw_only=True)
class ChildResult:
    """How a verification ended: its exit code, the report it wrote (as the file holds it, and
    typed), and the last line of its stderr."""

    exit_code: int
    document: dict[str, Any] | None  # the report's JSON, passed on unchanged
    report: Report | None
    stderr_tail: str
    # The fork server that ran it was lost while it ran: the kernel stopped it (SIGTERM), so
    # what it left says nothing of the task. An infrastructure failure a supervisor retries.
    server_lost: bool = False

    @property
    def interrupted(self) -> bool:
        return self.exit_code == INTERRUPTED or bool(self.report and self.report.interrupted)

    @property
    def ended_on_its_terms(self) -> bool:
        """verify ran to one of its own exit codes and left a report."""
        return self.report is not None and self.exit_code in VERIFY_CODES

    @property
    def lost(self) -> bool:
        """Stopped by the loss of its fork server before it ended on its own terms."""
        return self.server_lost and (self.interrupted or not self.ended_on_its_terms)

    def failure(self) -> str:
        """Why there is no verdict to take."""
        if self.lost:
            return "the fork server was lost while verify ran; the kernel stopped verify"
        tail = f": {self.stderr_tail}" if self.stderr_tail else ""
        return f"verify exited {self.exit_code} without a report{tail}"

    @classmethod
    def read(cls, job: Job, exit_code: int, *, server_lost: bool = False) -> ChildResult:
        document = None
        for path in (job.report, RunLayout(job.run_dir).report, job.stdout):
            if path is not None and document is None:
                document = _report_document(path)
        report = None
        if document is not None:
            try:
                report = Report.model_validate(document)
            except ValidationError:
                document = None
        lines: list[str] = []
        with contextlib.suppress(OSError):
            lines = job.stderr.read_text(errors="replace").strip().splitlines()
        return cls(
            exit_code=exit_code,
            document=document,
            report=report,
            stderr_tail=lines[-1] if lines else "",
            server_lost=server_lost,
        )


def _report_document(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("verdict"):
            return data
    return None
