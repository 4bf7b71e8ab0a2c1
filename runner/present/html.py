"""report.html: the report a person looks at (pure rendering; the run's files are read by
runlogs.report_view). One self-contained file: inline CSS, no script, no external reference.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from functools import cache

import jinja2
from markupsafe import Markup

from runner.compile.templatecache import bytecode_cache
from runner.model.report import GateData, Report, Status
from runner.model.stages import Stage

# Where a failing build step comes from, by what its text runs.
STEP_SOURCES = (
    ("/opt/selfbench-environment/root-setup.sh", "environment.rootSetupCommand"),
    ("/opt/selfbench-environment/setup.sh", "setupCommand"),
    (
        "selfbench-dependency-setup.patch",
        "the dependency-setup pass (gold.patch changes a dependency manifest)",
    ),
)
_TOOLCHAIN_STEP = re.compile(r"/opt/selfbench-toolchains/([a-z]+)\.sh")
_ANSI = re.compile(r"\x1b\[([0-9;]*)([A-Za-z])")
_COLOURS = {
    30: "#000",
    31: "#c0392b",
    32: "#1e8449",
    33: "#b7950b",
    34: "#2e59a8",
    35: "#8e44ad",
    36: "#138d90",
    37: "#666",
    90: "#777",
    91: "#e74c3c",
    92: "#27ae60",
    93: "#d4ac0d",
    94: "#3b73d1",
    95: "#a569bd",
    96: "#17a5a8",
    97: "#999",
}
GATE_COMMANDS = (
    ("fail-to-pass", "fail_to_pass_exit_code", "fail_to_pass_ms"),
    ("fail-to-pass, again", "fail_to_pass_repeat_exit_code", "fail_to_pass_repeat_ms"),
    ("pass-to-pass", "pass_to_pass_exit_code", "pass_to_pass_ms"),
)


@dataclass(frozen=True, kw_only=True)
class Excerpt:
    path: str  # relative to the run directory when inside it
    lines: list[str]
    cut: int = 0  # earlier lines left out


@dataclass(frozen=True, kw_only=True)
class BuildSource:
    dockerfile: str  # the bundle's Dockerfile the step is in
    line: int | None  # its line number there
    field: str  # the definition field (or runner part) the step comes from


@dataclass(frozen=True, kw_only=True)
class Failure:
    """What the page opens on for a red run (runner.present.failure reads it)."""

    stage: str  # the first red stage
    detail: str
    run: str | None = None  # the test run whose failure made it red (fail_to_pass, ...)
    tests: list[str] = field(default_factory=list)  # its failing tests
    excerpt: list[str] = field(default_factory=list)  # its output where it says why
    excerpt_path: str | None = None  # that output's file, relative to the run directory
    links: list[str] = field(default_factory=list)  # its logs, relative to the run directory


@dataclass(frozen=True, kw_only=True)
class ReportView:
    report: Report
    excerpts: dict[str, list[Excerpt]] = field(default_factory=dict)  # by stage
    build_source: BuildSource | None = None
    smoke_script: list[str] = field(default_factory=list)  # tests/smoke.sh, when smoke is red
    failure: Failure | None = None


def step_source(step: str) -> str:
    for marker, source in STEP_SOURCES:
        if marker in step:
            return source
    if match := _TOOLCHAIN_STEP.search(step):
        return f"toolchain `{match.group(1)}` (toolchains)"
    return "the runner's own template (not a task field)"


def dockerfile_line(dockerfile: str, step: str) -> int | None:
    """The line where the instruction of a build-log step starts (the log joins continuation
    lines; compare without whitespace)."""
    wanted = re.sub(r"\s+", "", step)
    lines = dockerfile.splitlines()
    for index, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        joined = ""
        for part in lines[index:]:
            joined += re.sub(r"\s+", "", part.rstrip("\\"))
            if not part.rstrip().endswith("\\"):
                break
        if joined == wanted:
            return index + 1
    return None


def ansi_html(text: str) -> str:
    """ANSI colour (SGR) sequences as spans, everything else escaped; other escapes dropped."""
    out: list[str] = []
    open_span = False
    position = 0
    for match in _ANSI.finditer(text):
        out.append(html.escape(text[position : match.start()]))
        position = match.end()
        if match.group(2) != "m":
            continue
        styles: list[str] = []
        for code_text in (match.group(1) or "0").split(";"):
            code = int(code_text) if code_text.isdigit() else 0
            if code == 0:
                styles = []
                if open_span:
                    out.append("</span>")
                    open_span = False
            elif code == 1:
                styles.append("font-weight:bold")
            elif code in _COLOURS:
                styles.append(f"color:{_COLOURS[code]}")
        if styles:
            if open_span:
                out.append("</span>")
            out.append(f'<span style="{";".join(styles)}">')
            open_span = True
    out.append(html.escape(text[position:]))
    if open_span:
        out.append("</span>")
    return "".join(out)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("runner", "templates"),
        bytecode_cache=bytecode_cache(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ansi"] = lambda text: Markup(ansi_html(str(text)))
    return env


# What each gate wants of each reward key, where not 1: a value is green when it is what the
# gate wants (nop's reward 0 and failing fail-to-pass are its pass), red when not; None: no
# expectation (nop does not repeat its tests).
EXPECTED_REWARD: dict[str, dict[str, int | None]] = {
    Stage.NOP.value: {"reward": 0, "fail_to_pass": 0, "deterministic": None},
    Stage.ORACLE.value: {},
}


def _gate_shown(data: GateData) -> bool:
    return bool(data.reward or data.details or data.evidence or data.undone)


def render_html(view: ReportView) -> str:
    report = view.report
    stages = report.stages.items()
    # A skipped stage draws no bar: its seconds are work that did not count.
    longest = (
        max((s.seconds for _, s in stages if s.status is not Status.SKIPPED), default=0.0) or 1.0
    )
    red = [name for name, stage in stages if stage.status in (Status.FAILED, Status.ERROR)]
    # The stages with a section of their own below the table (their names link to it).
    sections = {
        Stage.NOP.value: _gate_shown(report.stages.nop.data),
        Stage.ORACLE.value: _gate_shown(report.stages.oracle.data),
        Stage.DETERMINISM.value: bool(report.stages.determinism.data.probe),
        Stage.HACK.value: bool(report.stages.hack.data.exploits),
    }
    gate_sections = {name for name, shown in sections.items() if shown}
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            report=report,
            stages=stages,
            longest=longest,
            red=red,
            gate_sections=gate_sections,
            view=view,
            gate_commands=GATE_COMMANDS,
            reward_keys=[
                "reward",
                "patch_applied",
                "fail_to_pass",
                "pass_to_pass",
                "deterministic",
                "setup_completed",
            ],
            expected=EXPECTED_REWARD,
        )
    )
