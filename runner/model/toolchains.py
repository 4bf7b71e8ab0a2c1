"""The toolchain catalog (pure): loading it, closing a selection over implied toolchains, and the
per-toolchain build settings (source, mirror) the runner passes at build time."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from enum import StrEnum
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runner.base.errors import UsageError
from runner.base.resources import dockerfiles_dir
from runner.model.task import Toolchain

Arch = Literal["amd64", "arm64"]
ARCHES: tuple[Arch, ...] = ("amd64", "arm64")


class Source(StrEnum):
    UPSTREAM = "upstream"
    REGISTRY = "registry"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UpstreamArch(_Frozen):
    triple: str
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class Upstream(_Frozen):
    mirror_base: str | None = None
    url: str | None = None
    # pinned: the catalog's sha256 per architecture; sidecar: the `.sha256` published beside
    # the artifact; uv-embedded / npm: the tool checks what it downloads itself.
    integrity: Literal["pinned", "sidecar", "uv-embedded", "npm"]
    arch: dict[Arch, UpstreamArch] = Field(default_factory=dict)


class RegistryArch(_Frozen):
    file: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    platform: str


class Registry(_Frozen):
    manager: Literal["pip", "npm"]
    package: str
    arch: dict[Arch, RegistryArch]


_CACHE_PATH = re.compile(r"(/[A-Za-z0-9_.-]+)+")


class ToolchainSpec(_Frozen):
    name: Toolchain
    version: str
    versions: list[str] = Field(default_factory=list)
    rustup_version: str | None = None
    implies: list[Toolchain]
    script: str
    env: dict[str, str] = Field(default_factory=dict)
    # Build caches a test run writes outside /app (content-addressed: an entry is found by the
    # digest of its inputs). A trusted run's additions are handed to the verifiers after it as a
    # private copy (runner.plan.types.CacheHandOff).
    caches: list[str] = Field(default_factory=list)
    smoke: list[str] = Field(min_length=1)
    upstream: Upstream
    registry: Registry | None = None
    # What an author does where neither the upstream download nor a registry answers, beside a
    # mirror (runner.run.reach): one clause, said by `init`.
    without_download: str | None = None

    @model_validator(mode="after")
    def _pinned(self) -> ToolchainSpec:
        if self.upstream.integrity in ("pinned", "sidecar") and set(self.upstream.arch) != set(
            ARCHES
        ):
            raise ValueError(f"{self.name}: upstream needs every architecture in {ARCHES}")
        pins = [a.sha256 is not None for a in self.upstream.arch.values()]
        if (self.upstream.integrity == "pinned") != (bool(pins) and all(pins)):
            raise ValueError(
                f"{self.name}: integrity 'pinned' means a sha256 for every architecture, "
                "and only then"
            )
        if self.registry is not None and set(self.registry.arch) != set(ARCHES):
            raise ValueError(f"{self.name}: registry needs every architecture in {ARCHES}")
        for path in self.caches:
            # The hand-off's script takes these as arguments: plain absolute directories only.
            if not _CACHE_PATH.fullmatch(path) or ".." in path.split("/"):
                raise ValueError(f"{self.name}: cache {path!r} is not a plain absolute path")
        return self

    @property
    def registry_package(self) -> str:
        assert self.registry is not None
        return f"{self.registry.package}=={self.version}"


class Catalog(_Frozen):
    order: list[Toolchain]
    toolchains: dict[Toolchain, ToolchainSpec]

    def close(self, selected: Iterable[Toolchain]) -> list[ToolchainSpec]:
        """The selection plus everything it implies, in install order."""
        wanted: set[Toolchain] = set()
        stack = list(selected)
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(self.toolchains[name].implies)
        return [self.toolchains[name] for name in self.order if name in wanted]


def parse_catalog(data: Mapping[str, object]) -> Catalog:
    raw = dict(data)
    toolchains = raw.get("toolchains")
    if isinstance(toolchains, dict):
        raw["toolchains"] = {k: {"name": k, **v} for k, v in toolchains.items()}
    return Catalog.model_validate(raw)


@cache
def load_catalog() -> Catalog:
    path = dockerfiles_dir() / "toolchains.toml"
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    try:
        return parse_catalog(data)
    except ValidationError as exc:  # pragma: no cover - the shipped catalog is tested
        raise RuntimeError(f"{path}: {exc}") from exc


class ToolchainSettings(BaseModel):
    """Build-time choices per toolchain; never written into the bundle."""

    model_config = ConfigDict(frozen=True)

    sources: dict[Toolchain, Source] = Field(default_factory=dict)
    mirrors: dict[Toolchain, str] = Field(default_factory=dict)

    def source(self, name: Toolchain) -> Source:
        return self.sources.get(name, Source.UPSTREAM)

    def build_args(self, layers: Iterable[ToolchainSpec]) -> dict[str, str]:
        args: dict[str, str] = {}
        for spec in layers:
            key = spec.name.value.upper()
            if self.source(spec.name) is not Source.UPSTREAM:
                args[f"SELFBENCH_{key}_SOURCE"] = self.source(spec.name).value
            if spec.name in self.mirrors:
                args[f"SELFBENCH_{key}_MIRROR"] = self.mirrors[spec.name].rstrip("/")
        return args


def parse_assignments(values: Iterable[str], *, option: str) -> dict[str, str]:
    """`NAME=VALUE` items, also comma-separated (`uv=registry,node=registry`)."""
    result: dict[str, str] = {}
    for value in values:
        for item in (part.strip() for part in value.split(",")):
            if not item:
                continue
            name, sep, setting = item.partition("=")
            if not sep or not name or not setting:
                raise UsageError(f"{option}: expected NAME=VALUE, got {item!r}")
            result[name.strip()] = setting.strip()
    return result


def settings_from(
    sources: Iterable[str], mirrors: Iterable[str], catalog: Catalog | None = None
) -> ToolchainSettings:
    catalog = catalog or load_catalog()
    chosen: dict[Toolchain, Source] = {}
    for name, value in parse_assignments(sources, option="--toolchain-source").items():
        toolchain = _toolchain(name, "--toolchain-source")
        try:
            source = Source(value)
        except ValueError:
            raise UsageError(
                f"--toolchain-source {name}: unknown source {value!r} (upstream or registry)"
            ) from None
        spec = catalog.toolchains[toolchain]
        if source is Source.REGISTRY and spec.registry is None:
            if spec.upstream.integrity != "npm":
                raise UsageError(
                    f"--toolchain-source {name}=registry: {name} has no registry source in the "
                    "catalog"
                )
            # Its upstream is a registry already (bun is installed from npm, checked by npm):
            # the registry source is the same path.
            source = Source.UPSTREAM
        chosen[toolchain] = source
    mirror_map: dict[Toolchain, str] = {}
    for name, url in parse_assignments(mirrors, option="--toolchain-mirror").items():
        toolchain = _toolchain(name, "--toolchain-mirror")
        if catalog.toolchains[toolchain].upstream.mirror_base is None:
            raise UsageError(f"--toolchain-mirror {name}: {name} cannot be mirrored")
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--toolchain-mirror {name}: expected an http(s) URL, got {url!r}")
        mirror_map[toolchain] = url
    return ToolchainSettings(sources=chosen, mirrors=mirror_map)


def _toolchain(name: str, option: str) -> Toolchain:
    try:
        return Toolchain(name)
    except ValueError:
        known = ", ".join(t.value for t in Toolchain)
        raise UsageError(f"{option}: unknown toolchain {name!r} (one of {known})") from None
