"""An evaluation's summary (runner.model.evaluation) as JUnit XML and as one HTML page: the
summary on top, then every instance in a table that sorts by any column, each linked to its
result, its grade's logs and evidence. The page is self-contained (no script or style from
elsewhere), so it opens offline and from a CI artifact."""

from __future__ import annotations

import base64
import hashlib
import html
import xml.etree.ElementTree as ET

from runner.base.errors import printable
from runner.model.evaluation import EvaluationSummary, InstanceResult, Tally

_FAILED = ("unresolved", "not-applied", "empty-patch")


def junit_xml(summary: EvaluationSummary) -> bytes:
    """A testcase per instance (a failure when it is not resolved, an error when it could not
    be graded), and one per problem of the input (an error each)."""
    suites = ET.Element("testsuites", name="selfbench.evaluate")
    suite = ET.SubElement(suites, "testsuite", name="selfbench.evaluate")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for row in summary.rows:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=_x(f"selfbench.model.{row.model}" if row.model else "selfbench.model"),
            name=_x(row.instance_id),
            time=f"{row.seconds:.3f}",
        )
        counts["tests"] += 1
        if row.status in _FAILED:
            ET.SubElement(case, "failure", message=_x(row.detail[:2000]), type=row.status)
            counts["failures"] += 1
        elif row.status == "error":
            ET.SubElement(case, "error", message=_x(row.detail[:2000]), type="error")
            counts["errors"] += 1
        ET.SubElement(case, "system-out").text = f"result: {row.result}"
    for index, problem in enumerate(summary.input_problems):
        case = ET.SubElement(
            suite,
            "testcase",
            classname="selfbench.input",
            name=_x(problem.where or f"input-{index}"),
        )
        field = f"field `{problem.field}`: " if problem.field else ""
        message = _x(f"{field}{problem.message}"[:2000])
        ET.SubElement(case, "error", message=message, type="input")
        counts["tests"] += 1
        counts["errors"] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
        if key != "skipped":
            suites.set(key, str(value))
    suite.set("time", f"{summary.seconds:.3f}")
    suites.set("time", f"{summary.seconds:.3f}")
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def _x(text: str) -> str:
    """Text as XML 1.0 may hold it: what a patch made (a file name with control characters, in
    the policy's words) is escaped, never a character XML refuses."""
    return printable(text)


def _e(text: object) -> str:
    return html.escape(printable(str(text)), quote=True)


def _tallies(by: str, groups: dict[str, Tally]) -> str:
    rows = "".join(
        f"<tr><td>{_e(name)}</td><td>{t.resolved}</td><td>{t.total}</td>"
        f"<td>{t.rate * 100:.1f}%</td></tr>"
        for name, t in sorted(groups.items())
    )
    return (
        f"<section><h2>by {by}</h2><table class=tally><tr><th>{by}</th>"
        f"<th>resolved</th><th>of</th><th>rate</th></tr>{rows}</table></section>"
    )


def _links(result: InstanceResult | None, row_result: str) -> str:
    links = [f'<a href="{_e(row_result)}">result</a>']
    for log in result.logs[:24] if result is not None else []:
        links.append(f'<a href="{_e(log)}">{_e(log.rsplit("/", 1)[-1])}</a>')
    return " ".join(links)


# The page's one script: a click on a column's head sorts the table by it (again: the other way).
# The page allows this script alone (a Content-Security-Policy of its hash), so no text a
# prediction carries could run as script even if it got past the escaping.
_SCRIPT = """
var table = document.getElementById('instances');
var heads = table.querySelectorAll('th[data-sort]');
function sortBy(th, column, down) {
  var body = table.tBodies[0];
  var rows = Array.from(body.rows);
  heads.forEach(function (other) { other.removeAttribute('aria-sort'); });
  th.setAttribute('aria-sort', down ? 'ascending' : 'descending');
  var numeric = th.dataset.sort === 'number';
  rows.sort(function (a, b) {
    var x = a.cells[column].dataset.value, y = b.cells[column].dataset.value;
    var order = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
    return down ? order : -order;
  });
  rows.forEach(function (row) { body.appendChild(row); });
  table.dataset.sortedBy = th.textContent + (down ? ' ascending' : ' descending');
}
heads.forEach(function (th, column) {
  th.addEventListener('click', function () {
    sortBy(th, column, th.getAttribute('aria-sort') !== 'ascending');
  });
});
table.dataset.sortable = 'yes';
"""
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-"
    + base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    + "'"
)

