"""The durable job store: one SQLite file under the sidecar's state directory.

A request is recorded (committed) before it is acknowledged; a job's state moves
queued -> running -> done | error | cancelled in single transactions, so a sidecar killed at any
point restarts with every request either finished (its response stored) or requeued.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner.run.events import LoggedEvent
from runner.sidecar.jobs import ConflictError, Job, JobSummary, QueueEntry, status_of
from runner.sidecar.request import (
    JobState,
    VerificationRequest,
    VerificationResponse,
    VerificationStatus,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    body_digest TEXT NOT NULL,
    source TEXT NOT NULL,
    request TEXT NOT NULL,
    archive TEXT NOT NULL UNIQUE,
    task_id TEXT,
    digest TEXT,
    state TEXT NOT NULL,
    run_id TEXT,
    pid INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    verdict TEXT,
    response TEXT,
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created);
CREATE INDEX IF NOT EXISTS jobs_digest ON jobs (digest, verdict);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    at TEXT NOT NULL,
    stage TEXT NOT NULL,
    status TEXT NOT NULL,
    detail TEXT NOT NULL,
    seconds REAL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, seq);
CREATE TABLE IF NOT EXISTS deliveries (
    job_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, channel)
);
CREATE TABLE IF NOT EXISTS answers (
    channel TEXT NOT NULL,
    id TEXT NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (channel, id)
);
"""
# Every column but the request (which may be tens of megabytes): what a status, an event
# stream or the scheduler reads, without copying or parsing the request each time.
_SUMMARY = (
    "id, source, archive, task_id, digest, state, run_id, pid, attempts, cancel, created, "
    "started, finished, verdict, response"
)


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=10000")
            self._db.executescript(SCHEMA)
            # A store written before deliveries had their own table: one channel per job.
            self._db.execute(
                "INSERT OR IGNORE INTO deliveries (job_id, channel, delivered) "
                "SELECT id, source, delivered FROM jobs"
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ---- jobs --------------------------------------------------------------------------

    def add(self, request: VerificationRequest, *, source: str, archive: Path) -> tuple[Job, bool]:
        """Record a request. Returns the job and whether it is new; the same id with the same
        body is the same job (never run twice); with another body it is a conflict."""
        body = request.body_digest()
        with self._transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (request.id,)).fetchone()
            if row is not None:
                if row["body_digest"] != body:
                    raise ConflictError(
                        f"request id {request.id!r} was already used for a different request"
                    )
                # The same request through another channel: one job, answered in each.
                db.execute(
                    "INSERT OR IGNORE INTO deliveries (job_id, channel) VALUES (?, ?)",
                    (request.id, source),
                )
                return self._job(row), False
            other = db.execute("SELECT id FROM jobs WHERE archive = ?", (str(archive),)).fetchone()
            if other is not None:
                raise ConflictError(
                    f"{request.archive_path()} is already the archive of request "
                    f"{other['id']!r}: each verify of a round needs its own number"
                )
            db.execute(
                "INSERT INTO jobs (id, body_digest, source, request, archive, task_id, state, "
                "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    request.id,
                    body,
                    source,
                    request.to_json(),
                    str(archive),
                    request.task_id(),
                    JobState.QUEUED.value,
                    time.time(),
                ),
            )
            db.execute(
                "INSERT OR IGNORE INTO deliveries (job_id, channel) VALUES (?, ?)",
                (request.id, source),
            )
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (request.id,)).fetchone()
        return self._job(row), True

    def summary(self, job_id: str) -> JobSummary | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_SUMMARY} FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
        return self._summary(row) if row is not None else None

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._job(row) if row is not None else None

    def queue(self) -> list[QueueEntry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, task_id, digest, cancel FROM jobs WHERE state = ? "
                "ORDER BY created, rowid",
                (JobState.QUEUED.value,),
            ).fetchall()
        return [
            QueueEntry(
                id=row["id"],
                task_id=row["task_id"],
                digest=row["digest"],
                cancel=bool(row["cancel"]),
            )
            for row in rows
        ]

    def running(self) -> list[Job]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM jobs WHERE state = ?", (JobState.RUNNING.value,)
            ).fetchall()
        return [self._job(row) for row in rows]

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
            return {row["state"]: int(row["n"]) for row in rows}

    def set_digest(self, job_id: str, digest: str | None) -> None:
        with self._transaction() as db:
            db.execute("UPDATE jobs SET digest = ? WHERE id = ?", (digest or "", job_id))

    def start(self, job_id: str, *, run_id: str) -> bool:
        """queued -> running; False if the job is no longer queued (cancelled meanwhile)."""
        with self._transaction() as db:
            done = db.execute(
                "UPDATE jobs SET state = ?, run_id = ?, pid = NULL, started = ?, "
                "attempts = attempts + 1 WHERE id = ? AND state = ?",
                (JobState.RUNNING.value, run_id, time.time(), job_id, JobState.QUEUED.value),
            ).rowcount
        return bool(done)

    def set_pid(self, job_id: str, pid: int | None) -> None:
        with self._transaction() as db:
            db.execute("UPDATE jobs SET pid = ? WHERE id = ?", (pid, job_id))

    def finish(
        self,
        job_id: str,
        response: VerificationResponse,
        *,
        state: JobState,
        verdict: str | None,
    ) -> bool:
        """Store the response once: False if the job had already finished."""
        with self._transaction() as db:
            done = db.execute(
                "UPDATE jobs SET state = ?, response = ?, verdict = ?, finished = ?, pid = NULL "
                "WHERE id = ? AND state IN (?, ?)",
                (
                    state.value,
                    response.to_json(),
                    verdict,
                    time.time(),
                    job_id,
                    JobState.QUEUED.value,
                    JobState.RUNNING.value,
                ),
            ).rowcount
        return bool(done)

    def requeue(self, job_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE jobs SET state = ?, pid = NULL WHERE id = ? AND state = ?",
                (JobState.QUEUED.value, job_id, JobState.RUNNING.value),
            )

    def retry(self, job_id: str) -> bool:
        """A finished job back in the queue for another attempt (the worker's answer to a
        Temporal retry of an infrastructure failure): its response is dropped, its events and
        attempt count stay. False if it is not finished."""
        with self._transaction() as db:
            done = db.execute(
                "UPDATE jobs SET state = ?, response = NULL, verdict = NULL, finished = NULL, "
                "pid = NULL, cancel = 0 WHERE id = ? AND state IN (?, ?, ?)",
                (
                    JobState.QUEUED.value,
                    job_id,
                    JobState.DONE.value,
                    JobState.ERROR.value,
                    JobState.CANCELLED.value,
                ),
            ).rowcount
        return bool(done)

    def request_cancel(self, job_id: str) -> Job | None:
        with self._transaction() as db:
            db.execute("UPDATE jobs SET cancel = 1 WHERE id = ?", (job_id,))
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._job(row) if row is not None else None

    def accepted_with(self, digest: str) -> Job | None:
        """The latest job with this payload digest whose report was accepted."""
        if not digest:
            return None
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM jobs WHERE digest = ? AND state = ? AND verdict = 'accepted' "
                "ORDER BY finished DESC LIMIT 1",
                (digest, JobState.DONE.value),
            ).fetchone()
        return self._job(row) if row is not None else None

    def undelivered(self, channel: str) -> list[Job]:
        """Finished jobs asked for through `channel` whose response it has not handed over."""
        with self._lock:
            rows = self._db.execute(
                "SELECT jobs.* FROM jobs JOIN deliveries ON deliveries.job_id = jobs.id "
                "WHERE deliveries.channel = ? AND deliveries.delivered = 0 "
                "AND jobs.state IN (?, ?, ?)",
                (channel, JobState.DONE.value, JobState.ERROR.value, JobState.CANCELLED.value),
            ).fetchall()
        return [self._job(row) for row in rows]

    def asked(self, job_id: str, channel: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM deliveries WHERE job_id = ? AND channel = ?", (job_id, channel)
            ).fetchone()
        return row is not None

    def delivered(self, job_id: str, channel: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE deliveries SET delivered = 1 WHERE job_id = ? AND channel = ?",
                (job_id, channel),
            )

    def final_answer(self, channel: str, answer_id: str, response: str) -> str:
        """The response `channel` gives for `answer_id`: the first one recorded. A response
        is final; the caller compares what it would say with what it already said."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO answers (channel, id, response) VALUES (?, ?, ?)",
                (channel, answer_id, response),
            )
            row = db.execute(
                "SELECT response FROM answers WHERE channel = ? AND id = ?", (channel, answer_id)
            ).fetchone()
        return str(row["response"])

    def answered(self, channel: str, answer_id: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT response FROM answers WHERE channel = ? AND id = ?", (channel, answer_id)
            ).fetchone()
        return None if row is None else str(row["response"])

    # ---- events ------------------------------------------------------------------------

    def add_events(self, job_id: str, events: list[LoggedEvent]) -> None:
        """Append events; each gets the store's next sequence number (the SSE event id)."""
        if not events:
            return
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO events (job_id, at, stage, status, detail, seconds) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(job_id, e.at, e.stage, e.status, e.detail, e.seconds) for e in events],
            )

    def events(self, job_id: str, *, after: int = 0) -> list[LoggedEvent]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM events WHERE job_id = ? AND seq > ? ORDER BY seq",
                (job_id, after),
            ).fetchall()
        return [
            LoggedEvent(
                seq=row["seq"],
                at=row["at"],
                stage=row["stage"],
                status=row["status"],
                detail=row["detail"],
                seconds=row["seconds"],
            )
            for row in rows
        ]

    def status(self, job: JobSummary) -> VerificationStatus:
        return status_of(job, self.events(job.id))

    # ---- rows --------------------------------------------------------------------------

    @staticmethod
    def _fields(row: sqlite3.Row) -> dict[str, Any]:
        response = row["response"]
        return {
            "id": row["id"],
            "source": row["source"],
            "archive": Path(row["archive"]),
            "task_id": row["task_id"],
            "digest": row["digest"],
            "state": JobState(row["state"]),
            "run_id": row["run_id"],
            "pid": row["pid"],
            "attempts": int(row["attempts"]),
            "cancel": bool(row["cancel"]),
            "created": float(row["created"]),
            "started": row["started"],
            "finished": row["finished"],
            "verdict": row["verdict"],
            "response": VerificationResponse.model_validate(json.loads(response))
            if response
            else None,
        }

    @classmethod
    def _summary(cls, row: sqlite3.Row) -> JobSummary:
        return JobSummary(**cls._fields(row))

    @classmethod
    def _job(cls, row: sqlite3.Row) -> Job:
        request = VerificationRequest.model_validate(json.loads(row["request"]))
        return Job(**cls._fields(row), request=request)
