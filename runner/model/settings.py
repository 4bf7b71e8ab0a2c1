"""Settings: every environment variable the runner reads and every default, in one place.

The CLI passes these names to click (`envvar=`) and builds one frozen VerifySettings per run;
nothing below the CLI reads os.environ except through this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from runner.base.validation import (
    MAX_LOG_BYTES,
    MAX_PIDS_LIMIT,
    MAX_REPEAT,
    MIN_LOG_BYTES,
    MIN_PIDS_LIMIT,
)
from runner.model.toolchains import ToolchainSettings

# ---- environment variables -------------------------------------------------------------------
ENV_BASE_IMAGE = "SELFBENCH_BASE_IMAGE"
ENV_EXTRA_CA = "SELFBENCH_EXTRA_CA_CERTS"
ENV_TOOLCHAIN_SOURCES = "SELFBENCH_TOOLCHAIN_SOURCES"
ENV_TOOLCHAIN_MIRRORS = "SELFBENCH_TOOLCHAIN_MIRRORS"
ENV_BUILD_NETWORK = "SELFBENCH_BUILD_NETWORK"
ENV_CACHE_DIR = "SELFBENCH_CACHE_DIR"
ENV_LOGS_ROOT = "SELFBENCH_LOGS"
ENV_STORAGE_LIMIT = "SELFBENCH_STORAGE_LIMIT"
ENV_SIDECAR_TOKEN = "SELFBENCH_SIDECAR_TOKEN"
ENV_SIDECAR_STATE = "SELFBENCH_SIDECAR_STATE"
ENV_SSH_CONFIG = "SELFBENCH_SSH_CONFIG"
ENV_FORK_SERVER = "SELFBENCH_FORK_SERVER"
ENV_SIGNING_KEY = "SELFBENCH_SIGNING_KEY"
ENV_TRUSTED_KEYS = "SELFBENCH_TRUSTED_KEYS"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")

# ---- defaults --------------------------------------------------------------------------------
DEFAULT_BASE_IMAGE = "ubuntu:24.04"
DEFAULT_LOGS_ROOT = Path("runs")
DEFAULT_PIDS_LIMIT = 4096
DEFAULT_MAX_LOG_BYTES = 20 * 1024 * 1024
SMOKE_TIMEOUT_SECONDS = 600.0  # the smoke gate never waits longer than this
BUILD_GRACE_SECONDS = 60  # a build client's read timeout beyond the build's own deadline
HELPER_BUILD_TIMEOUT_SECONDS = 1800.0  # derived base and prepared toolchain layers
HELPER_CPUS = 2.0
HELPER_MEMORY_MB = 4096
STORAGE_SAMPLE_SECONDS = 2.0  # how often the storage watchdog measures a container
MAX_AGENT_PATCH_BYTES = 512 * 1024 * 1024
CONTAINER_MARGIN_SECONDS = 300  # a gate container's main process outlives its deadline by this
LOCAL_BASE_HINT = (
    "build a local base with scripts/make-base-image.sh and pass "
    "--base-image selfbench/debian-base:bookworm (or set SELFBENCH_BASE_IMAGE)"
)


class StorageLimit(StrEnum):
    """How `storage_mb` is held: the engine's quota (`--storage-opt size`, overlay2 on XFS with
    pquota), a watchdog that measures each container's writable layer and kills it past the
    limit, `auto` (quota where the engine supports it, else the watchdog), or `off`."""

    AUTO = "auto"
    QUOTA = "quota"
    WATCHDOG = "watchdog"
    OFF = "off"


class HackGate(StrEnum):
    """Which canned exploits the hack gate runs. `task`: those whose outcome depends on this
    task (its files, its command, what the patch policy keeps), and each one the policy leaves
    in the tree unless the task's runners are ones whose per-test evidence the project's hack
    corpus proves (runner.judge.runner_proof), which are reported as proved for that runner by
    this runner version. `full`: every exploit through a verifier, every time. `off`: none."""

    TASK = "task"
    FULL = "full"
    OFF = "off"


def environment_value(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value and value.strip() else None


def fork_server_enabled() -> bool:
    """serve and batch fork verifications from a pre-imported server unless this is 0/false."""
    return (environment_value(ENV_FORK_SERVER) or "1").strip().lower() not in ("0", "false", "no")


def environment_list(name: str) -> list[str]:
    value = environment_value(name)
    return [value] if value else []


def proxy_environment() -> dict[str, str]:
    """The standard proxy variables (both spellings) that are set: the only host environment
    that reaches builds and containers."""
    env: dict[str, str] = {}
    for name in PROXY_VARIABLES:
        for variant in (name, name.lower()):
            value = os.environ.get(variant)
            if value:
                env[variant] = value
    return env


def ssh_config_file() -> Path | None:
    """An ssh_config(5) file for ssh engines (`ssh -F`), instead of the user's own: keys,
    known hosts and ports for a CI machine that has no ~/.ssh of its own."""
    value = environment_value(ENV_SSH_CONFIG)
    return Path(value) if value else None


def docker_environment() -> dict[str, str]:
    """The process's environment as the docker CLI reads it (DOCKER_HOST, DOCKER_CONTEXT,
    DOCKER_CONFIG, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, HOME)."""
    return dict(os.environ)


def child_environment() -> dict[str, str]:
    """The environment of a `verify` the sidecar starts: its own, minus the runner settings it
    passes as options (a variable and its option would both count, e.g. toolchain sources
    twice) and minus the sidecar's token."""
    passed = {
        ENV_BASE_IMAGE,
        ENV_EXTRA_CA,
        ENV_TOOLCHAIN_SOURCES,
        ENV_TOOLCHAIN_MIRRORS,
        ENV_BUILD_NETWORK,
        ENV_STORAGE_LIMIT,
        ENV_LOGS_ROOT,
        ENV_SIDECAR_TOKEN,
    }
    return {k: v for k, v in os.environ.items() if k not in passed}


