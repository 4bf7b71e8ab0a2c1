"""Render a Harbor bundle (pure): definition + patches + options -> {relative path: bytes}.

The repository archive is the one input that is not text; the compiler streams it in beside
these files. Everything here is deterministic, so compiling twice is byte-identical.

Values reach a Dockerfile only through `dockerfile_value` / `dockerfile_quote` and a shell
script only through `quote`: each refuses control characters, so no input can add a line, and
quotes so that neither Docker's nor the shell's own processing changes a value.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from runner import __version__
from runner.base import validation as v
from runner.base.resources import verifier_dir
from runner.compile.patches import PatchInfo, repository_path
from runner.compile.templates import (
    DEFAULT_BASE_IMAGE,
    dockerfile_value,
    template_environment,
    toolchain_scripts,
)
from runner.model.canaries import CanarySet
from runner.model.contract import EnvironmentContract
from runner.model.harbor import (
    COLLECT_COMMAND,
    TASK_NAME_PREFIX,
    AgentConfig,
    CollectConfig,
    EnvironmentConfig,
    Metadata,
    NetworkMode,
    PackageInfo,
    TaskToml,
    VerifierConfig,
)
from runner.model.layout import CANARY_FILE, MANIFEST_FILE
from runner.model.manifest import BundleManifest, ManifestVerification
from runner.model.reward import DETAIL_KEYS, REWARD_KEYS
from runner.model.settings import DEFAULT_MAX_LOG_BYTES, CompileOptions
from runner.model.shell import expand_tests
from runner.model.task import TaskDefinition, Toolchain
from runner.model.toolchains import Catalog
from runner.model.verifiertask import VerifierTask
from runner.runners import expected_runners
from runner.runners.command import command_files, selector_files

COMPILER_REVISION = f"selfbench-runner/{__version__}"
SCRIPTS = ("setup.sh", "smoke.sh", "root-setup.sh")
TASK_DOCUMENT = "tests/selfbench-task.json"
CENSUS_FILE = "tests/expected-tests.json"
CANARIES_FILE = f"tests/{CANARY_FILE}"
VERIFIER_ASSETS = "tests/selfbench"
# The census placeholder a bundle is compiled with: the verification that accepts the task seals
# the tests it saw into it (runner.model.census).
UNSEALED_CENSUS = b'{"schemaVersion": 1, "sealed": false}\n'
COMPOSE_FILE = "tests/docker-compose.yaml"

# The bundle's two build contexts: the agent's image and the verifier's.
AGENT_CONTEXT = "environment"
VERIFIER_CONTEXT = "tests"
CONTEXT_DIRS = (AGENT_CONTEXT, VERIFIER_CONTEXT)


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


def harness_paths(
    definition: TaskDefinition, held_out: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(the files the test command runs, the files its selectors name outside the held-out
    tests): the harness the verifier restores and write-protects."""
    commands = command_files(definition.test_command, definition.workdir)
    selectors = [
        p
        for p in selector_files(
            [*definition.fail_to_pass, *definition.pass_to_pass], definition.workdir
        )
        if p not in held_out and p not in commands
    ]
    return commands, selectors


def verifier_task(
    data: RenderInput, held_out: Sequence[str], harness: tuple[list[str], list[str]]
) -> str:
    """tests/selfbench-task.json: what the verifier's helper needs to know of the task (data,
    never code: it is read by JSON::PP, and no value of it reaches a shell)."""
    definition = data.definition
    contract = definition.environment
    workdir = v.normalize_repo_path(definition.workdir)
    gold_files = sorted({v.normalize_repo_path(p) for c in data.gold.changes for p in c.paths})
    test_dirs = sorted({posixpath.dirname(p) for p in held_out if posixpath.dirname(p)})
    return VerifierTask(
        task_id=definition.task_id,
        workdir=workdir,
        held_out=list(held_out),
        test_dirs=test_dirs,
        command_files=harness[0],
        selector_files=harness[1],
        harness_allow=list(contract.harness_allow) if contract else [],
        harness_protect=list(contract.harness_protect) if contract else [],
        gold_files=gold_files,
        fail_to_pass=list(definition.fail_to_pass),
        pass_to_pass=list(definition.pass_to_pass),
        expected_runners=expected_runners(definition.test_command),
    ).to_json()


