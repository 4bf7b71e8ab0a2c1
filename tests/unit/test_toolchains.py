"""The toolchain catalog: well-formed, pinned, closed over implied layers, in seed order."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from runner.base.errors import UsageError
from runner.base.resources import dockerfiles_dir
from runner.compile.templates import template_environment as _environment
from runner.model.task import Toolchain
from runner.model.toolchains import Source, load_catalog, settings_from


def render_all_layers() -> dict[str, str]:
    catalog = load_catalog()
    env = _environment()
    return {
        spec.name.value: env.get_template(spec.script).render(tc=spec)
        for spec in catalog.toolchains.values()
    }


def names(selection: list[str]) -> list[str]:
    return [s.name.value for s in load_catalog().close([Toolchain(t) for t in selection])]


def test_order_and_implied_layers() -> None:
    assert load_catalog().order == [
        Toolchain(t) for t in ("uv", "python", "node", "bun", "go", "rust")
    ]
    assert names(["python"]) == ["uv", "python"]
    assert names(["bun"]) == ["node", "bun"]
    assert names(["rust", "bun", "uv"]) == ["uv", "node", "bun", "rust"]
    assert names(["go", "bun", "uv"]) == ["uv", "node", "bun", "go"]


def test_seed_versions() -> None:
    catalog = load_catalog()
    versions = {k.value: v.version for k, v in catalog.toolchains.items()}
    assert versions["node"] == "22.14.0"
    assert versions["bun"] == "1.3.14"
    assert versions["go"] == "1.25.0"
    assert versions["rust"] == "1.90.0"
    assert catalog.toolchains[Toolchain.PYTHON].versions == ["3.11", "3.12", "3.13"]
    assert catalog.toolchains[Toolchain.NODE].env["PLAYWRIGHT_BROWSERS_PATH"] == "/opt/playwright"


def test_every_entry_is_pinned_and_checked() -> None:
    for spec in load_catalog().toolchains.values():
        assert spec.smoke, spec.name
        assert spec.upstream.integrity in ("pinned", "sidecar", "uv-embedded", "npm")
        if spec.registry is not None:
            for entry in spec.registry.arch.values():
                assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256)
                assert spec.version in entry.file


# The upstream release checksums of the catalog's versions, as each project publishes them
# (Node's signed SHASUMS256.txt, the Go download page, the rustup archive's .sha256 files).
PINS = {
    "node": {
        "amd64": "69b09dba5c8dcb05c4e4273a4340db1005abeafe3927efda2bc5b249e80437ec",
        "arm64": "08bfbf538bad0e8cbb0269f0173cca28d705874a67a22f60b57d99dc99e30050",
    },
    "go": {
        "amd64": "2852af0cb20a13139b3448992e69b868e50ed0f8a1e5940ee1de9e19a123b613",
        "arm64": "05de75d6994a2783699815ee553bd5a9327d8b79991de36e38b66862782f54ae",
    },
    "rust": {
        "amd64": "20a06e644b0d9bd2fbdbfd52d42540bdde820ea7df86e92e533c073da0cdd43c",
        "arm64": "e3853c5a252fca15252d07cb23a1bdd9377a8c6f3efa01531109281ae47f841c",
    },
}


@pytest.mark.parametrize("name", sorted(PINS))
def test_upstream_downloads_are_checked_against_the_pin_not_a_published_file(name: str) -> None:
    """A mirror that serves its own file and its own checksum file must not be believed: the
    script checks the catalog's pin and never fetches a checksum file."""
    spec = load_catalog().toolchains[Toolchain(name)]
    assert spec.upstream.integrity == "pinned"
    assert {a: e.sha256 for a, e in spec.upstream.arch.items()} == PINS[name]
    script = render_all_layers()[name]
    upstream = script.split("  upstream)")[-1]  # rust has no other source
    for arch, digest in PINS[name].items():
        assert f"{arch}) triple=" in upstream and f"sha256='{digest}'" in upstream
    assert f'selfbench_check {name} "$url"' in upstream and '"$sha256"' in upstream
    assert "selfbench_sidecar_sha256" not in upstream and "SHASUMS" not in upstream


def test_a_pin_is_for_every_architecture_or_none() -> None:
    from runner.model.toolchains import parse_catalog

    data = tomllib.loads((dockerfiles_dir() / "toolchains.toml").read_text())
    del data["toolchains"]["go"]["upstream"]["arch"]["arm64"]["sha256"]
    with pytest.raises(ValueError, match="integrity 'pinned' means a sha256 for every"):
        parse_catalog(data)


def test_scripts_check_before_use() -> None:
    for name, script in render_all_layers().items():
        if name in ("uv", "node", "go"):
            assert "selfbench_registry_artifact" in script
            assert "selfbench_check" in script
        assert "| sh" not in script and "| bash" not in script, name


