"""The sidecar's HTTP API (FastAPI on uvicorn): the same requests as the mailbox, their status
and server-sent stage events, cancellation, health and Prometheus metrics.

Every bad request is a 4xx with a JSON error body (`{"error": {code, message, problems}}`);
what reaches the routes passed runner.sidecar.transport first (token, body framing and size,
header deadline, connection bound).
"""

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from runner import __version__
from runner.run.state import PROGRESS
from runner.sidecar.files import run_file_routes
from runner.sidecar.jobs import JobSummary
from runner.sidecar.metrics import Metrics
from runner.sidecar.policy import RequestRefusedError
from runner.sidecar.request import (
    NAME_PATTERN,
    Accepted,
    ErrorBody,
    ErrorDetail,
    ErrorEnvelope,
    Health,
    VerificationRequest,
    VerificationStatus,
)
from runner.sidecar.service import SOURCE_HTTP, Service
from runner.sidecar.transport import (
    BODY_IDLE_SECONDS,
    MAX_CONNECTIONS,
    OPEN_PATHS,
    AccessLog,
    Guard,
    StreamBound,
    error_json,
)

DEFAULT_MAX_BODY = 64 * 1024 * 1024
_ID = re.compile(NAME_PATTERN)
EVENT_POLL_SECONDS = 0.25
JSON_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}
Responses = dict[int | str, dict[str, Any]]


def create_app(
    service: Service,
    metrics: Metrics,
    *,
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    body_idle_seconds: float = BODY_IDLE_SECONDS,
    max_streams: int = MAX_CONNECTIONS // 2,
) -> Any:
    app = FastAPI(
        title="selfbench-runner sidecar",
        version=__version__,
        description="Verify SelfBench tasks: compile, audit, build, and the smoke, nop, oracle, "
        "determinism and hack gates. The same requests as the mailbox protocol.",
        # Swagger UI and ReDoc load their scripts from a public CDN: blank offline. The spec
        # (/openapi.json) is what a client generator or any OpenAPI viewer reads.
        docs_url=None,
        redoc_url=None,
    )
    # Every operation but OPEN_PATHS's answers 401 without the token (when there is one).
    unauthorized: Responses = (
        {
            401: {
                "model": ErrorEnvelope,
                "description": "Token missing or wrong",
                "content": JSON_ERROR,
            }
        }
        if token is not None
        else {}
    )
    errors: Responses = {
        422: {
            "model": ErrorEnvelope,
            "description": "The request is not valid",
            "content": JSON_ERROR,
        },
        **unauthorized,
    }

    def job_or_404(
        verification_id: Annotated[str, PathParam(max_length=256)],
    ) -> JobSummary:
        # No id that breaks the request pattern was ever stored: such an id is unknown.
        # A summary: a GET never copies or parses the (possibly large) request.
        job = service.store.summary(verification_id) if _ID.fullmatch(verification_id) else None
        if job is None:
            raise HTTPException(
                404,
                detail=ErrorBody(code="not-found", message=f"no verification {verification_id!r}"),
            )
        return job

    _error_handlers(app)
    _submit_route(app, service, errors)
    _read_routes(app, service, job_or_404, errors)
    _cancel_route(app, service, job_or_404, errors)
    run_file_routes(app, job_or_404, errors)
    _service_routes(app, service, metrics, unauthorized)
    if token is not None:
        _declare_bearer(app)
    return AccessLog(
        Guard(
            StreamBound(app, limit=max_streams),
            token=token,
            max_body=max_body,
            body_idle_seconds=body_idle_seconds,
        )
    )


