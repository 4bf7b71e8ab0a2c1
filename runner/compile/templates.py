"""The templates' side of rendering (pure): the Jinja environment over dockerfiles/, the only
ways a value reaches a Dockerfile (`dockerfile_value`, `dockerfile_quote`) or a script
(`quote`), and the toolchain layers' scripts and build contexts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache

import jinja2

from runner.base import validation as v
from runner.base.resources import dockerfiles_dir
from runner.compile.templatecache import bytecode_cache
from runner.model.shell import quote
from runner.model.toolchains import ToolchainSpec

DEFAULT_BASE_IMAGE = "ubuntu:24.04"  # the seed's base for tasks that pin none


class RenderError(ValueError):
    """A value cannot be rendered safely (the validation layer should have refused it)."""


def dockerfile_value(value: str) -> str:
    """A value placed on a Dockerfile line: refuses anything that could end the line."""
    problem = v.control_character(value)
    if problem:
        raise RenderError(f"cannot place a value that {problem} in a Dockerfile")
    return value


_DOCKER_ESCAPE = re.compile(r'([\\"$])')


def dockerfile_quote(value: str) -> str:
    """A double-quoted Dockerfile word (ENV/LABEL) that Docker reads back as `value`: its
    lexer treats backslash, double quote and `$` specially inside double quotes."""
    return '"' + _DOCKER_ESCAPE.sub(r"\\\1", dockerfile_value(value)) + '"'


def _shell(value: str) -> str:
    return quote(dockerfile_value(value))


@cache
def template_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(dockerfiles_dir())),
        bytecode_cache=bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        autoescape=False,
    )
    env.filters["shquote"] = quote
    env.filters["docker_shquote"] = _shell
    env.filters["docker_quote"] = dockerfile_quote
    env.filters["docker_value"] = dockerfile_value
    env.globals.update(
        registry_case=_registry_case,
        upstream_case=_upstream_case,
        upstream_url=_upstream_url,
        upstream_digest=_upstream_digest,
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
    return _case(
        [
            (a, {"triple": e.triple, **({"sha256": e.sha256} if e.sha256 else {})})
            for a, e in sorted(spec.upstream.arch.items())
        ]
    )


def _upstream_digest(spec: ToolchainSpec) -> str:
    """The digest an upstream download is checked against, as a shell word: the catalog's pin
    (set by the arch case), else the `.sha256` published beside "$url"."""
    if spec.upstream.integrity == "pinned":
        return '"$sha256"'
    return '"$(selfbench_sidecar_sha256 "$url")"'


def _upstream_url(spec: ToolchainSpec) -> str:
    assert spec.upstream.url is not None and spec.upstream.mirror_base is not None
    base = f"${{SELFBENCH_{spec.name.value.upper()}_MIRROR:-{spec.upstream.mirror_base}}}"
    return spec.upstream.url.format(
        base=base, version=spec.version, triple="${triple}", rustup_version=spec.rustup_version
    )


def toolchain_scripts(layers: Sequence[ToolchainSpec]) -> dict[str, bytes]:
    env = template_environment()
    scripts = {
        f"toolchains/{name}": (dockerfiles_dir() / "toolchains" / name).read_bytes()
        for name in ("lib.sh", "share-caches.sh")
    }
    for spec in layers:
        scripts[f"toolchains/{spec.name.value}.sh"] = (
            env.get_template(spec.script).render(tc=spec).encode()
        )
    return scripts


def render_toolchain_context(layers: Sequence[ToolchainSpec]) -> dict[str, bytes]:
    """A build context holding just the base and toolchain layers, as every bundle renders
    them: building it warms the layer cache for any task with the same toolchain set."""
    dockerfile = (
        template_environment()
        .get_template("toolchains.Dockerfile.j2")
        .render(toolchain_layers=list(layers), base_image=DEFAULT_BASE_IMAGE)
        .encode()
    )
    return {"Dockerfile": dockerfile, **toolchain_scripts(layers)}


def render_derived_base(*, extra_ca: bool, artifacts: bool) -> bytes:
    template = template_environment().get_template("derived-base.Dockerfile.j2")
    return template.render(extra_ca=extra_ca, artifacts=artifacts).encode()


_INSTRUCTION = re.compile(r"^([A-Za-z]+)(?:\s|$)")


def dockerfile_instructions(text: str) -> list[str]:
    """The instruction keywords of a Dockerfile, in order (comments and continuation lines
    skipped): what an injected line would change."""
    instructions: list[str] = []
    continued = False
    for line in text.splitlines():
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            match = _INSTRUCTION.match(stripped)
            instructions.append(match.group(1).upper() if match else "?")
        if stripped.startswith("#") and not continued:
            continue
        continued = stripped.endswith("\\")
    return instructions