UPSTREAM_HOSTS = {"github.com", "nodejs.org", "dl.google.com", "static.rust-lang.org"}


def test_only_upstream_hosts_are_named() -> None:
    """Registries are reached through pip/npm/apt only: no other host appears in templates."""
    text = "".join(p.read_text() for p in dockerfiles_dir().rglob("*") if p.is_file())
    hosts = set(re.findall(r"https?://([A-Za-z0-9.-]+)", text))
    assert hosts == UPSTREAM_HOSTS


def test_settings_parsing() -> None:
    settings = settings_from(
        ["uv=registry,node=registry", "go=upstream"], ["rust=https://mirror.example/rust/"]
    )
    assert settings.source(Toolchain.UV) is Source.REGISTRY
    assert settings.source(Toolchain.GO) is Source.UPSTREAM
    assert settings.source(Toolchain.PYTHON) is Source.UPSTREAM
    catalog = load_catalog()
    args = settings.build_args(catalog.close([Toolchain.UV, Toolchain.RUST, Toolchain.BUN]))
    assert args == {
        "SELFBENCH_UV_SOURCE": "registry",
        "SELFBENCH_NODE_SOURCE": "registry",
        "SELFBENCH_RUST_MIRROR": "https://mirror.example/rust",
    }


def test_bun_registry_is_its_upstream() -> None:
    """bun is installed from npm either way: `bun=registry` is accepted and is the same path."""
    settings = settings_from(["bun=registry"], [])
    assert settings.source(Toolchain.BUN) is Source.UPSTREAM
    assert settings.build_args(load_catalog().close([Toolchain.BUN])) == {}


@pytest.mark.parametrize(
    ("sources", "mirrors", "message"),
    [
        (["java=registry"], [], "unknown toolchain 'java'"),
        (["uv=cloud"], [], "unknown source 'cloud'"),
        (["rust=registry"], [], "rust has no registry source"),
        (["python=registry"], [], "python has no registry source"),
        (["uv"], [], "expected NAME=VALUE"),
        ([], ["bun=https://x"], "bun cannot be mirrored"),
        ([], ["go=ftp://x"], "expected an http(s) URL"),
    ],
)
def test_bad_settings(sources: list[str], mirrors: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        settings_from(sources, mirrors)


@pytest.mark.parametrize(
    "path", ["relative/go-build", "/opt/$(id)", "/opt/a b", "/opt/../etc", "/opt/*", ""]
)
def test_a_cache_is_a_plain_absolute_directory(path: str) -> None:
    """The hand-off's script takes the catalog's cache directories as arguments: no word, glob,
    substitution or parent step gets through."""
    from runner.model.toolchains import parse_catalog

    data = tomllib.loads((dockerfiles_dir() / "toolchains.toml").read_text())
    data["toolchains"]["go"]["caches"] = [path]
    with pytest.raises(ValueError, match="is not a plain absolute path"):
        parse_catalog(data)


def test_go_s_build_cache_is_the_one_handed_on() -> None:
    from runner.model.toolchains import load_catalog

    caches = {spec.name.value: spec.caches for spec in load_catalog().toolchains.values()}
    # Go's build cache lives outside /app (GOCACHE); every other toolchain's caches are either
    # the dependency stores setup filled (already in the image) or inside the tree.
    assert caches == {
        "uv": [],
        "python": [],
        "node": [],
        "bun": [],
        "go": ["/opt/selfbench-cache/go-build"],
        "rust": [],
    }
    assert (
        "GOCACHE=/opt/selfbench-cache/go-build"
        in (dockerfiles_dir() / "toolchains.Dockerfile.j2").read_text()
    )


def test_a_cpython_download_that_fails_names_the_download_and_the_way_around(
    tmp_path: Path,
) -> None:
    """Where no host serves CPython, uv says "dns error" and nothing more: the python layer
    adds what it was downloading and what to do instead, as its last line (the build's tail)."""
    script = render_all_layers()["python"]
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in {
        "apt-get": "exit 0",
        "uv": 'echo "error: Request failed: dns error" >&2; exit 2',
    }.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    lib = (dockerfiles_dir() / "toolchains" / "lib.sh").read_text()
    (tmp_path / "layer.sh").write_text(script.replace(". /opt/selfbench-toolchains/lib.sh", lib))
    done = subprocess.run(
        ["bash", str(tmp_path / "layer.sh")],
        capture_output=True,
        text=True,
        env={"PATH": f"{stubs}:/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("selfbench: toolchain python: uv could not install CPython 3.11, 3.12")
    assert "--toolchain-mirror python=URL" in last and "base image" in last