def _declare_bearer(app: FastAPI) -> None:
    """The spec says what Guard does: every operation needs the bearer token but the open ones
    (OPEN_PATHS: a liveness probe, the spec itself)."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        schema = made()  # FastAPI's, made once and kept in app.openapi_schema
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"}
        }
        schema["security"] = [{"bearer": []}]
        for path in OPEN_PATHS:
            for operation in schema.get("paths", {}).get(path, {}).values():
                operation["security"] = []
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _error_handlers(app: FastAPI) -> None:
    """Every error as the JSON error body, with the fields that were wrong."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        content_type = request.headers.get("content-type", "")
        for error in exc.errors():
            loc = [str(p) for p in error.get("loc", ())]
            message = str(error.get("msg", ""))
            if loc == ["body"]:
                # The body as a whole: most often not sent as JSON at all (FastAPI then reads
                # it as no object), which the bare message does not say.
                if "json" not in content_type.lower():
                    message = (
                        "send the request as a JSON object with the header Content-Type: "
                        f"application/json (this one had {content_type or 'no Content-Type'})"
                    )
                problems.append(ErrorDetail(field="body", message=message))
                continue
            if loc and loc[0] in ("body", "path", "query", "header"):
                loc = loc[1:]
            problems.append(ErrorDetail(field=".".join(loc) or None, message=message))
        return error_json(422, "invalid-request", "the request is not valid", problems)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail
        if isinstance(detail, ErrorBody):
            return JSONResponse(
                {"error": detail.model_dump(mode="json", by_alias=True, exclude_none=True)},
                status_code=exc.status_code,
                headers=exc.headers,
            )
        code = {400: "bad-request", 404: "not-found", 405: "method-not-allowed"}.get(
            exc.status_code, "http-error"
        )
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route that matched the path only; a
            # path served by two routes (GET and DELETE) answers with all of them.
            methods: set[str] = set()
            for route in app.router.routes:
                if (
                    isinstance(route, APIRoute)
                    and route.matches(request.scope)[0] is not Match.NONE
                ):
                    methods |= route.methods or set()
            if methods:
                headers["Allow"] = ", ".join(sorted(methods))
        return error_json(exc.status_code, code, str(detail), headers=headers)

    del invalid, http_error


def _submit_route(app: FastAPI, service: Service, errors: Responses) -> None:
    """POST /v1/verifications."""

    @app.post(
        "/v1/verifications",
        status_code=202,
        response_model=Accepted,
        responses={
            200: {"model": Accepted, "description": "This id was already submitted"},
            400: {"model": ErrorEnvelope, "description": "The body is not JSON"},
            403: {"model": ErrorEnvelope, "description": "A repository outside the allowed roots"},
            409: {
                "model": ErrorEnvelope,
                "description": "The id or archive path is taken; or a fix (fixOf) of an unknown "
                "or red verification, or one that crosses the verification round's boundary "
                "(code fix-refused: each field at fault named)",
            },
            413: {"model": ErrorEnvelope, "description": "The body is too large"},
            503: {"model": ErrorEnvelope, "description": "The sidecar is stopping"},
            **errors,
        },
        response_model_by_alias=True,
        response_model_exclude_none=True,
    )
    def submit(body: VerificationRequest) -> Any:
        """Queue a verification (recorded before this answers). A repeated id with the same
        body answers 200 with that job; with another body, 409."""
        try:
            before = service.store.summary(body.id)
            job = service.submit(body, source=SOURCE_HTTP)
        except RequestRefusedError as exc:
            status = {
                "stopping": 503,
                "conflict": 409,
                "repository-refused": 403,
                # The fix conflicts with the verification it names (unknown, not green, or
                # crossing the round's boundary): the request is well formed.
                "fix-refused": 409,
            }.get(exc.code, 400)
            return JSONResponse(
                {"error": exc.body().model_dump(mode="json", by_alias=True, exclude_none=True)},
                status_code=status,
                headers={"Retry-After": "5"} if status == 503 else None,
            )
        accepted = Accepted(id=job.id, status=job.state, location=f"/v1/verifications/{job.id}")
        return JSONResponse(
            accepted.model_dump(mode="json", by_alias=True),
            status_code=200 if before is not None else 202,
            headers={"Location": accepted.location},
        )

    del submit