def cache_root() -> Path:
    base = environment_value(ENV_CACHE_DIR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "selfbench-runner"
    )
    return Path(base)


def signing_key_file() -> tuple[Path, bool]:
    """The runner's signing key (runner.compile.signing): the file SELFBENCH_SIGNING_KEY names
    (given: never made), else the host's own under $XDG_CONFIG_HOME (~/.config), made on first
    use; and whether it is the host's own."""
    named = environment_value(ENV_SIGNING_KEY)
    if named:
        return Path(named), False
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "selfbench-runner" / "signing-key", True


def trusted_key_entries() -> list[str]:
    """SELFBENCH_TRUSTED_KEYS: keys (ed25519:<hex>) or files holding one, `:`-separated (a
    key's own `ed25519:` is part of it, not a separator)."""
    entries: list[str] = []
    for part in (environment_value(ENV_TRUSTED_KEYS) or "").split(os.pathsep):
        if entries and entries[-1] == "ed25519":
            entries[-1] += f":{part}"
        elif part:
            entries.append(part)
    return entries


class EvidenceChecks(StrEnum):
    """The verifier's two defences against a patch that makes tests report "passed" without
    the code being right: the in-process checks (the recorders' signed channel, their sessions,
    the interpreters' audit hooks, the runner's own statuses) and the canaries (tests the
    reference solution fails). `all` judges by both; the others, one alone, to show what each
    catches by itself (a test mode: docs/gates.md)."""

    ALL = "all"
    CANARIES = "canaries"
    IN_PROCESS = "in-process"


