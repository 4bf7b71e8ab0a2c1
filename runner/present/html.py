"""report.html: the report a person looks at (pure rendering; the run's files are read by
runlogs.report_view). One self-contained file: inline CSS, no script, no external reference.
"""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass, field
from functools import cache

import jinja2
from markupsafe import Markup
from rich.console import Console
from rich.style import Style
from rich.terminal_theme import TerminalTheme
from rich.text import Span, Text

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
# The palette report.html draws terminal colours in (dark on white): rich's terminal theme of
# the 8 normal and 8 bright colours, 256-colour and true-colour codes as they are.
_THEME = TerminalTheme(
    (255, 255, 255),
    (34, 34, 34),
    [
        (0, 0, 0),
        (192, 57, 43),
        (30, 132, 73),
        (183, 149, 11),
        (46, 89, 168),
        (142, 68, 173),
        (19, 141, 144),
        (102, 102, 102),
    ],
    [
        (119, 119, 119),
        (231, 76, 60),
        (39, 174, 96),
        (212, 172, 13),
        (59, 115, 209),
        (165, 105, 189),
        (23, 165, 168),
        (153, 153, 153),
    ],
)
# An operating-system command (a window title: ESC ] ... BEL) that rich's decoder leaves as
# text when it ends with BEL rather than ST (rich 14: "0;title" stayed in the output).
_OSC_BEL = re.compile(r"\x1b\][^\x07\x1b]*\x07")
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
    """Terminal output as HTML: colours and styles (SGR: the 16 colours, 256 and true colour,
    bold, italic, underline) as inline-styled spans, every other escape dropped, the text
    escaped. rich decodes it and exports the HTML (about 1 ms a line: a line with no escape
    and no carriage return, most of a log, is only escaped)."""
    if "\x1b" not in text and "\r" not in text:
        return html.escape(text)
    console = Console(
        record=True,
        file=io.StringIO(),
        width=1 << 20,  # no wrapping: the page's <pre> shows each line as it was
        color_system="truecolor",
        force_terminal=True,
        soft_wrap=True,
        legacy_windows=False,
    )
    decoded = Text.from_ansi(_OSC_BEL.sub("", text))
    # No hyperlinks (OSC 8): a log is the task's output, and its link could be `javascript:`.
    decoded.spans = [
        Span(span.start, span.end, span.style.clear_meta_and_links())
        if isinstance(span.style, Style)
        else span
        for span in decoded.spans
    ]
    console.print(decoded, end="")
    return console.export_html(inline_styles=True, code_format="{code}", theme=_THEME)


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
