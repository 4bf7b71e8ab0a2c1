"""The environment contract: strict fields, digest-pinned images, services, evidence and the
secret policy (no Docker)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from runner.model.contract import EnvironmentContract, image_parts, secret_problems

DIGEST = "sha256:" + "a" * 64
PLACEHOLDER_RULE = "a secret-named variable must hold a fixed placeholder literal"
INTERPOLATION_RULE = "interpolates a host variable or command"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
ENTROPY = "kq8Zt3YvB1nR7xW2mJ5cL9pF4hD6sG0aE3uT8yQ"  # 39 random base64 characters


@pytest.mark.parametrize(
    ("name", "value", "rules"),
    [
        # accepted
        ("DATABASE_HOST", "db", []),
        ("PGPORT", "5432", []),
        ("NODE_ENV", "test", []),
        ("DB_PASSWORD", "postgres", []),
        ("DB_PASSWORD", "test", []),
        ("API_TOKEN", "placeholder", []),
        ("SECRET_KEY_BASE", "changeme", []),
        ("GITHUB_TOKEN", "dummy", []),
        ("AWS_SECRET_ACCESS_KEY", "", []),
        ("MYSQL_ROOT_PASSWORD", "ROOT", []),
        ("REDIS_PASSWD", "redis", []),
        ("STRIPE_API_KEY", "fake", []),
        ("GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567", []),  # hex stays under 4 bits
        ("DATABASE_URL", "postgres://postgres:postgres@db:5432/test", []),
        ("GREETING", "price is $5", []),
        ("LANG", "C.UTF-8", []),
        ("PATH_NOTE", "a dollar sign at the end $", []),
        # rejected: a secret name with a real-looking value
        ("DB_PASSWORD", "hunter2", [PLACEHOLDER_RULE]),
        ("api_token", "abc123", [PLACEHOLDER_RULE]),
        ("MyCredential", "x", [PLACEHOLDER_RULE]),
        ("SSH_PRIVATE_KEY", "something", [PLACEHOLDER_RULE]),
        ("GPG_PASSPHRASE", "correct horse", [PLACEHOLDER_RULE]),
        # rejected wherever they appear: key material
        ("NOTE", GITHUB, ["a GitHub token"]),
        ("GITHUB_TOKEN", GITHUB, ["a GitHub token", PLACEHOLDER_RULE]),
        ("CONFIG", "github_pat_" + "a" * 30, ["a GitHub token"]),
        ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE", ["an AWS access key id"]),
        ("CERT", "-----BEGIN RSA PRIVATE KEY-----", ["a PEM block"]),
        ("GITLAB", "glpat-" + "x1Y2z3" * 4, ["a GitLab token"]),
        ("SLACK_HOOK", "xoxb-123456789012-abcdefghij", ["a Slack token"]),
        ("PAYMENTS", "sk_live_" + "a1B2c3D4e5F6g7H8", ["a Stripe key"]),
        ("LLM", "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7", ["an API key (sk-…)"]),
        ("MAPS", "AIza" + "B" * 35, ["a Google API key"]),
        ("SESSION", "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", ["a JSON web token"]),
        ("BLOB", ENTROPY, ["a 39-character high-entropy string"]),
        # rejected: interpolation of host variables or commands
        ("HOME_COPY", "$HOME", [INTERPOLATION_RULE]),
        ("WRAPPED", "${USER}", [INTERPOLATION_RULE]),
        ("RUNS", "$(id -u)", [INTERPOLATION_RULE]),
        ("TICKS", "`whoami`", [INTERPOLATION_RULE]),
        ("MIXED_TOKEN", "prefix-${CI_TOKEN}", [INTERPOLATION_RULE, PLACEHOLDER_RULE]),
    ],
)
def test_secret_policy(name: str, value: str, rules: list[str]) -> None:
    problems = secret_problems(name, value)
    assert len(problems) == len(rules), problems
    for problem, rule in zip(problems, rules, strict=True):
        assert rule in problem


def contract(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "baseImage": f"ubuntu:24.04@{DIGEST}",
        "rootSetupCommand": "apt-get update && apt-get install -y libpq-dev",
        "smokeCommand": "psql --version",
        "environmentVariables": {"PGHOST": "db", "PGPASSWORD": "postgres"},
        "services": [
            {
                "name": "db",
                "image": f"postgres:16@{DIGEST}",
                "env": {"POSTGRES_PASSWORD": "postgres"},
                "healthcheck": {"command": ["pg_isready", "-U", "postgres"]},
                "ports": [5432],
            }
        ],
        "evidence": [
            {
                "field": "services",
                "path": ".github/workflows/ci.yml",
                "lines": "10-24",
                "note": "CI runs postgres 16",
            },
            {"field": "environmentVariables.PGHOST", "path": "docker-compose.yml", "note": "db"},
        ],
    }
    base.update(changes)
    return base


def errors(document: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as info:
        EnvironmentContract.model_validate(document)
    return [
        (".".join(str(p) for p in e["loc"]), str(e["msg"]))
        for e in info.value.errors(include_url=False)
    ]


def test_a_full_contract_loads() -> None:
    model = EnvironmentContract.model_validate(contract())
    assert model.services[0].healthcheck.retries == 60
    assert model.as_json()["services"][0]["name"] == "db"


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"baseImage": "ubuntu:24.04"}, "baseImage", "must be pinned by digest"),
        ({"baseImage": "ubuntu@sha256:abc"}, "baseImage", "not an image reference"),
        ({"baseImage": "UPPER/case@" + DIGEST}, "baseImage", "not an image reference"),
        ({"unknownKey": 1}, "unknownKey", "Extra inputs"),
        ({"smoke_command": "x"}, "smoke_command", "Extra inputs"),
        ({"rootSetupCommand": "apt-get\x00"}, "rootSetupCommand", "NUL"),
        ({"environmentVariables": {"A": "$HOME"}}, "environmentVariables", "A: interpolates"),
        (
            {"services": [{"name": "Db", "image": f"p@{DIGEST}", "healthcheck": {"command": "x"}}]},
            "services.0.name",
            "not a DNS label",
        ),
        (
            {
                "services": [
                    {"name": "main", "image": f"p@{DIGEST}", "healthcheck": {"command": "x"}}
                ]
            },
            "services.0.name",
            "reserved",
        ),
        (
            {"services": [{"name": "db", "image": "postgres:16", "healthcheck": {"command": "x"}}]},
            "services.0.image",
            "must be pinned by digest",
        ),
        (
            {"services": [{"name": "db", "image": f"p@{DIGEST}"}]},
            "services.0.healthcheck",
            "Field required",
        ),
        (
            {
                "services": [
                    {
                        "name": "db",
                        "image": f"p@{DIGEST}",
                        "healthcheck": {"command": "x"},
                        "env": {"POSTGRES_PASSWORD": "s3cr3t-pw"},
                    }
                ]
            },
            "services.0.env",
            "POSTGRES_PASSWORD: a secret-named variable",
        ),
        (
            {
                "services": [
                    {"name": "db", "image": f"p@{DIGEST}", "healthcheck": {"command": "x"}},
                    {"name": "db", "image": f"p@{DIGEST}", "healthcheck": {"command": "y"}},
                ]
            },
            "",
            "service names must be unique: db",
        ),
        (
            {"evidence": [{"field": "toolchain", "path": "a", "note": "n"}]},
            "evidence.0.field",
            "names no contract field",
        ),
        (
            {"evidence": [{"field": "services", "path": "../x", "note": "n"}]},
            "evidence.0.path",
            "escapes repository",
        ),
        (
            {"evidence": [{"field": "services", "path": "a", "lines": "9-3", "note": "n"}]},
            "evidence.0.lines",
            "a range",
        ),
        ({"harnessAllow": ["conftest.py\nrm -rf /"]}, "harnessAllow.0", "not a repository path"),
        ({"harnessAllow": ["a b"]}, "harnessAllow.0", "not a repository path"),
        ({"harnessProtect": ["../x.py"]}, "harnessProtect.0", "stay inside the repository"),
        ({"harnessProtect": ["/etc/passwd"]}, "harnessProtect.0", "stay inside the repository"),
        ({"harnessProtect": ["$(id)"]}, "harnessProtect.0", "not a repository path"),
        ({"harnessAllow": ["x"] * 65}, "harnessAllow", "at most 64"),
    ],
)
def test_contract_rules(changes: dict[str, Any], field: str, fragment: str) -> None:
    found = errors(contract(**changes))
    assert any(loc == field and fragment in msg for loc, msg in found), found


def test_image_parts() -> None:
    assert image_parts(f"127.0.0.1:5000/base/img:1.0@{DIGEST}") == (
        "127.0.0.1:5000/base/img",
        "1.0",
        DIGEST,
    )
    assert image_parts(f"postgres@{DIGEST}") == ("postgres", None, DIGEST)