def verifier_assets() -> dict[str, bytes]:
    """The verifier's helper and its reporters (tests/selfbench/, /opt/selfbench-verifier/ in the
    image): the same bytes in every bundle."""
    root = verifier_dir()
    assets = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith(".") and "__pycache__" not in path.parts:
            assets[f"{VERIFIER_ASSETS}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return assets


def held_out_paths(definition: TaskDefinition, tests: PatchInfo) -> list[str]:
    paths = {repository_path(definition.workdir, p) for p in definition.test_paths}
    paths.update(v.normalize_repo_path(p) for p in tests.files)
    return sorted(paths)


MAX_SELECTOR_RUNS = 64


def _alone(selectors: Sequence[str]) -> list[str]:
    """The selectors test.sh runs one by one when their selection fails (several only)."""
    return list(selectors[:MAX_SELECTOR_RUNS]) if len(selectors) > 1 else []


def _selection(definition: TaskDefinition, selectors: Sequence[str]) -> str:
    """The test command for these selectors; `true` for none (an empty pass-to-pass)."""
    return expand_tests(definition.test_command, selectors) if selectors else "true"


def workdir_abs(definition: TaskDefinition) -> str:
    return posixpath.normpath(posixpath.join("/app", definition.workdir_path))


def _json_format(keys: Sequence[str]) -> str:
    """A printf format writing a JSON object of integer values with these keys."""
    return "{" + ", ".join(f'"{key}": %d' for key in keys) + "}"


def task_config(definition: TaskDefinition, options: CompileOptions) -> TaskToml:
    timeouts, resources = definition.timeouts, definition.resources
    environment = EnvironmentConfig(
        network_mode=NetworkMode.PUBLIC,
        build_timeout_sec=float(timeouts.setup_seconds + 600),
        cpus=resources.cpus,
        memory_mb=resources.memory_mb,
        storage_mb=resources.storage_mb,
    )
    hosts = list(options.agent_allowed_hosts)
    return TaskToml(
        task=PackageInfo(
            name=f"{TASK_NAME_PREFIX}{definition.task_id}",
            version="1.0.0",
            description=f"Reproduce {definition.task_id} from its authentic engineer request.",
            keywords=["software-engineering", "selfbench", definition.difficulty.value],
        ),
        metadata=Metadata(
            selfbench_task_id=definition.task_id,
            difficulty=definition.difficulty,
            repo=definition.repo,
            base_commit=definition.base_commit,
            workdir=definition.workdir,
            source_pr=definition.source_pr,
            source_url=definition.source_url,
            toolchains=list(definition.toolchains),
            compiler_revision=COMPILER_REVISION,
        ),
        agent=AgentConfig(
            timeout_sec=float(timeouts.agent_seconds),
            user="agent",
            network_mode=NetworkMode.ALLOWLIST if hosts else NetworkMode.PUBLIC,
            allowed_hosts=hosts or None,
        ),
        verifier=VerifierConfig(
            timeout_sec=float(timeouts.setup_seconds + timeouts.tests_seconds),
            # The held-out tests run without the internet unless the task declares they need
            # it (environment.testsNetwork); Harbor enforces `no-network` with its egress
            # control, the runner with a network of its own.
            network_mode=NetworkMode.PUBLIC
            if definition.environment is not None
            and definition.environment.tests_network == "public"
            else NetworkMode.NO_NETWORK,
            collect=[
                CollectConfig(
                    timeout_sec=float(min(timeouts.tests_seconds, 300)), command=COLLECT_COMMAND
                )
            ],
            environment=environment,
        ),
        environment=environment,
    )


def task_toml(definition: TaskDefinition, options: CompileOptions) -> str:
    return task_config(definition, options).to_toml()


def render_bundle(data: RenderInput, catalog: Catalog) -> dict[str, bytes]:
    """Every file of the bundle except the two copies of repo.tar.gz."""
    definition = data.definition
    env = template_environment()
    layers = catalog.close(definition.toolchains)
    contract = definition.environment
    manifest_changes = data.gold.manifest_changes()
    manifest_paths = sorted({p for c in manifest_changes for p in c.paths})
    held_out = held_out_paths(definition, data.tests)
    harness = harness_paths(definition, held_out)
    context = {
        "task_id": dockerfile_value(definition.task_id),
        "compiler_revision": COMPILER_REVISION,
        "toolchain_layers": layers,
        "environment_variables": dict(
            sorted((contract.environment_variables if contract else {}).items())
        ),
        "workdir_abs": workdir_abs(definition),
        "setup_command": definition.setup_command.strip(),
        "smoke_command": (contract.smoke_command or "").strip() if contract else "",
        "manifest_paths": manifest_paths,
        "held_out_paths": held_out,
        "fail_to_pass_command": _selection(definition, definition.fail_to_pass),
        # Each selector alone, when a selection of several fails: at most the first 64.
        "fail_to_pass_selectors": _alone(definition.fail_to_pass),
        "fail_to_pass_each": [_selection(definition, [s]) for s in _alone(definition.fail_to_pass)],
        "pass_to_pass_selectors": _alone(definition.pass_to_pass),
        "pass_to_pass_each": [_selection(definition, [s]) for s in _alone(definition.pass_to_pass)],
        "pass_to_pass_command": _selection(definition, definition.pass_to_pass),
        # The flakiness probe's reversed order.
        "fail_to_pass_reversed": _selection(definition, definition.fail_to_pass[::-1]),
        "pass_to_pass_reversed": _selection(definition, definition.pass_to_pass[::-1]),
        "reward_keys": REWARD_KEYS,
        "detail_keys": DETAIL_KEYS,
        "reward_format": _json_format(REWARD_KEYS),
        "details_format": _json_format(DETAIL_KEYS),
        "max_log_bytes": DEFAULT_MAX_LOG_BYTES,
        "base_image": base_image(definition),
        "root_setup_command": (contract.root_setup_command or "").strip() if contract else "",
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
        TASK_DOCUMENT: verifier_task(data, held_out, harness).encode(),
        CENSUS_FILE: UNSEALED_CENSUS,
        # The compiler writes the task's canaries once it has the repository (runner.compile
        # .canaries); rendered alone, a bundle has none.
        CANARIES_FILE: CanarySet().to_json().encode(),
        **verifier_assets(),
        "solution/solve.sh": text("solve.sh.j2"),
        "solution/gold.patch": data.gold_patch,
    }
    shared = {
        "setup.sh": text("setup.sh.j2"),
        "smoke.sh": text("smoke.sh.j2"),
        **toolchain_scripts(layers),
    }
    if context["root_setup_command"]:
        shared["root-setup.sh"] = text("root-setup.sh.j2")
    if contract is not None and contract.services:
        files[COMPOSE_FILE] = compose_file(contract).encode()
    for directory in CONTEXT_DIRS:
        for name, content in shared.items():
            files[f"{directory}/{name}"] = content
    if manifest_changes:
        files["tests/dependency-setup.patch"] = data.gold.subpatch(manifest_changes)
    files[MANIFEST_FILE] = manifest_json(data).encode()
    return files


def base_image(definition: TaskDefinition) -> str:
    contract = definition.environment
    return contract.base_image if contract and contract.base_image else DEFAULT_BASE_IMAGE


def healthcheck_test(command: list[str] | str) -> list[str]:
    """Docker's HEALTHCHECK test: an argv runs as is, a string through the shell."""
    return ["CMD", *command] if isinstance(command, list) else ["CMD-SHELL", command]


def compose_file(contract: EnvironmentContract) -> str:
    """The verifier's services for `harbor run`: Harbor merges tests/docker-compose.yaml into
    the verifier's compose project only (the agent's environment/ has none), and `main` waits
    for every service to be healthy. Written as JSON, which YAML parsers read unchanged."""
    services: dict[str, object] = {
        "main": {
            "depends_on": {
                service.name: {"condition": "service_healthy"} for service in contract.services
            }
        }
    }
    for service in contract.services:
        check = service.healthcheck
        entry: dict[str, object] = {
            "image": service.image,
            "environment": dict(sorted(service.env.items())),
            "healthcheck": {
                "test": healthcheck_test(check.command),
                "interval": f"{check.interval_seconds:g}s",
                "timeout": f"{check.timeout_seconds:g}s",
                "retries": check.retries,
                "start_period": f"{check.start_period_seconds:g}s",
            },
        }
        if service.command:
            entry["command"] = list(service.command)
        if service.ports:
            entry["expose"] = [str(port) for port in service.ports]
        services[service.name] = entry
    return json.dumps({"services": services}, indent=2) + "\n"


def default_smoke_script(toolchains: Sequence[Toolchain], catalog: Catalog) -> bytes:
    """smoke.sh as rendered for a task without a smoke command: version answers and a git work
    tree, nothing written. A bundle whose smoke.sh is exactly this may run it in the nop
    verifier's container before its tests."""
    context = {
        "smoke_command": "",
        "toolchain_layers": catalog.close(toolchains),
        "workdir_abs": "/app",
    }
    return template_environment().get_template("smoke.sh.j2").render(context).encode()


def manifest_json(data: RenderInput) -> str:
    contract = data.definition.environment
    # Built from the definition the compiler validated: constructed as it is, not re-read.
    return BundleManifest.model_construct(
        task_id=data.definition.task_id,
        compiler_revision=COMPILER_REVISION,
        sha256=dict(sorted(data.digests.items())),
        toolchains=[t.value for t in data.definition.toolchains],
        agent_allowed_hosts=list(data.options.agent_allowed_hosts),
        verification=ManifestVerification.model_construct(
            test_command=data.definition.test_command,
            fail_to_pass=list(data.definition.fail_to_pass),
            pass_to_pass=list(data.definition.pass_to_pass),
            held_out=held_out_paths(data.definition, data.tests),
        ),
        environment=contract.as_json() if contract is not None else None,
    ).to_json()


def executable_files(files: Mapping[str, bytes]) -> frozenset[str]:
    return frozenset(
        name
        for name in files
        if name in ("tests/test.sh", "solution/solve.sh", f"{VERIFIER_ASSETS}/verifier.pl")
        or re.fullmatch(rf"{VERIFIER_ASSETS}/hooks/[^/]+/bin/[^/]+", name) is not None
        or any(name == f"{d}/{s}" for d in CONTEXT_DIRS for s in SCRIPTS)
    )


def shell_scripts(files: Mapping[str, bytes]) -> list[str]:
    """Every rendered script the compiler checks with `bash -n`."""
    return sorted(name for name in files if name.endswith((".sh", ".bash")))
