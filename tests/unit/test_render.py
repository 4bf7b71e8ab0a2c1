"""Rendering: golden bundle, task.toml mapping, scripts that parse, selectors that survive."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.base.resources import verifier_dir
from runner.compile.compiler import render_input
from runner.compile.patches import parse_patch
from runner.compile.render import (
    VERIFIER_ASSETS,
    RenderInput,
    held_out_paths,
    render_bundle,
    task_toml,
)
from runner.compile.taskdir import load_authored_task
from runner.model.harbor import COLLECT_COMMAND
from runner.model.settings import CompileOptions
from runner.model.shell import expand_tests, quote
from runner.model.task import TaskDefinition
from runner.model.toolchains import load_catalog
from tests.helpers import definition
from tests.unit.test_toolchains import render_all_layers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bash-calc"
GOLDEN = ROOT / "tests" / "golden" / "bash-calc"


def rendered_example(options: CompileOptions | None = None) -> dict[str, bytes]:
    task = load_authored_task(EXAMPLE)
    return render_bundle(render_input(task, options or CompileOptions()), load_catalog())


def test_golden_bundle() -> None:
    rendered = rendered_example()
    # The verifier's helper and reporters are the same bytes in every bundle: checked against
    # their source below, not copied into the golden tree.
    assets = {n: c for n, c in rendered.items() if n.startswith(f"{VERIFIER_ASSETS}/")}
    source = verifier_dir()
    assert assets == {
        f"{VERIFIER_ASSETS}/{p.relative_to(source).as_posix()}": p.read_bytes()
        for p in source.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    files = {n: c for n, c in rendered.items() if n not in assets}
    if os.environ.get("UPDATE_GOLDEN"):
        for name, content in files.items():
            (GOLDEN / name).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / name).write_bytes(content)
    expected = {
        str(p.relative_to(GOLDEN)): p.read_bytes() for p in GOLDEN.rglob("*") if p.is_file()
    }
    assert sorted(files) == sorted(expected)
    for name, content in files.items():
        assert content == expected[name], f"{name} differs from tests/golden (UPDATE_GOLDEN=1)"


def test_bundle_layout_is_harbor_native() -> None:
    files = rendered_example()
    for required in (
        "task.toml",
        "instruction.md",
        "environment/Dockerfile",
        "tests/Dockerfile",
        "tests/test.sh",
        "tests/test.patch",
        "solution/solve.sh",
        "solution/gold.patch",
        ".selfbench-manifest.json",
    ):
        assert required in files
    assert "definition.json" not in files
    assert "tests/dependency-setup.patch" not in files


def shared_prefix(a: str, b: str) -> str:
    lines = []
    for x, y in zip(a.splitlines(), b.splitlines(), strict=False):
        if x != y:
            break
        lines.append(x)
    return "\n".join(lines)


def test_agent_and_verifier_share_text_through_setup() -> None:
    files = rendered_example()
    agent = files["environment/Dockerfile"].decode()
    verifier = files["tests/Dockerfile"].decode()
    prefix = shared_prefix(agent, verifier)
    assert "/opt/selfbench-environment/setup.sh" in prefix
    assert prefix.rstrip().endswith("touch /opt/selfbench-environment/.setup-completed")
    assert prefix.startswith(agent.splitlines()[0])
    assert agent.splitlines()[3] == "ARG BASE_IMAGE=ubuntu:24.04"
    assert agent.splitlines()[4] == "FROM ${BASE_IMAGE}"
    for name in ("setup.sh", "smoke.sh", "toolchains/lib.sh", "toolchains/uv.sh"):
        assert files[f"environment/{name}"] == files[f"tests/{name}"]


def toml_of(**overrides: Any) -> dict[str, Any]:
    model = TaskDefinition.model_validate_json(json.dumps(definition(**overrides)))
    return tomllib.loads(task_toml(model, CompileOptions()))


def test_task_toml_mapping() -> None:
    doc = toml_of(
        timeouts={"setupSeconds": 900, "agentSeconds": 2400, "testsSeconds": 900},
        resources={"cpus": 4, "memoryMb": 8192, "storageMb": 20480},
    )
    assert doc["schema_version"] == "1.4"
    assert doc["artifacts"] == ["/opt/selfbench/agent.patch"]
    assert doc["task"]["name"] == "selfbench/demo-task"
    assert doc["agent"] == {"timeout_sec": 2400.0, "user": "agent", "network_mode": "public"}
    assert doc["verifier"]["timeout_sec"] == 1800.0
    assert doc["verifier"]["user"] == "root"
    assert doc["verifier"]["environment_mode"] == "separate"
    assert doc["verifier"]["collect"] == [
        {"service": "main", "user": "root", "timeout_sec": 300.0, "command": COLLECT_COMMAND}
    ]
    for table in (doc["environment"], doc["verifier"]["environment"]):
        assert table["build_timeout_sec"] == 1500.0
        assert (table["cpus"], table["memory_mb"], table["storage_mb"]) == (4, 8192, 20480)
    meta = doc["metadata"]
    assert meta["selfbench_task_id"] == "demo-task"
    assert meta["base_commit"] == "0" * 40
    assert meta["source_pr"] == 7
    assert meta["compiler_revision"].startswith("selfbench-runner/")


def test_collect_timeout_is_capped_and_cpus_may_be_fractional() -> None:
    doc = toml_of(timeouts={"testsSeconds": 120}, resources={"cpus": 1.5})
    assert doc["verifier"]["collect"][0]["timeout_sec"] == 120.0
    assert doc["environment"]["cpus"] == 1.5


def test_agent_allowlist() -> None:
    model = TaskDefinition.model_validate_json(json.dumps(definition()))
    doc = tomllib.loads(task_toml(model, CompileOptions(agent_allowed_hosts=("api.example",))))
    assert doc["agent"]["network_mode"] == "allowlist"
    assert doc["agent"]["allowed_hosts"] == ["api.example"]


def test_every_rendered_script_parses() -> None:
    files = rendered_example()
    scripts = [n for n in files if n.endswith(".sh")]
    assert len(scripts) >= 8
    for name in scripts:
        result = subprocess.run(["bash", "-n"], input=files[name], capture_output=True, check=False)
        assert result.returncode == 0, (name, result.stderr)


def test_all_toolchain_scripts_parse(tmp_path: Path) -> None:
    for name, content in render_all_layers().items():
        result = subprocess.run(
            ["bash", "-n"], input=content.encode(), capture_output=True, check=False
        )
        assert result.returncode == 0, (name, result.stderr)


def test_held_out_paths_join_workdir_and_patch() -> None:
    model = TaskDefinition.model_validate_json(
        json.dumps(definition(workdir="pkg", testPaths=["tests/a.py", "tests/fixtures/"]))
    )
    tests = parse_patch(
        b"diff --git a/pkg/tests/b.py b/pkg/tests/b.py\nnew file mode 100644\n"
        b"--- /dev/null\n+++ b/pkg/tests/b.py\n@@ -0,0 +1 @@\n+x\n"
    )
    assert held_out_paths(model, tests) == [
        "pkg/tests/a.py",
        "pkg/tests/b.py",
        "pkg/tests/fixtures",
    ]


def test_seed_example_expansion() -> None:
    assert expand_tests("bun test {tests}", ["tests/new-behavior.test.ts"]) == (
        "bun test 'tests/new-behavior.test.ts'"
    )
    assert quote("it's") == "'it'\\''s'"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
            max_size=12,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_selectors_reach_the_command_as_exact_argv(selectors: list[str]) -> None:
    command = expand_tests("printf '%s\\0' {tests}", selectors)
    # test.sh passes the expanded command through one more level of quoting (bash -c "$2").
    script = f'cmd={quote(command)}\nbash -c "$cmd"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [s.encode("utf-8", "surrogateescape") for s in selectors]


@pytest.mark.parametrize("manifest", ["package.json", "sub/go.mod"])
def test_dependency_setup_patch_when_gold_changes_manifests(manifest: str) -> None:
    gold_raw = (
        f"diff --git a/{manifest} b/{manifest}\n--- a/{manifest}\n+++ b/{manifest}\n"
        "@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/src/x.ts b/src/x.ts\n--- a/src/x.ts\n+++ b/src/x.ts\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    ).encode()
    tests_raw = (
        b"diff --git a/t.ts b/t.ts\nnew file mode 100644\n--- /dev/null\n+++ b/t.ts\n"
        b"@@ -0,0 +1 @@\n+x\n"
    )
    model = TaskDefinition.model_validate_json(json.dumps(definition()))
    files = render_bundle(
        RenderInput(
            definition=model,
            instruction="x\n",
            test_patch=tests_raw,
            gold_patch=gold_raw,
            tests=parse_patch(tests_raw),
            gold=parse_patch(gold_raw),
            digests={},
        ),
        load_catalog(),
    )
    dependency = files["tests/dependency-setup.patch"].decode()
    assert manifest in dependency and "src/x.ts" not in dependency
    verifier = files["tests/Dockerfile"].decode()
    assert "COPY dependency-setup.patch" in verifier
    assert f"'{manifest}'" in verifier
    assert "dependency-setup" not in files["environment/Dockerfile"].decode()


def test_bundle_suits_harbor_under_buildkit_and_stops_at_once() -> None:
    """Harbor passes no build args and BuildKit lets an ARG default beat an inherited ENV, so
    toolchain ARGs have no default; Harbor's `sleep infinity` ignores SIGTERM, so both images
    stop with SIGKILL."""
    files = rendered_example()
    for name in ("environment/Dockerfile", "tests/Dockerfile"):
        text = files[name].decode()
        args = [ln for ln in text.splitlines() if ln.startswith("ARG SELFBENCH_")]
        assert args and all("=" not in ln for ln in args), args
        assert "STOPSIGNAL SIGKILL" in text.splitlines()


def test_reward_json_holds_only_the_verdicts_metrics() -> None:
    """Harbor averages every numeric key of reward.json: exit codes and timings go to
    details.json instead, and the keys are the Reward model's."""
    from runner.model.reward import DETAIL_KEYS, REWARD_KEYS

    script = rendered_example()["tests/test.sh"].decode()
    reward_line = next(ln for ln in script.splitlines() if "> /logs/verifier/reward.json" in ln)
    details_line = next(ln for ln in script.splitlines() if "> /logs/verifier/details.json" in ln)
    for key in REWARD_KEYS:
        assert f'"{key}": %d' in reward_line and f'"${key}"' in reward_line
    assert "exit_code" not in reward_line and "_ms" not in reward_line
    for key in DETAIL_KEYS:
        assert f'"{key}": %d' in details_line
    assert REWARD_KEYS == (
        "reward",
        "patch_applied",
        "fail_to_pass",
        "pass_to_pass",
        "deterministic",
        "setup_completed",
    )
