"""What the hack gate remembers from one run to the next: work done once.

The hack gate's agent side runs the same canned exploit scripts in the same agent image every
time a task is verified again, and gets the same patches: a script is ours, the image is
content-addressed, and the container's plan (command, environment, workdir, network, limits)
is part of the key. The patch policy's check of a patch (verifier.pl policy-check, no tests)
is likewise a function of the verifier image and the patch. So each is kept under a key of
exactly those inputs, and a verify that finds every exploit's side and every check skips the
agent container and the policy container: on an author's second verify of a task whose held-out
tests changed, only the policy check runs (the agent image is the same); on an unchanged task,
neither.

What is remembered is only what a run saw complete: a script that exited 0 with its patch
collected, or one that said it does not apply (exit NOT_APPLICABLE). A script that failed,
timed out or whose patch could not be collected runs again next time. Nothing is remembered
with --hack-gate full (it runs every exploit afresh), nor with --keep (the containers are
asked for).

A remembered entry is a JSON document signed with the runner's own key
(runner.compile.signing) that names its own key: an entry this runner did not write, an entry
moved under another key, or one edited since, is not read (the exploit runs again). Reads are
bounded before parsing (a regular file, not a link, at most MAX_DOCUMENT_BYTES); the store keeps
at most MAX_ENTRIES (least recently used go first) and every write is atomic.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from runner.base.errors import RunnerError
from runner.base.safeio import write_atomic
from runner.compile import signing
from runner.model.evidence import PolicyCheck
from runner.model.predictions import prediction_key

log = logging.getLogger(__name__)

REMEMBERED_DIR = "hack-remembered"
MAX_ENTRIES = 4096
MAX_PATCH_BYTES = 1024 * 1024
MAX_LOG_BYTES = 64 * 1024  # of each log kept (its end: where a script says why)
MAX_DOCUMENT_BYTES = 4 * MAX_PATCH_BYTES  # base64 of the patch and both logs, with room
MAX_RUN_BYTES = 1024 * 1024  # of a verifier run's files together (a larger run is not kept)
MAX_RUN_FILES = 256
_EXPLOIT, _POLICY, _RUN = "exploit-side", "policy-check", "early-run"
_FIELDS = frozenset({"kind", "key", "value", signing.SIGNATURE})
# What the signature covers besides the document: no other document the runner's key signs
# (a bundle's seal, an export's manifest) can stand for an entry, whatever fields it carries.
_PURPOSE = b"selfbench-runner hack-gate memory v1\n"


@dataclass(frozen=True, kw_only=True)
class RememberedSide:
    """An exploit's agent side as a run saw it: the script's exit code and seconds, the collect
    status (-1: not collected, as the driver says), the patch, and both logs."""

    exit_code: int
    seconds: float
    collected: int
    patch: bytes | None
    script_log: bytes
    collect_log: bytes


@dataclass(frozen=True, kw_only=True)
class RememberedRun:
    """An exploit's early verifier run as a run saw it: test.sh's exit code and seconds, the
    end of its log, and the files it left under the gate's `logs/` (relative POSIX paths)."""

    exit_code: int
    seconds: float
    verifier_log: bytes
    files: dict[str, bytes]


def is_plain_relative(path: str) -> bool:
    """A relative POSIX path of plain names (no `..`, `.`, empty or absolute part)."""
    parts = path.split("/")
    return bool(path) and all(p not in ("", ".", "..") and "\0" not in p for p in parts)


def run_key(parts: dict[str, object]) -> str:
    return prediction_key({"kind": _RUN, **parts})


def side_key(parts: dict[str, object]) -> str:
    return prediction_key({"kind": _EXPLOIT, **parts})


def check_key(parts: dict[str, object]) -> str:
    return prediction_key({"kind": _POLICY, **parts})


def patch_digest(patch: bytes) -> str:
    return hashlib.sha256(patch).hexdigest()


def _tail(data: bytes) -> bytes:
    return data[-MAX_LOG_BYTES:]


def log_tail(path: Path) -> bytes:
    """The end of a log file as an entry keeps it (at most MAX_LOG_BYTES; b"" when absent),
    headed by a line that says how much of its start was left out, if any."""
    try:
        with path.open("rb") as handle:
            size = path.stat().st_size
            if size <= MAX_LOG_BYTES:
                return handle.read(MAX_LOG_BYTES)
            head = f"[selfbench: the first {{}} of {size} bytes of this log were not kept]\n"
            room = MAX_LOG_BYTES - len(head.format(size).encode())
            handle.seek(size - room)
            return head.format(size - room).encode() + handle.read(room)
    except OSError:
        return b""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass(frozen=True)