_STYLE = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:80em;padding:0 1em}"
    "td,th{padding:.25em .7em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}"
    "th[data-sort]{cursor:pointer;user-select:none}th[aria-sort=ascending]::after{content:' ▲'}"
    "th[aria-sort=descending]::after{content:' ▼'}section{display:inline-block;margin-right:2em}"
    ".s-resolved{color:#1e8449;font-weight:600}.s-unresolved,.s-not-applied,.s-empty-patch"
    "{color:#c0392b;font-weight:600}.s-error{color:#6c3483;font-weight:600}"
    ".tampered{background:#fdebd0}#totals b{font-size:1.2em}"
)


def evaluation_html(
    summary: EvaluationSummary, results: dict[tuple[str, str], InstanceResult]
) -> str:
    """The page: totals, by difficulty and by repository, the input's problems, then the table
    (`results` by instance id, for the links to each grade's logs)."""
    totals = (
        f"<b>{summary.resolved}</b> of <b>{summary.instances}</b> resolved "
        f"({summary.resolved_rate * 100:.1f}%; {summary.resolved_of_tasks * 100:.1f}% of "
        f"{summary.tasks} task(s)) · {summary.unresolved} unresolved · "
        f"{summary.empty_patches} empty patch(es) · {summary.not_applied} not applied · "
        f"{summary.errors} error(s) · {summary.tampered} with tampering · "
        f"{summary.not_graded} not graded yet · {len(summary.input_problems)} input problem(s)"
    )
    problems = "".join(
        f"<li><code>{_e(p.where or '')}</code>"
        f"{': field <code>' + _e(p.field) + '</code>' if p.field else ''}: {_e(p.message)}</li>"
        for p in summary.input_problems
    )
    rows = []
    for row in summary.rows:
        result = results.get((row.instance_id, row.model))
        tamper = "; ".join(result.tampering) if result is not None else ""
        rows.append(
            f'<tr class="{"tampered" if row.tampered else ""}" data-status="{_e(row.status)}">'
            f'<td data-value="{_e(row.instance_id)}">{_e(row.instance_id)}</td>'
            f'<td data-value="{_e(row.model)}">{_e(row.model)}</td>'
            f'<td data-value="{_e(row.status)}" class="s-{_e(row.status)}">{_e(row.status)}</td>'
            f'<td data-value="{row.reward if row.reward is not None else -1}">'
            f"{'' if row.reward is None else row.reward}</td>"
            f'<td data-value="{row.seconds:.3f}">{row.seconds:.1f} s</td>'
            f'<td data-value="{_e(row.detail)}">{_e(row.detail[:400])}'
            f"{'<br><i>tampering: ' + _e(tamper[:400]) + '</i>' if tamper else ''}</td>"
            f'<td data-value="">{_links(result, row.result)}</td></tr>'
        )
    head = "".join(
        f'<th data-sort="{kind}">{name}</th>'
        for name, kind in (
            ("instance", "text"),
            ("model", "text"),
            ("status", "text"),
            ("reward", "number"),
            ("time", "number"),
            ("detail", "text"),
        )
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>selfbench evaluation</title><style>{_STYLE}</style></head><body>"
        f'<h1>selfbench evaluation</h1><p id="totals">{totals}</p>'
        f"<p>source <code>{_e(summary.source)}</code> · predictions "
        f"<code>{_e(summary.predictions)}</code> · {summary.seconds:.1f} s</p>"
        + _tallies("difficulty", summary.by_difficulty)
        + _tallies("repository", summary.by_repository)
        + (_tallies("model", summary.by_model) if len(summary.by_model) > 1 else "")
        + (f'<h2>Input problems</h2><ul id="problems">{problems}</ul>' if problems else "")
        + f'<table id="instances"><thead><tr>{head}<th></th></tr></thead><tbody>'
        + "".join(rows)
        + f"</tbody></table><script>{_SCRIPT}</script>"
        + "</body></html>\n"
    )
