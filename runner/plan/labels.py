"""The labels the runner puts on everything it creates (containers, networks, volumes, images,
committed build steps), and the one label maker: what the runner filters by, cleans up by, and
what tells a stale run's leftovers from a live one's (pure)."""

from __future__ import annotations

LABEL_RUNNER = "org.selfbench.runner"

LABEL_RUN = "org.selfbench.run"

LABEL_TASK = "org.selfbench.task"

LABEL_KIND = "org.selfbench.kind"

LABEL_INPUTS = "org.selfbench.inputs"

LABEL_OWNER = "org.selfbench.owner"

LABEL_FROM_ID = "org.selfbench.from-id"

LABEL_SIDE = "org.selfbench.side"  # a gate container's side: agent, verifier, service-<name>

# A committed task step (runner.engine.steps): the hash of what it ran on, its cache key.
LABEL_STEP = "org.selfbench.step"


def runner_labels(
    *,
    kind: str | None = None,
    run: str | None = None,
    task: str | None = None,
    owner: str | None = None,
    inputs: str | None = None,
    from_id: str | None = None,
    side: str | None = None,
) -> dict[str, str]:
    """The one label maker: what the runner puts on everything it creates (and filters by).
    `owner` (host:pid:start) lets the stale-run reaper remove what a dead runner left; a name
    left out is not set."""
    named = {
        LABEL_RUN: run,
        LABEL_TASK: task,
        LABEL_KIND: kind,
        LABEL_OWNER: owner,
        LABEL_INPUTS: inputs,
        LABEL_FROM_ID: from_id,
        LABEL_SIDE: side,
    }
    return {LABEL_RUNNER: "1", **{k: v for k, v in named.items() if v}}
