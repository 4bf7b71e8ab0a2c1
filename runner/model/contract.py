"""The environment contract (SelfBench 0.3.8, `definition.environment`), strict, and its secret
policy (pure).

The author derives the contract from the repository at its base commit: a digest-pinned base
image, a root setup command, the smoke command, environment variables, verifier-only services
and the repository evidence for each choice. "Secret-named variables are accepted only with fixed
placeholder literals; values that look like real key material or interpolate host variables are
rejected" (the seed): every rejection names the field and the rule.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from runner.base import validation as v

# ---- image references ------------------------------------------------------------------------

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# Docker reads the first component as a registry host only when it has a dot or a port or is
# localhost; otherwise it is a (lower-case) path component.
_HOST = rf"(?:localhost(?::[0-9]+)?|{_LABEL}(?:\.{_LABEL})+(?::[0-9]+)?|{_LABEL}:[0-9]+)"
_NAME = rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
PINNED_REFERENCE = re.compile(
    rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?@sha256:(?P<digest>[0-9a-f]{{64}})$"
)
REFERENCE = re.compile(
    rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@sha256:(?P<digest>[0-9a-f]{{64}}))?$"
)


def pinned_image(value: str) -> str:
    """`name[:tag]@sha256:<64 hex>`: an image the runner can check is what the author meant."""
    if len(value) > 512 or not REFERENCE.match(value):
        raise ValueError(f"{value[:80]!r} is not an image reference")
    if not PINNED_REFERENCE.match(value):
        raise ValueError(
            "must be pinned by digest: name[:tag]@sha256:<64 hex> (a tag alone can change under "
            "the task)"
        )
    return value


def image_parts(reference: str) -> tuple[str, str | None, str]:
    """(name, tag, digest) of a pinned reference."""
    match = PINNED_REFERENCE.match(reference)
    if not match:
        raise ValueError(f"{reference!r} is not pinned by digest")
    return match["name"], match["tag"], "sha256:" + match["digest"]


# ---- the secret policy ------------------------------------------------------------------------

SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH_KEY",
    re.IGNORECASE,
)
# Fixed placeholder literals a secret-named variable may hold (compared case-insensitively).
PLACEHOLDERS = frozenset(
    {
        "",
        "test",
        "tests",
        "testing",
        "placeholder",
        "changeme",
        "change-me",
        "change_me",
        "dummy",
        "example",
        "fake",
        "secret",
        "password",
        "pass",
        "postgres",
        "mysql",
        "redis",
        "root",
        "admin",
        "local",
        "dev",
        "ci",
        "selfbench",
        "not-a-secret",
        "xxx",
    }
)
# Well-known shapes of real key material: (what it looks like, pattern).
KEY_MATERIAL: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a PEM block", re.compile(r"-----BEGIN [A-Z0-9 ]+-----")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    (
        "a GitHub token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    ),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a Stripe key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("an API key (sk-…)", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    (
        "a JSON web token",
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"),
    ),
    ("a private key assignment", re.compile(r"(?i)\bprivate[_ ]key\s*[:=]\s*\S{16,}")),
)
INTERPOLATION = re.compile(r"\$\{?[A-Za-z_]|\$\(|`")
_TOKENISH = re.compile(r"[A-Za-z0-9+/=_\-]{32,}")
ENTROPY_BITS = 4.5  # hex tops out at 4.0 bits per character; random base64 is near 6


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def secret_problems(name: str, value: str) -> list[str]:
    """Why `name=value` breaks the secret policy (empty when it does not)."""
    problems = []
    if INTERPOLATION.search(value):
        problems.append(
            "interpolates a host variable or command ($VAR, ${VAR}, $(...), backticks): the "
            "value must be a fixed literal"
        )
    for label, pattern in KEY_MATERIAL:
        if pattern.search(value):
            problems.append(f"looks like real key material ({label})")
            break
    else:
        for token in _TOKENISH.findall(value):
            if _entropy(token) >= ENTROPY_BITS:
                problems.append(
                    f"looks like real key material (a {len(token)}-character high-entropy string)"
                )
                break
    if SECRET_NAME.search(name) and value.strip().lower() not in PLACEHOLDERS:
        problems.append(
            "a secret-named variable must hold a fixed placeholder literal (one of: "
            + ", ".join(repr(p) for p in sorted(PLACEHOLDERS) if p)
            + ", or empty)"
        )
    return problems


def check_variables(variables: Mapping[str, str]) -> Mapping[str, str]:
    if len(variables) > v.MAX_ENV_VARS:
        raise ValueError(f"at most {v.MAX_ENV_VARS} variables")
    problems: list[str] = []
    for key, value in variables.items():
        message = v.check_env_key(key)
        if message:
            raise ValueError(message)
        message = v.check_text(value, max_length=v.MAX_ENV_VALUE, allow_empty=True)
        if message:
            raise ValueError(f"value of {key} {message}")
        problems.extend(f"{key}: {p}" for p in secret_problems(key, value))
    if problems:
        raise ValueError("; ".join(problems))
    return variables


# ---- the model --------------------------------------------------------------------------------

CONTRACT_FIELDS = (
    "baseImage",
    "testsNetwork",
    "rootSetupCommand",
    "setupCommand",
    "smokeCommand",
    "environmentVariables",
    "services",
    "harnessAllow",
    "harnessProtect",
)
RESERVED_SERVICES = frozenset({"main", "agent", "verifier"})
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_LINES = re.compile(r"^(\d{1,7})(?:-(\d{1,7}))?$")


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )


def _text(max_length: int, *, newlines: bool = False) -> AfterValidator:
    return AfterValidator(partial(v.require_text, max_length=max_length, allow_newlines=newlines))


Command = Annotated[str, _text(v.MAX_COMMAND, newlines=True)]
Argv = Annotated[list[Annotated[str, _text(v.MAX_SHORT_TEXT)]], Field(min_length=1, max_length=64)]


class Healthcheck(_Strict):
    """Docker's HEALTHCHECK: a command that exits 0 once the service is ready."""

    command: Argv | Annotated[str, _text(v.MAX_SHORT_TEXT)]
    interval_seconds: float = Field(default=1.0, gt=0, le=300)
    timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    retries: int = Field(default=60, ge=1, le=10_000)
    start_period_seconds: float = Field(default=0.0, ge=0, le=3600)


