"""Store URLs and run addresses, checked before anything is read or written (pure).

A store is `file:///absolute/dir` (a shared directory: an NFS mount or the like) or
`s3://bucket[/prefix]` (S3-compatible object storage; the endpoint and credentials come from
the standard AWS environment, AWS_ENDPOINT_URL for MinIO or another server). A run in a store
is `<store>/runs/<key>`: what a fleet's batch.json names as a task's run directory, and what
`logs`, `export`, `grade` and `debug` take in place of a local path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runner.base.errors import UsageError

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# A run's key: the request id (runner.sidecar.request.NAME_PATTERN's alphabet).
RUN_KEY = re.compile(r"^(?!\.+$)[A-Za-z0-9._-]{1,128}$")
# S3's bucket names: 3 to 63 lower-case letters, digits, dots and hyphens.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX_PART = re.compile(r"^(?!\.+$)[A-Za-z0-9._-]{1,128}$")
SCHEMES = ("file://", "s3://")
RUNS = "runs"


@dataclass(frozen=True)
class StoreUrl:
    scheme: str  # "file" or "s3"
    location: str  # the directory, or the bucket
    prefix: str = ""  # s3 only: the key prefix ("" or "a/b")

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file://{self.location}"
        return f"s3://{self.location}" + (f"/{self.prefix}" if self.prefix else "")

    def run_address(self, key: str) -> str:
        return f"{self}/{RUNS}/{key}"


def is_address(text: str) -> bool:
    """Whether `text` names a store (a path never starts with a scheme)."""
    return text.startswith(SCHEMES)


def parse_store(text: str, *, field: str = "--store") -> StoreUrl:
    """A store URL, or a usage error naming `field`."""
    if text.startswith("file://"):
        path = text[len("file://") :].rstrip("/") or "/"
        if not path.startswith("/") or any(p in (".", "..") for p in path.split("/")):
            raise UsageError(
                f"{text!r}: a file store is file:// and an absolute path without . or ..",
                field=field,
            )
        if any(ord(c) < 32 for c in path):
            raise UsageError(f"{text!r}: control characters in the path", field=field)
        return StoreUrl("file", path)
    if text.startswith("s3://"):
        bucket, _, prefix = text[len("s3://") :].partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET.fullmatch(bucket):
            raise UsageError(f"{text!r}: {bucket!r} is not an S3 bucket name", field=field)
        if prefix and not all(_PREFIX_PART.fullmatch(p) for p in prefix.split("/")):
            raise UsageError(
                f"{text!r}: each part of the prefix is letters, digits, '.', '_' or '-'",
                field=field,
            )
        return StoreUrl("s3", bucket, prefix)
    raise UsageError(f"{text!r} is not a store: file:///DIR or s3://BUCKET[/PREFIX]", field=field)


def parse_run_address(text: str, *, field: str = "RUN_DIR") -> tuple[StoreUrl, str]:
    """A run's store address as (its store, its key), or a usage error naming `field`."""
    head, separator, key = text.rstrip("/").rpartition(f"/{RUNS}/")
    if not separator or not RUN_KEY.fullmatch(key):
        raise UsageError(
            f"{text!r} is not a run in a store: <store>/{RUNS}/<key>, as batch.json names it",
            field=field,
        )
    return parse_store(head, field=field), key


def check_digest(text: object, *, field: str) -> str:
    """`text` as a blob digest (`sha256:` and 64 lower-case hex digits)."""
    if not isinstance(text, str) or not DIGEST.fullmatch(text):
        raise UsageError(f"{str(text)[:80]!r} is not a digest (sha256:<64 hex>)", field=field)
    return text