class SharedSettings(BaseModel):
    """The verify options as given (before they are checked into a VerifySettings): what a
    command takes as one value, and what a supervisor (serve, batch, worker) checks once and
    hands whole to every `verify` it starts, as this model's JSON (`--settings-json`). A new
    setting is a field here, its option in runner.cli.options and its place in VerifySettings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_image: str = DEFAULT_BASE_IMAGE
    extra_ca_certs: Path | None = None
    sources: tuple[str, ...] = ()  # NAME=upstream|registry, as --toolchain-source takes them
    mirrors: tuple[str, ...] = ()  # NAME=URL
    allowed_hosts: tuple[str, ...] = ()
    build_network: str | None = None
    pids_limit: Annotated[int, Field(ge=MIN_PIDS_LIMIT, le=MAX_PIDS_LIMIT)] = DEFAULT_PIDS_LIMIT
    max_log_size: Annotated[int, Field(ge=MIN_LOG_BYTES, le=MAX_LOG_BYTES)] = DEFAULT_MAX_LOG_BYTES
    storage_limit: StorageLimit = StorageLimit.AUTO
    hack_gate: HackGate = HackGate.TASK
    repeat: Annotated[int, Field(ge=0, le=MAX_REPEAT)] = 1
    probe_pass_to_pass: bool = False
    keep_going: bool = False
    hand_caches: bool = True
    evidence_checks: EvidenceChecks = EvidenceChecks.ALL
    hack_memory: bool = True


@dataclass(frozen=True, kw_only=True)
class CompileOptions:
    agent_allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BuildEnvironment:
    """Runner-only build inputs: never written into a bundle."""

    base_image: str = DEFAULT_BASE_IMAGE
    extra_ca_certs: Path | None = None
    extra_ca_pem: bytes | None = None  # the file's bytes, read once when the option is checked
    toolchains: ToolchainSettings = field(default_factory=ToolchainSettings)
    build_network: str | None = None
    proxies: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class VerifySettings:
    repo: str | None = None
    build: BuildEnvironment = field(default_factory=BuildEnvironment)
    compile_options: CompileOptions = field(default_factory=CompileOptions)
    logs_root: Path = DEFAULT_LOGS_ROOT
    run_dir: Path | None = None  # an exact run directory instead of logs_root/<task>/<run>
    keep: bool = False
    remove_images: bool = False
    pids_limit: int = DEFAULT_PIDS_LIMIT
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    storage_limit: StorageLimit = StorageLimit.AUTO
    # The hack gate: canned hostile agent patches must all earn reward 0 (HackGate).
    hack_gate: HackGate = HackGate.TASK
    # The flakiness probe: the oracle's verifier this many more times under perturbations, on
    # the fail-to-pass selection (and pass-to-pass too with probe_pass_to_pass).
    repeat: int = 1
    probe_pass_to_pass: bool = False
    # A red gate settles the verdict: what is still running stops (keep_going: every gate
    # runs to its end, for an author who wants each result in one round).
    keep_going: bool = False
    # Build caches nop's verifier warmed (the toolchain catalog's `caches`) go to the verifiers
    # after it, each a private copy (no_hand_caches: every verifier compiles on its own).
    hand_caches: bool = True
    # Which of the verifier's defences judge (EvidenceChecks): both, by default.
    evidence_checks: EvidenceChecks = EvidenceChecks.ALL
    # The hack gate takes what an earlier verify of the same images saw (runner.run.remembered);
    # no_hack_memory: every exploit's side, policy check and early run afresh (the gate's set
    # and its verdict rules unchanged, unlike --hack-gate full).
    hack_memory: bool = True
    # grade --reward-only: the reward alone, as the hack gate's verifiers take it (a run stops
    # at its first failed test, pass-to-pass runs only after fail-to-pass passed).
    reward_only: bool = False

    def outcome_fields(self) -> dict[str, object]:
        """The settings that change a verification's outcome, as a payload digest takes them
        (the CA by its bytes' digest: a path says nothing about what it holds)."""
        import hashlib

        build, toolchains = self.build, self.build.toolchains
        pem = build.extra_ca_pem
        return {
            "baseImage": build.base_image,
            "extraCa": hashlib.sha256(pem).hexdigest() if pem else None,
            "toolchainSources": {k.value: v.value for k, v in toolchains.sources.items()},
            "toolchainMirrors": {k.value: v for k, v in toolchains.mirrors.items()},
            "agentAllowedHosts": list(self.compile_options.agent_allowed_hosts),
            "buildNetwork": build.build_network,
            "pidsLimit": self.pids_limit,
            "maxLogBytes": self.max_log_bytes,
            "storageLimit": self.storage_limit.value,
            "hackGate": self.hack_gate,
            "repeat": self.repeat,
            "probePassToPass": self.probe_pass_to_pass,
            "evidenceChecks": self.evidence_checks.value,
        }
