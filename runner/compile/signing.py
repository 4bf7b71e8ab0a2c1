"""The runner's own key: what it seals it signs, and what it reads back as its own must carry a
signature of a key this host trusts.

A digest alone vouches for nothing: anyone who edits a sealed bundle can compute the digests
again (measured: a bundle whose tests/test.sh writes reward 1, its manifest's digests
recomputed, gave an empty patch reward 1 through `grade`). So every seal is signed (Ed25519,
through `cryptography`), and a seal counts only when its signature verifies with a trusted key.

- The signing key: the file SELFBENCH_SIGNING_KEY names (a fleet gives every worker the same
  one), else the host's own, `$XDG_CONFIG_HOME/selfbench-runner/signing-key` (by default under
  `~/.config`), made on first use: a PEM private key, the owner's alone (0600), written under a
  temporary name and linked into place, so that two runners starting at once keep one key.
- The trusted keys: the signing key's, and each of SELFBENCH_TRUSTED_KEYS (separated by `:`):
  `ed25519:<hex>` (what `selfbench-runner key` prints) or the path of a file holding one.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from runner.base.errors import UsageError
from runner.model.settings import (
    ENV_SIGNING_KEY,
    ENV_TRUSTED_KEYS,
    signing_key_file,
    trusted_key_entries,
)

ALGORITHM = "ed25519"
MAX_KEY_FILE_BYTES = 4096
SIGNATURE = "signature"  # a signed document's own key for its signature
Trusted = dict[str, Ed25519PublicKey]  # the keys a host trusts, by key id


def public_text(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return f"{ALGORITHM}:{raw.hex()}"


def key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class Signer:
    private: Ed25519PrivateKey
    path: Path

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def key_id(self) -> str:
        return key_id(self.public)

    def sign(self, payload: bytes) -> dict[str, str]:
        value = base64.b64encode(self.private.sign(payload)).decode()
        return {"algorithm": ALGORITHM, "keyId": self.key_id, "value": value}


def signer() -> Signer:
    """The signing key (made on first use when it is the host's own)."""
    path, hosts = signing_key_file()
    return _signer(str(path), hosts)


@lru_cache(maxsize=4)
def _signer(path_text: str, may_create: bool) -> Signer:
    path = Path(path_text)
    if may_create and not os.path.lexists(path):
        _create(path)
    field = None if may_create else ENV_SIGNING_KEY
    return Signer(private=_read_private(path, field), path=path)


def _create(path: Path) -> None:
    """A new key at `path`, whole or not at all: written under a name of its own, then linked
    into place (a runner that got there first keeps its key, and this one reads it)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another runner's key is kept
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _read_private(path: Path, field: str | None) -> Ed25519PrivateKey:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(
            f"cannot read the signing key ({exc.strerror})", path=str(path), field=field
        ) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UsageError("the signing key is not a regular file", path=str(path), field=field)
        if info.st_mode & 0o077:
            raise UsageError(
                "the signing key is readable or writable by others than its owner (chmod 600)",
                path=str(path),
                field=field,
            )
        if info.st_uid != os.geteuid():
            raise UsageError("the signing key is another user's", path=str(path), field=field)
        data = handle.read(MAX_KEY_FILE_BYTES + 1)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    if len(data) > MAX_KEY_FILE_BYTES or not isinstance(key, Ed25519PrivateKey):
        raise UsageError(
            "the signing key is not a PEM Ed25519 private key", path=str(path), field=field
        )
    return key


def parse_public(text: str, *, where: str, field: str | None = None) -> Ed25519PublicKey:
    """`ed25519:<64 hex digits>`, or a PEM public key."""
    text = text.strip()
    try:
        if text.startswith(f"{ALGORITHM}:"):
            return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text[len(ALGORITHM) + 1 :]))
        key = serialization.load_pem_public_key(text.encode())
    except ValueError:
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(
            f"not an Ed25519 public key (want {ALGORITHM}:<hex>, as `selfbench-runner key` prints)",
            path=where,
            field=field,
        )
    return key


def trusted_keys(extra: tuple[str, ...] = ()) -> dict[str, Ed25519PublicKey]:
    """By key id: the signing key's, SELFBENCH_TRUSTED_KEYS' and `extra`'s (each a key or the
    path of a file holding one)."""
    keys = [signer().public]
    entries: list[tuple[str, str | None]] = [(e, ENV_TRUSTED_KEYS) for e in trusted_key_entries()]
    entries += [(e, None) for e in extra]
    for entry, field in entries:
        if entry.startswith(f"{ALGORITHM}:"):
            keys.append(parse_public(entry, where=field or "--key", field=field))
            continue
        try:
            text = Path(entry).read_text(errors="replace")[: MAX_KEY_FILE_BYTES + 1]
        except OSError as exc:
            raise UsageError(f"cannot read a trusted key ({exc.strerror})", path=entry) from None
        keys.append(parse_public(text, where=entry, field=field))
    return {key_id(k): k for k in keys}


def payload(document: Mapping[str, object]) -> bytes:
    """What a signed JSON document's signature covers: the whole document but its signature,
    canonical (sorted keys, no spaces, ASCII)."""
    body = {k: v for k, v in document.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign_document(document: dict[str, object]) -> None:
    """`document` signed with the signing key, in place (its SIGNATURE, whatever was there)."""
    document[SIGNATURE] = signer().sign(payload(document))


def document_problem(
    document: Mapping[str, object], trusted: dict[str, Ed25519PublicKey]
) -> str | None:
    """Why `document` is not vouched for by a trusted key (None when it is)."""
    return signature_problem(payload(document), document.get(SIGNATURE), trusted)


def signature_problem(
    payload: bytes, signature: object, trusted: dict[str, Ed25519PublicKey]
) -> str | None:
    """Why `signature` does not vouch for `payload` (None when a trusted key signed it)."""
    if not isinstance(signature, dict):
        return "it is not signed"
    found_id, value = signature.get("keyId"), signature.get("value")
    if signature.get("algorithm") != ALGORITHM or not isinstance(value, str):
        return "its signature is not an Ed25519 one"
    key = trusted.get(found_id) if isinstance(found_id, str) else None
    if key is None:
        return (
            f"it is signed by key {str(found_id)[:32]}, which this host does not trust "
            f"(add it to {ENV_TRUSTED_KEYS})"
        )
    try:
        key.verify(base64.b64decode(value, validate=True), payload)
    except (InvalidSignature, ValueError):
        return "its signature does not match its content"
    return None
