"""The input boundary under attack: every case of the hostile corpus (tests/hostile.py) through
`audit`, `compile` and, for forged bundles, `verify --plan`, plus property tests.

Promises checked on every case: no traceback; exit 0, 1 or 2 only (and the audit's own code
where a case decides it); errors one line each, on stderr, none said twice; nothing written
outside the output directory; nothing half-written on failure; the rendered Dockerfiles carry
exactly the template's instructions; every rendered script parses with `bash -n`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from dockerfile_parse import DockerfileParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.cli.main import run_cli
from runner.compile.compiler import render_input
from runner.compile.patches import PatchParseError, parse_patch, patch_problems
from runner.compile.render import render_bundle
from runner.compile.taskdir import definition_problems, load_authored_task
from runner.compile.templates import dockerfile_quote
from runner.model.settings import CompileOptions
from runner.model.shell import quote
from runner.model.toolchains import load_catalog
from tests.hostile import Case, Fixture, all_cases, make_fixture, write

CASES = all_cases()
CASE_TIMEOUT = 60


def test_the_corpus_is_large_and_covers_every_category() -> None:
    assert len(CASES) >= 500
    categories = {case.category for case in CASES}
    assert categories == {"field", "document", "file", "patch", "bundle"}
    assert sum(case.kind == "bundle" for case in CASES) >= 60


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return make_fixture(tmp_path_factory.mktemp("hostile-fixture"))


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"the runner hung for {seconds}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str) -> tuple[int, str, str]:
    with CliRunner().isolation() as (out, err, _), deadline(CASE_TIMEOUT):
        code = run_cli(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        return (
            code,
            out.getvalue().decode(errors="replace"),
            err.getvalue().decode(errors="replace"),
        )


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `root` (links not followed) with its size, mtime and mode."""
    entries: dict[str, tuple[int, int, int]] = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(directory, name)
            info = path.lstat()
            entries[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return entries


def instructions(text: str) -> list[str]:
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return [i["instruction"] for i in parser.structure if i["instruction"] != "COMMENT"]


def template_instructions(fx: Fixture, task_dir: Path) -> dict[str, list[str]]:
    """What the templates render for a task of the same shape (toolchains, number of
    variables, dependency-setup pass) but with harmless values: any difference in a compiled
    bundle is an injected instruction."""
    task = load_authored_task(task_dir)
    definition = task.definition
    variables = len(definition.environment.environment_variables) if definition.environment else 0
    doc = fx.definition(
        toolchains=[t.value for t in definition.toolchains],
        environment={"environmentVariables": {f"V{i}": "x" for i in range(variables)}},
    )
    gold = fx.gold_patch
    if task.gold.manifest_changes():
        gold += (
            b"diff --git a/package.json b/package.json\n--- a/package.json\n"
            b'+++ b/package.json\n@@ -1 +1 @@\n-{"name": "x"}\n+{"name": "y"}\n'
        )
    with tempfile.TemporaryDirectory(prefix="clean-shape.") as tmp:
        clean = Path(tmp)
        write(clean, doc, fx.test_patch, gold)
        files = render_bundle(
            render_input(load_authored_task(clean), CompileOptions()), load_catalog()
        )
    return {
        name: instructions(files[name].decode())
        for name in ("environment/Dockerfile", "tests/Dockerfile")
    }


def bash_syntax_errors(bundle: Path) -> list[str]:
    scripts = sorted(str(p) for p in bundle.rglob("*.sh"))
    script = 'for f in "$@"; do bash -n "$f" 2>/dev/null || echo "$f"; done'
    result = subprocess.run(
        ["bash", "-c", script, "bash", *scripts], capture_output=True, text=True, check=True
    )
    return result.stdout.splitlines()


def check_output(
    code: int, out: str, err: str, *, allowed: set[int], error_lines: bool = True
) -> None:
    assert code in allowed, (code, err[-2000:])
    assert "Traceback" not in out + err
    if code == 2:
        lines = err.splitlines()
        assert lines, "an invalid input must say why"
        if error_lines:
            assert all(line.startswith("selfbench-runner: error: ") for line in lines), lines
            assert len(lines) == len(set(lines)), f"an error line is said twice: {lines}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case: Case, fixture: Fixture, tmp_path: Path) -> None:
    where = tmp_path / "case"
    target = case.make(fixture, where)
    outside = tmp_path / "outside"
    outside.mkdir()
    before = snapshot(tmp_path)
    messages = ""
    if case.kind == "task":
        code, out, err = cli("audit", str(target))
        check_output(code, out, err, allowed={0, 1, 2})
        if case.audit_code is not None:
            assert code == case.audit_code, (code, out, err)
        messages += out + err
        bundle = tmp_path / "out" / "bundle"
        code, out, err = cli("compile", str(target), "-o", str(bundle))
        check_output(code, out, err, allowed={0, 2})
        messages += out + err
        written = {k for k in snapshot(tmp_path) if k not in before}
        assert all(k == "out" or k.startswith("out/") for k in written), written
        if code == 0:
            expected = template_instructions(fixture, target)
            for name, wanted in expected.items():
                got = instructions((bundle / name).read_text())
                assert got == wanted, f"{name}: an instruction was injected"
            assert bash_syntax_errors(bundle) == []
        else:
            assert not bundle.exists(), "a failed compile left a half-written bundle"
    else:
        previous = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
        try:
            code, out, err = cli("verify", str(target), "--plan", "--logs", str(tmp_path / "runs"))
        finally:  # later tests (and the servers they start) need the real engine
            if previous is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = previous
        check_output(code, out, err, allowed={0, 2}, error_lines=False)
        if code == 2:
            assert "error: " in err  # the summary lists every problem
        messages += out + err
        written = {k for k in snapshot(tmp_path) if k not in before}
        assert all(k == "runs" or k.startswith("runs/") for k in written), written
        for run_dir in (tmp_path / "runs").glob("*/*"):
            assert run_dir.parent.parent == tmp_path / "runs"
    # Nothing that was there changed (the case's own files included).
    after = snapshot(tmp_path)
    changed = [k for k, v in before.items() if after.get(k) != v and not k.startswith("case/")]
    assert changed == [], changed
    assert snapshot(outside) == {}
    if case.expect:
        assert case.expect in messages, messages[-2000:]


# ---- properties ------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "schemaVersion",
                "taskId",
                "workdir",
                "setupCommand",
                "testCommand",
                "failToPass",
                "testPaths",
                "toolchains",
                "resources",
                "timeouts",
                "environment",
                "prompt",
                "x",
                "setup_command",
            ]
        ),
        JSON_VALUES,
        max_size=6,
    )
)
def test_any_definition_is_validated_without_exceptions(changes: dict[str, Any]) -> None:
    from tests.helpers import definition

    doc = {**definition(), **changes}
    model, problems = definition_problems(doc, "definition.json")
    assert (model is None) == bool(problems) or model is not None
    for problem in problems:
        assert problem.file == "definition.json"
        assert "\n" not in problem.one_line()


