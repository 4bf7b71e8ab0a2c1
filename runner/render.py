"""Render a Harbor bundle (pure): definition + patches + options -> {relative path: bytes}.

The repository archive is the one input that is not text; the compiler streams it in beside
these files. Everything here is deterministic, so compiling twice is byte-identical.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import jinja2
import tomli_w

from runner import __version__
from runner.models import TaskDefinition
from runner.patches import PatchInfo, repository_path
from runner.resources import dockerfiles_dir
from runner.shell import expand_tests, quote
from runner.toolchains import Catalog, ToolchainSpec

HARBOR_SCHEMA_VERSION = "1.4"
COMPILER_REVISION = f"selfbench-runner/{__version__}"
AGENT_PATCH = "/opt/selfbench/agent.patch"
BASE_GIT = "/opt/selfbench/base.git"
MANIFEST = ".selfbench-manifest.json"
COLLECT_COMMAND = (
    f"git --git-dir={BASE_GIT} --work-tree=/app add -A"
    f" && git --git-dir={BASE_GIT} --work-tree=/app diff --cached --binary HEAD > {AGENT_PATCH}"
)

# Files that depend on the definition (what `refresh` rewrites), by bundle path.
CONTEXT_DIRS = ("environment", "tests")


@dataclass(frozen=True, kw_only=True)
class CompileOptions:
    agent_allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RenderInput:
    definition: TaskDefinition
    instruction: str
    test_patch: bytes
    gold_patch: bytes
    tests: PatchInfo
    gold: PatchInfo
    digests: Mapping[str, str]
    options: CompileOptions = field(default_factory=CompileOptions)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(dockerfiles_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        autoescape=False,
    )
    env.filters["shquote"] = quote
    env.globals.update(
        registry_case=_registry_case, upstream_case=_upstream_case, upstream_url=_upstream_url
    )
    return env


def _case(entries: Sequence[tuple[str, Mapping[str, str]]]) -> str:
    lines = ['    case "$arch" in']
    for arch, values in entries:
        assignments = "; ".join(f"{key}={quote(value)}" for key, value in values.items())
        lines.append(f"      {arch}) {assignments} ;;")
    lines.append("    esac")
    return "\n".join(lines)


def _registry_case(spec: ToolchainSpec) -> str:
    assert spec.registry is not None
    return _case(
        [(a, {"file": e.file, "sha256": e.sha256}) for a, e in sorted(spec.registry.arch.items())]
    )


def _upstream_case(spec: ToolchainSpec) -> str:
    return _case([(a, {"triple": e.triple}) for a, e in sorted(spec.upstream.arch.items())])


def _upstream_url(spec: ToolchainSpec) -> str:
    assert spec.upstream.url is not None and spec.upstream.mirror_base is not None
    base = f"${{SELFBENCH_{spec.name.value.upper()}_MIRROR:-{spec.upstream.mirror_base}}}"
    return spec.upstream.url.format(
        base=base, version=spec.version, triple="${triple}", rustup_version=spec.rustup_version
    )


def held_out_paths(definition: TaskDefinition, tests: PatchInfo) -> list[str]:
    paths = {repository_path(definition.workdir, p) for p in definition.test_paths}
    paths.update(tests.files)
    return sorted(p.rstrip("/") for p in paths)


def workdir_abs(definition: TaskDefinition) -> str:
    return posixpath.normpath(posixpath.join("/app", definition.workdir))


def task_toml(definition: TaskDefinition, options: CompileOptions) -> str:
    timeouts, resources = definition.timeouts, definition.resources
    environment = {
        "network_mode": "public",
        "build_timeout_sec": float(timeouts.setup_seconds + 600),
        "cpus": resources.cpus if not resources.cpus.is_integer() else int(resources.cpus),
        "memory_mb": resources.memory_mb,
        "storage_mb": resources.storage_mb,
    }
    agent: dict[str, object] = {"timeout_sec": float(timeouts.agent_seconds), "user": "agent"}
    if options.agent_allowed_hosts:
        agent["network_mode"] = "allowlist"
        agent["allowed_hosts"] = list(options.agent_allowed_hosts)
    else:
        agent["network_mode"] = "public"
    document = {
        "schema_version": HARBOR_SCHEMA_VERSION,
        "artifacts": [AGENT_PATCH],
        "task": {
            "name": f"selfbench/{definition.task_id}",
            "version": "1.0.0",
            "description": f"Reproduce {definition.task_id} from its authentic engineer request.",
            "keywords": ["software-engineering", "selfbench", definition.difficulty.value],
        },
        "metadata": {
            "selfbench_task_id": definition.task_id,
            "difficulty": definition.difficulty.value,
            "repo": definition.repo,
            "base_commit": definition.base_commit,
            "workdir": definition.workdir,
            "source_pr": definition.source_pr,
            "source_url": definition.source_url,
            "toolchains": [t.value for t in definition.toolchains],
            "compiler_revision": COMPILER_REVISION,
        },
        "agent": agent,
        "verifier": {
            "timeout_sec": float(timeouts.setup_seconds + timeouts.tests_seconds),
            "user": "root",
            "environment_mode": "separate",
            "network_mode": "public",
            "collect": [
                {
                    "service": "main",
                    "user": "root",
                    "timeout_sec": float(min(timeouts.tests_seconds, 300)),
                    "command": COLLECT_COMMAND,
                }
            ],
            "environment": dict(environment),
        },
        "environment": dict(environment),
    }
    return tomli_w.dumps(document)


def render_bundle(data: RenderInput, catalog: Catalog) -> dict[str, bytes]:
    """Every file of the bundle except the two copies of repo.tar.gz."""
    definition = data.definition
    env = _environment()
    layers = catalog.close(definition.toolchains)
    contract = definition.environment
    manifest_changes = data.gold.manifest_changes()
    manifest_paths = sorted({p for c in manifest_changes for p in c.paths})
    context = {
        "task_id": definition.task_id,
        "compiler_revision": COMPILER_REVISION,
        "toolchain_layers": layers,
        "environment_variables": dict(
            sorted((contract.environment_variables if contract else {}).items())
        ),
        "workdir_abs": workdir_abs(definition),
        "setup_command": definition.setup_command.strip(),
        "smoke_command": (contract.smoke_command or "").strip() if contract else "",
        "manifest_paths": manifest_paths,
        "held_out_paths": held_out_paths(definition, data.tests),
        "fail_to_pass_command": expand_tests(definition.test_command, definition.fail_to_pass),
        "pass_to_pass_command": (
            expand_tests(definition.test_command, definition.pass_to_pass)
            if definition.pass_to_pass
            else "true"
        ),
    }

    def text(template: str) -> bytes:
        return env.get_template(template).render(context).encode()

    files: dict[str, bytes] = {
        "task.toml": task_toml(definition, data.options).encode(),
        "instruction.md": data.instruction.encode(),
        "environment/Dockerfile": text("agent.Dockerfile.j2"),
        "tests/Dockerfile": text("verifier.Dockerfile.j2"),
        "tests/test.sh": text("test.sh.j2"),
        "tests/test.patch": data.test_patch,
        "solution/solve.sh": text("solve.sh.j2"),
        "solution/gold.patch": data.gold_patch,
    }
    shared = {
        "setup.sh": text("setup.sh.j2"),
        "smoke.sh": text("smoke.sh.j2"),
        **toolchain_scripts(layers),
    }
    for directory in CONTEXT_DIRS:
        for name, content in shared.items():
            files[f"{directory}/{name}"] = content
    if manifest_changes:
        files["tests/dependency-setup.patch"] = data.gold.subpatch(manifest_changes)
    files[MANIFEST] = manifest_json(data).encode()
    return files


def toolchain_scripts(layers: Sequence[ToolchainSpec]) -> dict[str, bytes]:
    env = _environment()
    scripts = {"toolchains/lib.sh": (dockerfiles_dir() / "toolchains" / "lib.sh").read_bytes()}
    for spec in layers:
        scripts[f"toolchains/{spec.name.value}.sh"] = (
            env.get_template(spec.script).render(tc=spec).encode()
        )
    return scripts


def render_toolchain_context(layers: Sequence[ToolchainSpec]) -> dict[str, bytes]:
    """A build context holding just the base and toolchain layers, as every bundle renders
    them: building it warms the layer cache for any task with the same toolchain set."""
    dockerfile = (
        _environment()
        .get_template("toolchains.Dockerfile.j2")
        .render(toolchain_layers=list(layers))
        .encode()
    )
    return {"Dockerfile": dockerfile, **toolchain_scripts(layers)}


def manifest_json(data: RenderInput) -> str:
    document = {
        "taskId": data.definition.task_id,
        "compilerRevision": COMPILER_REVISION,
        "sha256": dict(sorted(data.digests.items())),
        "toolchains": [t.value for t in data.definition.toolchains],
        "agentAllowedHosts": list(data.options.agent_allowed_hosts),
    }
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


EXECUTABLES = frozenset(
    {"tests/test.sh", "solution/solve.sh"}
    | {f"{d}/{n}" for d in CONTEXT_DIRS for n in ("setup.sh", "smoke.sh")}
)