def _read_routes(app: FastAPI, service: Service, job_or_404: Any, errors: Responses) -> None:
    """GET a job's status, and its events as a server-sent stream."""

    @app.get(
        "/v1/verifications/{verification_id}",
        response_model=VerificationStatus,
        response_model_by_alias=True,
        response_model_exclude_none=True,
        responses={404: {"model": ErrorEnvelope, "description": "Unknown id"}, **errors},
    )
    def status(job: Annotated[JobSummary, Depends(job_or_404)]) -> Any:
        """The job's state, each stage's progress, and the response (report) once done; every
        key of the status present (null until known)."""
        return JSONResponse(service.store.status(job).document())

    @app.get(
        "/v1/verifications/{verification_id}/events",
        response_class=EventSourceResponse,
        responses={
            404: {"model": ErrorEnvelope, "description": "Unknown id", "content": JSON_ERROR},
            429: {
                "model": ErrorEnvelope,
                "description": "As many event streams are open as the sidecar keeps",
                "content": JSON_ERROR,
            },
            **errors,
        },
    )
    async def events(
        request: Request, job: Annotated[JobSummary, Depends(job_or_404)]
    ) -> AsyncIterator[ServerSentEvent]:
        """Server-sent events, one per stage change (`event: stage`, data: {stage, status,
        detail, seconds}), one per progress line of a running stage (`event: progress`, its
        detail: the selection under test and its tests so far, the exploit the hack gate is on)
        and of the job itself (`event: job`); the stream ends with the job. Reconnect with
        Last-Event-ID to resume."""
        after = 0
        last = request.headers.get("last-event-id", "")
        if last.isdigit() and len(last) < 19:
            after = int(last)
        while True:
            batch = await asyncio.to_thread(service.store.events, job.id, after=after)
            for event in batch:
                after = event.seq
                yield ServerSentEvent(
                    event="job"
                    if event.stage == "job"
                    else PROGRESS
                    if event.status == PROGRESS
                    else "stage",
                    id=str(event.seq),
                    data={
                        "stage": event.stage,
                        "status": event.status,
                        "detail": event.detail,
                        "seconds": event.seconds,
                        "at": event.at,
                    },
                )
            current = await asyncio.to_thread(service.store.summary, job.id)
            if current is None or (current.state.finished and not batch):
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(EVENT_POLL_SECONDS)

    del status, events


def _cancel_route(app: FastAPI, service: Service, job_or_404: Any, errors: Responses) -> None:
    """DELETE a job."""

    @app.delete(
        "/v1/verifications/{verification_id}",
        response_model=VerificationStatus,
        response_model_by_alias=True,
        response_model_exclude_none=True,
        responses={
            404: {"model": ErrorEnvelope, "description": "Unknown id"},
            409: {"model": ErrorEnvelope, "description": "Already finished"},
            **errors,
        },
    )
    def cancel(job: Annotated[JobSummary, Depends(job_or_404)]) -> Any:
        """Cancel: a queued job never runs; a running one is interrupted and its containers
        are removed. The response is `error` with code `cancelled`."""
        if job.state.finished:
            return error_json(
                409, "finished", f"verification {job.id!r} already ended ({job.state.value})"
            )
        current = service.cancel(job.id) or job
        return service.store.status(current)

    del cancel


def _service_routes(
    app: FastAPI, service: Service, metrics: Metrics, unauthorized: Responses
) -> None:
    """Health (open: OPEN_PATHS) and metrics (the token's, `unauthorized` documents it)."""

    @app.get("/healthz", response_model=Health, response_model_by_alias=True)
    def health() -> Health:
        """Is the Docker engine reachable, how deep is the queue. Always 200 while the server
        answers (a liveness answer); `status` is `ok` only when the engine answers and the
        sidecar takes work, which is what a readiness check should look at."""
        queued, running = service.depth()
        engine = service.engine.reachable()
        state: Literal["ok", "degraded", "stopping"] = (
            "stopping" if service.stopping else ("ok" if engine else "degraded")
        )
        return Health(status=state, engine=engine, queue_depth=queued, running=running)

    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {}}, "description": "Prometheus text"},
            **unauthorized,
        },
    )
    def prometheus() -> Response:
        """Prometheus text: verifications by verdict, stage durations, queue depth, reuse."""
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    del health, prometheus


def openapi_document(app: Guard) -> dict[str, Any]:
    inner: FastAPI = app.app  # type: ignore[assignment]
    return dict(inner.openapi())