PATCH_LINES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "diff --git a/x b/x",
                "--- a/x",
                "+++ b/x",
                "@@ -1 +1 @@",
                "@@ -0,0 +1,2 @@",
                "new file mode 120000",
                "new file mode 160000",
                "rename from ../x",
                "rename to y",
                "Binary files a/x and b/x differ",
                "GIT binary patch",
                "literal 0",
                "-a",
                "+b",
                " c",
                "\\ No newline at end of file",
                "old mode 100644",
                "new mode 100755",
            ]
        ),
        st.text(max_size=30),
    ),
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=3000),
        PATCH_LINES.map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
    )
)
def test_any_patch_parses_or_is_refused_cleanly(raw: bytes) -> None:
    try:
        info = parse_patch(raw)
    except PatchParseError:
        return
    for problem in patch_problems(info):
        assert isinstance(problem, str)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text().filter(lambda s: "\x00" not in s), min_size=1, max_size=8))
def test_shell_quoting_round_trips_through_bash(values: list[str]) -> None:
    script = "printf '%s\\0' " + " ".join(quote(v) for v in values)
    result = subprocess.run(["bash", "-c", script], capture_output=True, check=True)
    decoded = result.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    assert decoded == [
        v.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape") for v in values
    ]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_dockerfile_quoting_never_ends_a_line(value: str) -> None:
    try:
        quoted = dockerfile_quote(value)
    except ValueError:
        assert any(
            ord(c) < 32
            or 0x7F <= ord(c) <= 0x9F
            or c in "\u2028\u2029"
            or 0xD800 <= ord(c) <= 0xDFFF
            for c in value
        )
        return
    assert "\n" not in quoted and "\r" not in quoted
    assert quoted.startswith('"') and quoted.endswith('"')
    body = quoted[1:-1]
    # Every double quote, dollar and backslash inside is escaped.
    i = 0
    while i < len(body):
        if body[i] == "\\":
            assert body[i + 1] in '\\"$'
            i += 2
            continue
        assert body[i] not in '"$'
        i += 1


def test_report_json_of_the_corpus_is_valid(fixture: Fixture, tmp_path: Path) -> None:
    """A sample through `audit --json`: always one JSON document on stdout."""
    for case in CASES[::25]:
        if case.kind != "task":
            continue
        target = case.make(fixture, tmp_path / case.name.replace("/", "_").replace(":", "_"))
        code, out, _ = cli("audit", str(target), "--json")
        document = json.loads(out)
        assert document["verdict"] in ("accepted", "rejected", "invalid")
        assert code == {"accepted": 0, "rejected": 1, "invalid": 2}[document["verdict"]]
