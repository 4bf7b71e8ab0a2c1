"""The mailbox protocol (the seed's): a directory shared with the sandbox.

    DIR/requests/<id>.json    written by the tool (write elsewhere, then rename into place)
    DIR/claimed/<sidecar>/    a request taken by one sidecar (an atomic rename: two sidecars
                              on one mailbox never take the same request)
    DIR/responses/<id>.json   the answer, written atomically (a reader never sees half); final:
                              a later request file with an answered id gets its own answer in
                              DIR/responses/<id>+conflict-<n>.json (`+` is in no id)
    DIR/rejected/             entries that are not requests: names that are no request id,
                              links, directories, FIFOs and devices (moved, never followed)

The mailbox is hostile ground: the agent in the sandbox can write anything there, at any time.
Every path below it is reached relative to a directory handle without following a link (a
`responses` or `claimed` replaced by a link is moved aside and made again), nothing below it
is ever removed recursively, and it holds copies of responses only: archives, progress and
reports stay in the sidecar's state directory, where nothing in the sandbox can add to them.

A claimed request is recorded in the job store before its file is removed, so a sidecar that
dies at any point finds it again (in its claimed directory or its store) when it restarts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import socket
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from runner.base.errors import InvalidTaskError
from runner.base.safeio import DirectoryHandle
from runner.sidecar.jobs import JobSummary
from runner.sidecar.policy import RequestRefusedError
from runner.sidecar.request import (
    NAME_PATTERN,
    ErrorBody,
    ErrorDetail,
    VerificationRequest,
    VerificationResponse,
)
from runner.sidecar.service import SOURCE_MAILBOX, Service

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


@dataclass(frozen=True)
class _Directories:
    requests: DirectoryHandle
    claimed: DirectoryHandle
    responses: DirectoryHandle
    rejected: DirectoryHandle


class Mailbox:
    def __init__(self, root: Path, service: Service, *, poll_seconds: float = 0.2) -> None:
        self.root = root
        self.service = service
        self.poll_seconds = poll_seconds
        self.name = sidecar_name(service.config.state_dir)
        self.requests = root / "requests"
        self.responses = root / "responses"
        self.claimed = root / "claimed" / self.name
        self.rejected = root / "rejected"
        self._root = DirectoryHandle.open(root)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._first_seen: dict[str, float] = {}
        with self._directories():
            pass  # made now, so the sandbox finds them from the start
        service.listeners.append(self._answer)

    @contextlib.contextmanager
    def _directories(self) -> Iterator[_Directories]:
        """The mailbox's directories, opened afresh for each pass (the sandbox may have
        swapped any of them since the last one)."""
        displaced: list[str] = []
        opened: list[DirectoryHandle] = []
        try:
            for name in ("requests", "responses", "rejected"):
                opened.append(self._root.child(name, displaced=displaced))
            claimed_root = self._root.child("claimed", displaced=displaced)
            opened.append(claimed_root)
            claimed = claimed_root.child(self.name, displaced=displaced)
            opened.append(claimed)
            for aside in displaced:
                log.warning("mailbox: an entry that was not a directory was moved to %s", aside)
            yield _Directories(
                requests=opened[0], responses=opened[1], rejected=opened[2], claimed=claimed
            )
        finally:
            for handle in opened:
                handle.close()

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
        self._root.close()

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
        with self._directories() as box:
            for entry in sorted(box.requests.names()):
                if entry.startswith(".") or not entry.endswith(".json"):
                    continue
                if not _ID.fullmatch(entry[: -len(".json")]):
                    self._reject(box, box.requests, entry)
                    continue
                self._claim(box, entry)
            for entry in sorted(box.claimed.names()):
                request_id = entry[: -len(".json")]
                if not entry.endswith(".json") or entry.startswith("."):
                    continue
                if not _ID.fullmatch(request_id):
                    self._reject(box, box.claimed, entry)
                elif self._record(box, entry, request_id):
                    handled += 1
        return handled

    def _claim(self, box: _Directories, entry: str) -> None:
        # The entry itself moves (a link as a link): what it is gets looked at once claimed.
        for _ in range(2):
            try:
                box.requests.move(entry, box.claimed, entry)
                return
            except FileNotFoundError:
                return  # another sidecar took it
            except OSError as exc:
                # Something of that name is in the claimed directory (a directory put there
                # by the sandbox): it goes to rejected/, then the claim is tried again.
                log.warning("cannot claim %s: %s", entry, exc)
                self._reject(box, box.claimed, entry)
        self._reject(box, box.requests, entry)

    def _reject(self, box: _Directories, directory: DirectoryHandle, entry: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", entry)[:100] or "_"
        # One clock reading for both parts: two readings straddling a second's end named a later
        # entry before an earlier one.
        seconds, nanos = divmod(time.time_ns(), 10**9)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(seconds))
        target = f"{stamp}-{nanos:09d}-{safe}"
        with contextlib.suppress(OSError):
            directory.move(entry, box.rejected, target)
            log.warning("mailbox entry %r is not a request; moved to rejected/%s", entry, target)

    def _record(self, box: _Directories, entry: str, request_id: str) -> bool:
        final = self.service.store.answered(SOURCE_MAILBOX, request_id)
        if final is not None:
            self._conflict(box, entry, request_id, final)
            return True
        try:
            raw = box.claimed.read_regular(entry, limit=MAX_REQUEST_BYTES)
        except InvalidTaskError as exc:
            self._refuse(box, entry, request_id, "unreadable", f"requests/{entry} {exc.message}")
            return True
        try:
            request = VerificationRequest.model_validate_json(raw)
        except ValidationError as exc:
            truncated = any(e["type"] == "json_invalid" for e in exc.errors())
            if truncated and self._settling(box, entry, request_id):
                return False  # a writer that did not rename into place may still be writing
            self._refuse(
                box,
                entry,
                request_id,
                "invalid-request",
                "the request is not a valid verification request",
                validation_problems(exc),
            )
            return True
        if request.id != request_id:
            self._refuse(
                box,
                entry,
                request_id,
                "invalid-request",
                f"the file is named {request_id}.json but the request's id is {request.id!r}",
                [ErrorDetail(field="id", message="must equal the file name without .json")],
            )
            return True
        try:
            job = self.service.submit(request, source=SOURCE_MAILBOX)
        except RequestRefusedError as exc:
            if exc.code == "stopping":
                return False  # left claimed: the next start records it
            self._refuse(box, entry, request_id, exc.code, exc.message, exc.body().problems)
            return True
        # Recorded (committed): the claimed file has done its job.
        box.claimed.unlink(entry)
        self._first_seen.pop(request_id, None)
        if job.state.finished:
            self._answer(job)  # the same request through HTTP, already answered there
        return True

    def _settling(self, box: _Directories, entry: str, request_id: str) -> bool:
        first = self._first_seen.setdefault(request_id, time.monotonic())
        info = box.claimed.lstat(entry)
        age = time.time() - info.st_mtime if info is not None else SETTLE_SECONDS
        # Still written to (changed within SETTLE_SECONDS), but not for ever.
        return age < SETTLE_SECONDS and time.monotonic() - first < MAX_SETTLE_SECONDS

    def _discard(self, box: _Directories, entry: str) -> None:
        """A claimed entry that was answered: a file is removed, anything else (a link, a
        directory, a FIFO) is moved to rejected/ as it is, never followed or emptied."""
        info = box.claimed.lstat(entry)
        if info is not None and stat.S_ISREG(info.st_mode):
            box.claimed.unlink(entry)
        elif info is not None:
            self._reject(box, box.claimed, entry)
        self._first_seen.pop(entry[: -len(".json")], None)

    def _refuse(
        self,
        box: _Directories,
        entry: str,
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
        self._deliver(request_id, response, box.responses)
        self._discard(box, entry)

    def _conflict(self, box: _Directories, entry: str, request_id: str, final: str) -> None:
        """A later file with an answered id: the answer stands (restored if it was removed),
        and this file is answered under a name of its own."""
        log.info("request %s is already answered; a later file with its id is refused", request_id)
        box.responses.write_new(f"{request_id}.json", final.encode())
        response = VerificationResponse(
            id=request_id,
            status="error",
            error=ErrorBody(
                code="conflict",
                message=f"request {request_id!r} is already answered in responses/"
                f"{request_id}.json; a response is final, so this file is answered here",
                problems=[ErrorDetail(field="id", message="use a new id for a new request")],
            ),
        )
        self._write_apart(box.responses, request_id, response.to_json() + "\n")
        self._discard(box, entry)

    @staticmethod
    def _write_apart(responses: DirectoryHandle, request_id: str, text: str) -> None:
        for n in range(1, 10_000):
            if responses.write_new(f"{request_id}+conflict-{n}.json", text.encode()):
                return
        log.error("request %s: no free conflict name left in responses/", request_id)

    # ---- answers -----------------------------------------------------------------------

    def _answer(self, job: JobSummary) -> None:
        if job.response is None or not self.service.store.asked(job.id, SOURCE_MAILBOX):
            return
        try:
            with self._directories() as box:
                delivered = self._deliver(job.id, job.response, box.responses)
        except OSError as exc:
            log.error("cannot open the mailbox to answer %s: %s", job.id, exc)
            return
        if delivered:
            self.service.store.delivered(job.id, SOURCE_MAILBOX)

    def _deliver(
        self, request_id: str, response: VerificationResponse, responses: DirectoryHandle
    ) -> bool:
        """Write the id's response, which is the first one this mailbox gave it: another
        answer for the same id goes under a name of its own, never over it."""
        text = response.to_json() + "\n"
        final = self.service.store.final_answer(SOURCE_MAILBOX, request_id, text)
        try:
            if final == text:
                responses.write_atomic(f"{request_id}.json", text.encode())
            else:
                self._write_apart(responses, request_id, text)
            return True
        except OSError as exc:
            log.error("cannot write the response of %s: %s", request_id, exc)
            return False


def read_response(path: Path) -> VerificationResponse:
    return VerificationResponse.model_validate(json.loads(path.read_text(encoding="utf-8")))
