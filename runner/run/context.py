"""What an execution is given besides its plan: runner-only values (proxies, the CA, the artifact
fetcher, predicted patches) and where progress lines go."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.model.predictions import PatchPredictions
from runner.model.toolchains import Arch
from runner.run.remembered import Remembered

Progress = Callable[[str, str], None]
FetchArtifact = Callable[[str, Arch], Path]


@dataclass(frozen=True, kw_only=True)
class ExecutionEnv:
    """Runner-only values a plan names but does not hold (they may be secret or large)."""

    proxies: Mapping[str, str]
    extra_ca_pem: bytes | None
    fetch_artifact: FetchArtifact
    # Patches the oracle's agent side made before (None: the verifier always waits for it).
    predictions: PatchPredictions | None = None
    # The hack gate's exploit sides and policy checks earlier runs saw (None: always run).
    remembered: Remembered | None = None