class Service(_Strict):
    """A verifier-only service: started for the verifier's gate on a network the agent never
    joins, reachable by `name`."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    image: Annotated[str, AfterValidator(pinned_image)]
    env: dict[str, str] = Field(default_factory=dict)
    command: Argv | None = None
    healthcheck: Healthcheck
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list, max_length=64)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _DNS_LABEL.fullmatch(name):
            raise ValueError(f"{name[:80]!r} is not a DNS label ([a-z0-9-], at most 63)")
        if name in RESERVED_SERVICES:
            raise ValueError(f"{name!r} is reserved")
        return name

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        return dict(check_variables(env))


class Evidence(_Strict):
    """The repository file that justifies a contract choice."""

    field: Annotated[str, _text(128)]
    path: Annotated[str, _text(v.MAX_SHORT_TEXT)]
    lines: Annotated[str, Field(max_length=16)] | None = None
    note: Annotated[str, _text(4096)]

    @field_validator("field")
    @classmethod
    def _field(cls, field: str) -> str:
        root = re.split(r"[.\[]", field, maxsplit=1)[0]
        if root not in CONTRACT_FIELDS:
            raise ValueError(
                f"{field!r} names no contract field (one of {', '.join(CONTRACT_FIELDS)})"
            )
        return field

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        v.normalize_repo_path(path)
        return path

    @field_validator("lines")
    @classmethod
    def _lines(cls, lines: str | None) -> str | None:
        if lines is None:
            return None
        match = _LINES.match(lines)
        if not match or (match[2] and int(match[2]) < int(match[1])) or int(match[1]) < 1:
            raise ValueError("must be a line `N` or a range `N-M`")
        return lines


_HARNESS_PATTERN = re.compile(r"[A-Za-z0-9._*?@+/-]{1,256}")


def _harness_pattern(pattern: str) -> str:
    if not _HARNESS_PATTERN.fullmatch(pattern):
        raise ValueError(
            f"{pattern[:80]!r} is not a repository path pattern "
            "([A-Za-z0-9._*?@+/-], at most 256 characters)"
        )
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ValueError(f"{pattern[:80]!r} must be relative and stay inside the repository")
    return pattern


HarnessPattern = Annotated[str, AfterValidator(_harness_pattern)]


class EnvironmentContract(_Strict):
    base_image: Annotated[str, AfterValidator(pinned_image)] | None = None
    # Whether the held-out tests may reach the internet. Default: they may not (services of the
    # contract stay reachable); a task that needs the network declares `public`.
    tests_network: Literal["no-network", "public"] = "no-network"
    root_setup_command: Command | None = None
    smoke_command: Command | None = None
    environment_variables: dict[str, str] = Field(default_factory=dict)
    services: list[Service] = Field(default_factory=list, max_length=16)
    # The test harness list is the runner's (test runner configuration, hooks, the files the
    # test command and selectors name); a task adds files to it or lets the agent change some.
    harness_allow: list[HarnessPattern] = Field(default_factory=list, max_length=64)
    harness_protect: list[HarnessPattern] = Field(default_factory=list, max_length=64)
    evidence: list[Evidence] = Field(default_factory=list, max_length=256)

    @field_validator("environment_variables")
    @classmethod
    def _variables(cls, variables: dict[str, str]) -> dict[str, str]:
        return dict(check_variables(variables))

    @model_validator(mode="after")
    def _unique_services(self) -> EnvironmentContract:
        names = [s.name for s in self.services]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"service names must be unique: {', '.join(duplicates)}")
        return self

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
