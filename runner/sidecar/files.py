"""A verification's run directory over HTTP: `GET /v1/verifications/{id}/run/report.html` and
every file it links to (its logs, relative to it), so a client reads the report and the logs
without a path on the sidecar's disk. Files are read below the run directory only, never
through a link, each within a size cap (runner.base.treeread).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at run time,
# and the job dependency is a value of the caller's, which a string annotation cannot name.
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi import Path as PathParam
from fastapi.responses import Response

from runner.base.errors import InvalidTaskError
from runner.base.treeread import read_below
from runner.sidecar.jobs import JobSummary
from runner.sidecar.request import ErrorBody, ErrorEnvelope

MAX_FILE = 32 * 1024 * 1024  # a log is capped at the run's max log size (20 MiB by default)
MEDIA = {
    ".html": "text/html; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".patch": "text/plain; charset=utf-8",
    ".tsv": "text/plain; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "application/json",
}


def run_directory(job: JobSummary) -> Path:
    """The job's run directory: its own, or for an answer reused from an earlier job that job's,
    when it is an archive beside this one (never a path elsewhere on the disk)."""
    own = job.archive / "run"
    reused = job.response.archive if job.response is not None else None
    if not own.is_dir() and reused:
        earlier = Path(reused)
        if earlier.parent == job.archive.parent and (earlier / "run").is_dir():
            return earlier / "run"
    return own


def _not_found(message: str) -> HTTPException:
    return HTTPException(404, detail=ErrorBody(code="not-found", message=message))


def run_file_routes(app: FastAPI, job_or_404: Any, errors: dict[int | str, Any]) -> None:
    @app.get(
        "/v1/verifications/{verification_id}/run/{path:path}",
        response_class=Response,
        responses={
            200: {
                "content": {
                    "text/html": {},
                    "text/plain": {},
                    "application/json": {},
                    "application/octet-stream": {},
                },
                "description": "The file",
            },
            404: {"model": ErrorEnvelope, "description": "Unknown id, or no such file"},
            **errors,
        },
    )
    def run_file(
        job: Annotated[JobSummary, Depends(job_or_404)],
        path: Annotated[str, PathParam(max_length=1024)],
    ) -> Response:
        """A file of the verification's run directory: `report.html` (its links to the logs
        are relative, so they resolve here too), `report.json`, a stage's logs. Regular files
        below the run directory only, at most 32 MiB."""
        root = run_directory(job)
        if not root.is_dir():
            raise _not_found(f"verification {job.id!r} has no run directory yet")
        try:
            data = read_below(root, path, limit=MAX_FILE)
        except FileNotFoundError:
            raise _not_found(f"no file {path!r} in the run of {job.id!r}") from None
        except InvalidTaskError as exc:
            raise _not_found(exc.one_line()) from None
        except OSError as exc:  # a component that is a file, say
            raise _not_found(f"{path}: {exc.strerror or exc}") from None
        media = MEDIA.get(Path(path).suffix, "application/octet-stream")
        # The page is the runner's own, with no script: a browser may show it, never run one.
        headers = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"}
        return Response(data, media_type=media, headers=headers)

    del run_file
