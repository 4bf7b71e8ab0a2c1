"""The runner's signing key (runner.compile.signing): made once per host, the owner's alone,
the same for runners that start at once; a key file anyone else can read is refused by name."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runner.base.errors import UsageError
from runner.compile import signing
from tests.helpers import run_cli_captured


def test_the_host_key_is_made_once_and_is_its_owner_s_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    first = signing.signer()
    path = tmp_path / "config" / "selfbench-runner" / "signing-key"
    assert first.path == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    signing._signer.cache_clear()
    assert signing.signer().key_id == first.key_id  # read back, not made again
    assert [p.name for p in path.parent.iterdir()] == ["signing-key"]  # no temporary left
    code, out, _ = run_cli_captured("key")
    assert code == 0 and out.strip() == signing.public_text(first.public)


def test_runners_that_start_at_once_keep_one_key(tmp_path: Path) -> None:
    """Each writes its key under a name of its own and links it into place: one wins, and
    every one of them signs with the key that won."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("SELFBENCH_SIGNING_KEY", None)
    code = "from runner.compile import signing; print(signing.signer().key_id)"
    started = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    ids = {process.communicate(timeout=60)[0].strip() for process in started}
    assert len(ids) == 1 and all(ids)


def test_a_given_key_file_others_can_read_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "fleet-key"
    made = signing.Signer(private=Ed25519PrivateKey.generate(), path=key)
    key.write_bytes(
        made.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o644)
    monkeypatch.setenv("SELFBENCH_SIGNING_KEY", str(key))
    with pytest.raises(UsageError) as refused:
        signing.signer()
    assert refused.value.path == str(key) and refused.value.field == "SELFBENCH_SIGNING_KEY"
    assert "chmod 600" in refused.value.message
    key.chmod(0o600)
    signing._signer.cache_clear()
    assert signing.signer().key_id == made.key_id
    # A given key is never made: a path that does not exist is an error, not a new key.
    monkeypatch.setenv("SELFBENCH_SIGNING_KEY", str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match="cannot read the signing key"):
        signing.signer()
    assert not (tmp_path / "nowhere").exists()


def test_trusted_keys_are_read_from_the_environment_with_their_own_colons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SELFBENCH_TRUSTED_KEYS is `:`-separated, and a key is `ed25519:<hex>`: the key's own
    colon does not split it (the fleet's key, given so, was read as a file named `ed25519`)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    one = signing.Signer(private=Ed25519PrivateKey.generate(), path=tmp_path / "a")
    two = signing.Signer(private=Ed25519PrivateKey.generate(), path=tmp_path / "b")
    key_file = tmp_path / "two.pub"
    key_file.write_text(signing.public_text(two.public) + "\n")
    monkeypatch.setenv("SELFBENCH_TRUSTED_KEYS", f"{signing.public_text(one.public)}:{key_file}")
    trusted = signing.trusted_keys()
    assert {one.key_id, two.key_id, signing.signer().key_id} == set(trusted)
