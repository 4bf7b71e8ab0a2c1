"""The mailbox protocol (the seed's): a directory shared with the sandbox.

    DIR/requests/<id>.json    written by the tool (write elsewhere, then rename into place)
    DIR/claimed/<sidecar>/    a request taken by one sidecar (an atomic rename: two sidecars
                              on one mailbox never take the same request)
    DIR/responses/<id>.json   the answer, written atomically (a reader never sees half)
    DIR/runs/<run>/<stage>/<candidate>/round-<n>/verify-<k>/   the archive of each verify
    DIR/rejected/             request files whose name is not a request id (no answer can
                              be addressed to them)

A claimed request is recorded in the job store before its file is removed, so a sidecar that
dies at any point finds it again (in its claimed directory or its store) when it restarts.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
from pathlib import Path

from pydantic import ValidationError

from runner.errors import InvalidTaskError
from runner.safeio import read_regular, write_atomic
from runner.sidecar.request import (
    NAME_PATTERN,
    ErrorBody,
    ErrorDetail,
    VerificationRequest,
    VerificationResponse,
)
from runner.sidecar.service import SOURCE_MAILBOX, RequestRefusedError, Service
from runner.sidecar.store import Job

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024 * 1024
SETTLE_SECONDS = 2.0  # a request that does not parse yet may still be being written
MAX_SETTLE_SECONDS = 60.0
_ID = re.compile(NAME_PATTERN)


def sidecar_name(state_dir: Path) -> str:
    """Stable across restarts of one sidecar (same host, same state directory), different
    for two sidecars sharing a mailbox."""
    key = f"{socket.gethostname()}:{state_dir.resolve()}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def validation_problems(exc: ValidationError) -> list[ErrorDetail]:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or None
        problems.append(ErrorDetail(field=where, message=error["msg"]))
    return problems


class Mailbox:
    def __init__(self, root: Path, service: Service, *, poll_seconds: float = 0.2) -> None:
        self.root = root
        self.service = service
        self.poll_seconds = poll_seconds
        self.requests = root / "requests"
        self.responses = root / "responses"
        self.claimed = root / "claimed" / sidecar_name(service.config.state_dir)
        self.rejected = root / "rejected"
        for directory in (self.requests, self.responses, self.claimed, self.rejected):
            directory.mkdir(parents=True, exist_ok=True)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._first_seen: dict[str, float] = {}
        service.listeners.append(self._answer)

    # ---- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        # Responses the last run stored but did not get to write, then requests it claimed
        # but did not get to record.
        for job in self.service.store.undelivered(SOURCE_MAILBOX):
            self._answer(job)
        self._thread = threading.Thread(target=self._loop, name="mailbox", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set() and not self.service.stopping:
            try:
                self.poll()
            except Exception:
                log.exception("mailbox poll failed")
            self._stop.wait(self.poll_seconds)

    # ---- one pass ----------------------------------------------------------------------

    def poll(self) -> int:
        """Claim every waiting request, then record every claimed one. Returns how many
        requests were recorded or answered."""
        handled = 0
        for entry in sorted(self._listing(self.requests)):
            if entry.startswith(".") or not entry.endswith(".json"):
                continue
            request_id = entry[: -len(".json")]
            source = self.requests / entry
            if not _ID.fullmatch(request_id):
                self._reject(source, entry)
                continue
            try:
                os.rename(source, self.claimed / entry)
            except FileNotFoundError:
                continue  # another sidecar took it
            except OSError as exc:
                log.warning("cannot claim %s: %s", source, exc)
                continue
        for entry in sorted(self._listing(self.claimed)):
            if entry.endswith(".json") and self._record(self.claimed / entry, entry[:-5]):
                handled += 1
        return handled

    @staticmethod
    def _listing(directory: Path) -> list[str]:
        try:
            return os.listdir(directory)
        except OSError:
            return []

    def _reject(self, source: Path, entry: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", entry)[:100] or "_"
        target = self.rejected / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{safe}"
        with contextlib.suppress(OSError):
            os.rename(source, target)
            log.warning("request file %r is not named <id>.json; moved to %s", entry, target)

    def _record(self, path: Path, request_id: str) -> bool:
        try:
            raw = read_regular(path, limit=MAX_REQUEST_BYTES)
        except InvalidTaskError as exc:
            self._refuse(path, request_id, "unreadable", exc.message)
            return True
        try:
            request = VerificationRequest.model_validate_json(raw)
        except ValidationError as exc:
            truncated = any(e["type"] == "json_invalid" for e in exc.errors())
            if truncated and self._settling(path, request_id):
                return False  # a writer that did not rename into place may still be writing
            self._refuse(
                path,
                request_id,
                "invalid-request",
                "the request is not a valid verification request",
                validation_problems(exc),
            )
            return True
        if request.id != request_id:
            self._refuse(
                path,
                request_id,
                "invalid-request",
                f"the file is named {request_id}.json but the request's id is {request.id!r}",
                [ErrorDetail(field="id", message="must equal the file name without .json")],
            )
            return True
        try:
            job = self.service.submit(request, source=SOURCE_MAILBOX, archive_root=self.root)
        except RequestRefusedError as exc:
            if exc.code == "stopping":
                return False  # left claimed: the next start records it
            self._refuse(path, request_id, exc.code, exc.message, exc.body().problems)
            return True
        # Recorded (committed): the claimed file has done its job.
        path.unlink(missing_ok=True)
        self._first_seen.pop(request_id, None)
        if job.state.finished:
            self._answer(job)  # a repeated id: answered from the store, never run again
        return True

    def _settling(self, path: Path, request_id: str) -> bool:
        first = self._first_seen.setdefault(request_id, time.monotonic())
        try:
            age = time.time() - path.stat().st_mtime
        except OSError:
            age = SETTLE_SECONDS
        # Still written to (changed within SETTLE_SECONDS), but not for ever.
        return age < SETTLE_SECONDS and time.monotonic() - first < MAX_SETTLE_SECONDS

    def _refuse(
        self,
        path: Path,
        request_id: str,
        code: str,
        message: str,
        problems: list[ErrorDetail] | None = None,
    ) -> None:
        """A request that will not run gets an error response; the loop goes on."""
        log.info("request %s refused: %s", request_id, message)
        response = VerificationResponse(
            id=request_id,
            status="error",
            error=ErrorBody(code=code, message=message, problems=problems or []),
        )
        self._write(request_id, response)
        path.unlink(missing_ok=True)
        self._first_seen.pop(request_id, None)

    # ---- answers -----------------------------------------------------------------------

    def _answer(self, job: Job) -> None:
        if job.source != SOURCE_MAILBOX or job.response is None:
            return
        if self._write(job.id, job.response):
            self.service.store.delivered(job.id)

    def _write(self, request_id: str, response: VerificationResponse) -> bool:
        try:
            write_atomic(self.responses / f"{request_id}.json", response.to_json() + "\n")
            return True
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.error("cannot write the response of %s: %s", request_id, exc)
            return False


def read_response(path: Path) -> VerificationResponse:
    return VerificationResponse.model_validate(json.loads(path.read_text(encoding="utf-8")))
