"""The artifact store's two backends and the calls they share.

Blobs are content-addressed: `blobs/sha256/<hex>`, written once (a second put of the same
bytes writes nothing) and checked against their digest whenever they are read, so a store
that was written to by someone else cannot hand a worker other bytes than the digest it was
given. Records are small keyed JSON documents (`runs/<key>.json`, a run's pointer), the last
write winning. Reads go through a local cache of blobs (by digest, so never stale).

The shared directory writes each object atomically (a temporary file renamed into place, which
NFS keeps atomic within a directory). The S3 backend speaks the plain object API (put, get,
head), which every S3-compatible server implements; boto3 comes with the `fleet` extra and reads
its endpoint and credentials from the standard AWS environment (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from runner.artifacts.address import StoreUrl, check_digest, parse_store
from runner.base.errors import InfrastructureError
from runner.base.safeio import file_sha256, private_dir

BLOBS = "blobs/sha256"
# A record is a pointer, never a payload: what a reader takes whole into memory.
MAX_RECORD_BYTES = 1 << 20
# The largest blob a reader takes (a repository bundle, a run's archive): a store another host
# writes is input, and a blob that never ends (a link to /dev/zero in a shared directory, an
# object that grows) is stopped here, not when the reader's disk is full.
MAX_BLOB_BYTES = 64 << 30
CHUNK = 1 << 20


class StoreError(InfrastructureError):
    """The store could not be reached, or an object is missing or not what its digest says."""


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    return "sha256:" + file_sha256(path)


def _blob_key(digest: str) -> str:
    return f"{BLOBS}/{check_digest(digest, field='digest').removeprefix('sha256:')}"


class ArtifactStore(ABC):
    """One store: `put_*` and `get_*` of blobs and records, over a backend's three calls."""

    def __init__(self, url: StoreUrl, cache: Path | None) -> None:
        self.url = url
        self.cache = cache

    @abstractmethod
    def _upload(self, key: str, source: Path) -> None: ...

    @abstractmethod
    def _download(self, key: str, destination: Path, limit: int) -> bool:
        """Whether `key` was there (and is now at `destination`); StoreError for an object
        over `limit` bytes, or not a regular file, with nothing more than `limit` copied."""

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    # ---- blobs --------------------------------------------------------------------------

    def put_file(self, path: Path) -> str:
        """Put a file's bytes as a blob (once); its digest."""
        digest = file_digest(path)
        key = _blob_key(digest)
        if not self._exists(key):
            self._upload(key, path)
        return digest

    def put_bytes(self, data: bytes) -> str:
        """Put bytes as a blob (once; a temporary file only when they are not there yet)."""
        digest = digest_of(data)
        key = _blob_key(digest)
        if not self._exists(key):
            with tempfile.NamedTemporaryFile(prefix="blob.") as handle:
                handle.write(data)
                handle.flush()
                self._upload(key, Path(handle.name))
        return digest

    def put_json(self, document: Any) -> str:
        """A JSON document as a blob (sorted keys: the same document, the same digest)."""
        return self.put_bytes(json.dumps(document, sort_keys=True, separators=(",", ":")).encode())

    def fetch(self, digest: str, *, limit: int = MAX_BLOB_BYTES) -> Path:
        """A blob as a local file (from the cache, else downloaded, at most `limit` bytes, and
        checked): its path. The file is the cache's: read it, never change it."""
        key = _blob_key(digest)
        if self.cache is None:
            raise StoreError("this store has no local cache to fetch into")
        target = self.cache / "blobs" / digest.removeprefix("sha256:")
        if target.is_file():
            if target.stat().st_size > limit:
                raise StoreError(f"{digest} is over {limit} bytes")
            with contextlib.suppress(OSError):
                os.utime(target)  # recently used: the last a bounded cache removes
            return target
        private_dir(target.parent)
        fd, tmp = tempfile.mkstemp(prefix=".fetch.", dir=target.parent)
        os.close(fd)
        partial = Path(tmp)
        try:
            if not self._download(key, partial, limit):
                raise StoreError(f"{digest} is not in the store {self.url}")
            got = file_digest(partial)
            if got != digest:
                raise StoreError(
                    f"the store {self.url} holds other bytes under {digest} ({got}); "
                    "the object was changed after it was written"
                )
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return target

    def get_bytes(self, digest: str, *, limit: int) -> bytes:
        # Bounded before it is fetched: a 900 MiB blob asked for as a 1 MiB document is
        # refused after 1 MiB, not copied whole first.
        return self.fetch(digest, limit=limit).read_bytes()

    def get_json(self, digest: str, *, limit: int) -> Any:
        try:
            return json.loads(self.get_bytes(digest, limit=limit))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreError(f"{digest} in {self.url} is not JSON: {exc}") from None

    # ---- records ------------------------------------------------------------------------

    def put_record(self, key: str, document: dict[str, Any]) -> None:
        with tempfile.NamedTemporaryFile(prefix="record.", mode="w") as handle:
            json.dump(document, handle, sort_keys=True, indent=1)
            handle.write("\n")
            handle.flush()
            self._upload(f"{key}.json", Path(handle.name))

    def get_record(self, key: str) -> dict[str, Any] | None:
        with tempfile.TemporaryDirectory(prefix="record.") as tmp:
            path = Path(tmp) / "record.json"
            if not self._download(f"{key}.json", path, MAX_RECORD_BYTES):
                return None
            try:
                document = json.loads(path.read_bytes())
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise StoreError(f"{self.url}/{key}.json is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise StoreError(f"{self.url}/{key}.json is not a JSON object")
        return document


class DirectoryStore(ArtifactStore):
    """A shared directory: each object a file under the root, written atomically."""

    def __init__(self, url: StoreUrl, cache: Path | None) -> None:
        super().__init__(url, cache)
        self.root = Path(url.location)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _upload(self, key: str, source: Path) -> None:
        target = self._path(key)
        try:
            private_dir(self.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
            os.close(fd)
            try:
                shutil.copyfile(source, tmp)
                os.chmod(tmp, 0o600)
                os.replace(tmp, target)
            finally:
                Path(tmp).unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot write {key} to {self.url}: {exc}") from None

    def _download(self, key: str, destination: Path, limit: int) -> bool:
        # Never through a link (one to /dev/zero, or out of the store), never a FIFO or a
        # device, and never more than `limit` bytes, whatever the file says its size is.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self._path(key), flags)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"cannot read {key} from {self.url}: {exc}") from None
        with os.fdopen(fd, "rb") as source:
            info = os.fstat(source.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise StoreError(f"{key} in {self.url} is not a regular file")
            if info.st_size > limit:
                raise StoreError(f"{key} in {self.url} is over {limit} bytes")
            copied = 0
            with destination.open("wb") as out:
                while chunk := source.read(CHUNK):
                    copied += len(chunk)
                    if copied > limit:
                        raise StoreError(f"{key} in {self.url} is over {limit} bytes")
                    out.write(chunk)
        return True

    def _exists(self, key: str) -> bool:
        return self._path(key).is_file()


class S3Store(ArtifactStore):
    """S3-compatible object storage: one bucket, every key under the URL's prefix."""

    def __init__(self, url: StoreUrl, cache: Path | None) -> None:
        super().__init__(url, cache)
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise StoreError(
                "an s3:// store needs the fleet extra: pip install 'selfbench-runner[fleet]'"
            ) from None
        # Retries with backoff on throttling and 5xx answers (botocore's standard mode).
        config = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=10)
        self.client: Any = boto3.client("s3", config=config)
        self.bucket = url.location

    def _key(self, key: str) -> str:
        return f"{self.url.prefix}/{key}" if self.url.prefix else key

    def _call(self, what: str, call: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call()
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StoreError(f"{what} {self.url}: {code or exc}") from None
        except BotoCoreError as exc:
            raise StoreError(f"{what} {self.url}: {exc}") from None

    def _upload(self, key: str, source: Path) -> None:
        self._call(
            f"cannot write {key} to",
            lambda: self.client.upload_file(str(source), self.bucket, self._key(key)),
        )

    def _download(self, key: str, destination: Path, limit: int) -> bool:
        # Sized before a byte is fetched; a missing key is a 404 from the HEAD.
        head = self._call(
            f"cannot look up {key} in",
            lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key)),
        )
        if head is None:
            return False
        if int(head.get("ContentLength", 0)) > limit:
            raise StoreError(f"{key} in {self.url} is over {limit} bytes")
        answer = self._call(
            f"cannot read {key} from",
            lambda: (
                self.client.download_file(self.bucket, self._key(key), str(destination)) or True
            ),
        )
        if answer is True and destination.stat().st_size > limit:  # replaced in between
            raise StoreError(f"{key} in {self.url} is over {limit} bytes")
        return answer is True

    def _exists(self, key: str) -> bool:
        answer = self._call(
            f"cannot look up {key} in",
            lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key)),
        )
        return answer is not None


def open_store(url: str | StoreUrl, *, cache: Path | None, field: str = "--store") -> ArtifactStore:
    """The store at `url` (checked), reading through `cache` (a directory of this host's)."""
    parsed = url if isinstance(url, StoreUrl) else parse_store(url, field=field)
    if parsed.scheme == "file":
        return DirectoryStore(parsed, cache)
    return S3Store(parsed, cache)