class Remembered:
    """The store: one directory under the runner's cache, shared by the runners of one user."""

    root: Path

    @property
    def directory(self) -> Path:
        return self.root / REMEMBERED_DIR

    def side(self, key: str) -> RememberedSide | None:
        value = self._read(_EXPLOIT, key)
        if value is None:
            return None
        try:
            patch_text = value["patch"]
            seconds = value["seconds"]
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
                return None
            side = RememberedSide(
                exit_code=_int(value["exitCode"]),
                seconds=float(seconds),
                collected=_int(value["collected"]),
                patch=None if patch_text is None else _bytes(patch_text),
                script_log=_bytes(value["scriptLog"]),
                collect_log=_bytes(value["collectLog"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        if side.patch is not None and len(side.patch) > MAX_PATCH_BYTES:
            return None
        return side

    def remember_side(self, key: str, side: RememberedSide) -> None:
        if side.patch is not None and len(side.patch) > MAX_PATCH_BYTES:
            return
        self._write(
            _EXPLOIT,
            key,
            {
                "exitCode": side.exit_code,
                "seconds": side.seconds,
                "collected": side.collected,
                "patch": None if side.patch is None else _b64(side.patch),
                "scriptLog": _b64(_tail(side.script_log)),
                "collectLog": _b64(_tail(side.collect_log)),
            },
        )

    def check(self, key: str) -> PolicyCheck | None:
        value = self._read(_POLICY, key)
        if value is None:
            return None
        try:
            return PolicyCheck.model_validate(value)
        except ValidationError:
            return None

    def remember_check(self, key: str, check: PolicyCheck) -> None:
        self._write(_POLICY, key, check.model_dump(mode="json", by_alias=True))

    def run(self, key: str) -> RememberedRun | None:
        value = self._read(_RUN, key)
        if value is None:
            return None
        try:
            seconds, files = value["seconds"], value["files"]
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
                return None
            if not isinstance(files, dict) or len(files) > MAX_RUN_FILES:
                return None
            decoded = {str(k): _bytes(v) for k, v in files.items()}
            run = RememberedRun(
                exit_code=_int(value["exitCode"]),
                seconds=float(seconds),
                verifier_log=_bytes(value["verifierLog"]),
                files=decoded,
            )
        except (KeyError, TypeError, ValueError):
            return None
        if not all(map(is_plain_relative, run.files)):
            return None
        if sum(map(len, run.files.values())) > MAX_RUN_BYTES:
            return None
        return run

    def remember_run(self, key: str, run: RememberedRun) -> None:
        if len(run.files) > MAX_RUN_FILES or sum(map(len, run.files.values())) > MAX_RUN_BYTES:
            return
        if not all(map(is_plain_relative, run.files)):
            return
        self._write(
            _RUN,
            key,
            {
                "exitCode": run.exit_code,
                "seconds": run.seconds,
                "verifierLog": _b64(_tail(run.verifier_log)),
                "files": {name: _b64(data) for name, data in sorted(run.files.items())},
            },
        )

    # ---- the documents -----------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def _private(self) -> bool:
        """Whether the store's directory, and the cache directory it is in, are this user's
        own real directories that no one else may write (else nothing is read or written:
        another user could delete, replay or plant entries, or link the directory away)."""
        for path in (self.root, self.directory):
            try:
                info = os.lstat(path)
            except OSError:
                return False
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                return False
            if info.st_mode & 0o022:
                return False
        return True

    def _read(self, kind: str, key: str) -> dict[str, object] | None:
        """The value under `key` when this runner's key signed it as a hack-gate memory
        entry for this key and kind."""
        if not self._private():
            return None
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    return None
                raw = handle.read(MAX_DOCUMENT_BYTES + 1)
            if len(raw) > MAX_DOCUMENT_BYTES:
                return None
            document = json.loads(raw)
            if not isinstance(document, dict) or set(document) != _FIELDS:
                return None
            own = signing.signer()
            problem = signing.signature_problem(
                _PURPOSE + signing.payload(document),
                document.get(signing.SIGNATURE),
                {own.key_id: own.public},
            )
        except Exception:  # a planted file (say, JSON nested past the recursion limit): no entry
            return None
        value = document.get("value")
        if problem is not None:
            log.info("a remembered hack-gate entry is not read (%s): %s", problem, key)
            return None
        if document.get("kind") != kind or document.get("key") != key:
            return None
        if not isinstance(value, dict):
            return None
        with contextlib.suppress(OSError):
            os.utime(self._path(key), follow_symlinks=False)  # recently used: pruned last
        return value

    def _write(self, kind: str, key: str, value: dict[str, object]) -> None:
        """A cache that cannot be written only costs the next run its memory."""
        document: dict[str, object] = {"kind": kind, "key": key, "value": value}
        try:
            document[signing.SIGNATURE] = signing.signer().sign(
                _PURPOSE + signing.payload(document)
            )
            data = json.dumps(document, sort_keys=True).encode()
            if len(data) > MAX_DOCUMENT_BYTES:
                return
            for path in (self.root, self.directory):
                path.mkdir(exist_ok=True, mode=0o700, parents=path == self.root)
            if not self._private():
                log.info(
                    "the hack gate remembers nothing: %s is not this user's alone", self.directory
                )
                return
            write_atomic(self._path(key), data, mode=0o600, durable=False)
        except (OSError, RunnerError) as exc:
            log.debug("could not remember a hack-gate entry (%s)", exc)

    def prune(self) -> None:
        """At most MAX_ENTRIES: the least recently used go first (once a run, not per write)."""
        if not self._private():
            return
        entries = []
        with contextlib.suppress(OSError):
            for path in self.directory.glob("*.json"):
                with contextlib.suppress(OSError):
                    entries.append((path.lstat().st_mtime, path))
        for _, path in sorted(entries)[: max(0, len(entries) - MAX_ENTRIES)]:
            with contextlib.suppress(OSError):
                path.unlink()


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("not an integer")
    return value


def _bytes(value: object) -> bytes:
    if not isinstance(value, str):
        raise TypeError("not base64 text")
    return base64.b64decode(value, validate=True)
