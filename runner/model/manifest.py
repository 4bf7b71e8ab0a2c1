"""A bundle's .selfbench-manifest.json (pure): what the compiler recorded beside Harbor's files
(the task, the compiler, each build context's digest, the environment contract, what the hack
gate chooses its exploits from) and what sealing adds (the seal, the census).

The compiler writes it through BundleManifest; the runner reads it back through the same model.
A bundle is untrusted, so reading is lenient field by field: a malformed field reads as its
default (fewer exploits, never a crash), strings are bounded as the task's own inputs are, and
the environment stays raw for runner.compile.bundle.read_contract, which validates it strictly
and names the field."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runner.base import validation as v


def _strings(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [s for s in value[: v.MAX_LIST] if isinstance(s, str) and 0 < len(s) <= v.MAX_SHORT_TEXT]


def _command(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= v.MAX_TEST_COMMAND else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and len(value) <= v.MAX_SHORT_TEXT else None


def _digests(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: d for k, d in value.items() if isinstance(k, str) and isinstance(d, str)}


Strings = Annotated[list[str], BeforeValidator(_strings)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="ignore"
    )


class ManifestVerification(_Model):
    """What the runner's hack gate chooses its exploits from (Harbor ignores it)."""

    test_command: Annotated[str | None, BeforeValidator(_command)] = None
    fail_to_pass: Strings = Field(default_factory=list)
    pass_to_pass: Strings = Field(default_factory=list)
    held_out: Strings = Field(default_factory=list)


def _verification(value: object) -> ManifestVerification | None:
    return ManifestVerification.model_validate(value) if isinstance(value, dict) else None


class BundleManifest(_Model):
    task_id: Annotated[str | None, BeforeValidator(_text)] = None
    compiler_revision: Annotated[str | None, BeforeValidator(_text)] = None
    sha256: Annotated[dict[str, str], BeforeValidator(_digests)] = Field(default_factory=dict)
    toolchains: Strings = Field(default_factory=list)
    agent_allowed_hosts: Strings = Field(default_factory=list)
    verification: Annotated[ManifestVerification | None, BeforeValidator(_verification)] = None
    # The environment contract as compiled, raw: whatever JSON is there goes to read_contract,
    # which validates it strictly and names what is wrong.
    environment: Any = None

    def to_json(self) -> str:
        """The compiler's bytes: two-space indented, ASCII, in the fields' order; no
        environment key for a task without a contract."""
        document = self.model_dump(by_alias=True)
        if self.environment is None:
            del document["environment"]
        return json.dumps(document, indent=2, sort_keys=False) + "\n"


# A manifest's top-level fields as the compiler writes them (what a seal keeps of a manifest).
MANIFEST_FIELDS = frozenset(to_camel(name) for name in BundleManifest.model_fields)
