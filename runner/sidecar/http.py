"""The sidecar's HTTP API (FastAPI on uvicorn): the same requests as the mailbox, their status
and server-sent stage events, cancellation, health and Prometheus metrics.

Every bad request is a 4xx with a JSON error body (`{"error": {code, message, problems}}`);
bodies are limited while they are read (413) and requests that frame their body twice refused
(400); request headers have a deadline (408) and connections a bound; with a token every
request needs `Authorization: Bearer <token>` (401).
"""

import asyncio
import hmac
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Annotated, Any, Literal

import h11
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from uvicorn.protocols.http.h11_impl import H11Protocol

from runner import __version__
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
from runner.sidecar.store import JobSummary

DEFAULT_MAX_BODY = 64 * 1024 * 1024
HEADER_TIMEOUT_SECONDS = 10.0  # the request line and every header
BODY_IDLE_SECONDS = 30.0  # between two pieces of a body
MAX_CONNECTIONS = 128
_ID = re.compile(NAME_PATTERN)
EVENT_POLL_SECONDS = 0.25

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _error_json(
    status: int,
    code: str,
    message: str,
    problems: list[ErrorDetail] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = ErrorBody(code=code, message=message, problems=problems or [])
    return JSONResponse(
        {"error": body.model_dump(mode="json", by_alias=True, exclude_none=True)},
        status_code=status,
        headers=headers,
    )


class Guard:
    """Pure ASGI middleware in front of everything: the bearer token, then the body.

    A request that declares both `Content-Length` and `Transfer-Encoding` is refused (RFC 9112
    6.3: a server may, and the two framings disagreeing is how requests are smuggled past a
    limit). Every body, whatever its framing, is read here, counted against the limit while it
    streams in, with a deadline on each piece, and handed on whole."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body: int,
        body_idle_seconds: float = BODY_IDLE_SECONDS,
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body
        self.body_idle_seconds = body_idle_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_headers = [(k.lower(), v) for k, v in scope.get("headers") or []]
        headers = dict(raw_headers)
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            scheme, _, credential = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credential.strip(), self.token
            ):
                response = _error_json(
                    401,
                    "unauthorized",
                    "this sidecar needs Authorization: Bearer <token>",
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        lengths = {v.strip() for k, v in raw_headers if k == b"content-length"}
        if lengths and b"transfer-encoding" in headers:
            await self._refuse(
                scope,
                receive,
                send,
                400,
                "bad-request",
                "a request with both Content-Length and Transfer-Encoding is refused (RFC 9112)",
            )
            return
        if len(lengths) > 1:
            await self._refuse(
                scope, receive, send, 400, "bad-request", "Content-Length is given twice"
            )
            return
        if lengths:
            (length,) = lengths
            declared = int(length) if length.isdigit() and len(length) < 19 else -1
            if declared < 0:
                await self._refuse(
                    scope, receive, send, 400, "bad-request", "Content-Length is not a number"
                )
                return
            if declared > self.max_body:
                await self._too_large(scope, receive, send)
                return
        if not lengths and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), self.body_idle_seconds)
            except TimeoutError:
                await self._refuse(
                    scope,
                    receive,
                    send,
                    408,
                    "timeout",
                    f"no part of the body came for {self.body_idle_seconds:g} s",
                )
                return
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
    ) -> None:
        # The connection closes after: what is left of this request's bytes is not read.
        await _error_json(status, code, message, headers={"Connection": "close"})(
            scope, receive, send
        )

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._refuse(
            scope,
            receive,
            send,
            413,
            "too-large",
            f"the request body is larger than {self.max_body} bytes",
        )


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the bounds it lacks: a connection that does not
    finish its request line and headers within `header_timeout` seconds (on its first request
    or a later one on the same connection) is closed with 408, and connections beyond
    `max_connections` are closed as they open. (uvicorn's keep-alive timeout only starts after
    a response, so a client that sends half a header line held its connection forever.)"""

    header_timeout: float = HEADER_TIMEOUT_SECONDS
    max_connections: int = MAX_CONNECTIONS
    _header_timer: asyncio.TimerHandle | None = None

    @classmethod
    def bounded(cls, *, header_timeout: float, max_connections: int) -> type[H11Protocol]:
        return type(
            "BoundedH11Protocol",
            (cls,),
            {"header_timeout": header_timeout, "max_connections": max_connections},
        )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.close()
            return
        self._await_headers()

    def _await_headers(self) -> None:
        self._stop_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            )
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:
            self._stop_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)


def create_app(
    service: Service,
    metrics: Metrics,
    *,
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    body_idle_seconds: float = BODY_IDLE_SECONDS,
) -> Any:
    app = FastAPI(
        title="selfbench-runner sidecar",
        version=__version__,
        description="Verify SelfBench tasks: compile, audit, build, and the smoke, nop, oracle "
        "and determinism gates. The same requests as the mailbox protocol.",
    )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            loc = [str(p) for p in error.get("loc", ())]
            if loc and loc[0] in ("body", "path", "query", "header"):
                loc = loc[1:]
            problems.append(
                ErrorDetail(field=".".join(loc) or None, message=str(error.get("msg", "")))
            )
        return _error_json(422, "invalid-request", "the request is not valid", problems)

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
        return _error_json(exc.status_code, code, str(detail), headers=headers)

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

    json_error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}
    errors: dict[int | str, dict[str, Any]] = {
        422: {
            "model": ErrorEnvelope,
            "description": "The request is not valid",
            "content": json_error,
        },
    }
    if token is not None:
        errors[401] = {
            "model": ErrorEnvelope,
            "description": "Token missing or wrong",
            "content": json_error,
        }

    @app.post(
        "/v1/verifications",
        status_code=202,
        response_model=Accepted,
        responses={
            200: {"model": Accepted, "description": "This id was already submitted"},
            400: {"model": ErrorEnvelope, "description": "The body is not JSON"},
            403: {"model": ErrorEnvelope, "description": "A repository outside the allowed roots"},
            409: {"model": ErrorEnvelope, "description": "The id or archive path is taken"},
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
            status = {"stopping": 503, "conflict": 409, "repository-refused": 403}.get(
                exc.code, 400
            )
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

    @app.get(
        "/v1/verifications/{verification_id}",
        response_model=VerificationStatus,
        response_model_by_alias=True,
        response_model_exclude_none=True,
        responses={404: {"model": ErrorEnvelope, "description": "Unknown id"}, **errors},
    )
    def status(job: Annotated[JobSummary, Depends(job_or_404)]) -> Any:
        """The job's state, each stage's progress, and the response (report) once done."""
        return service.store.status(job)

    @app.get(
        "/v1/verifications/{verification_id}/events",
        response_class=EventSourceResponse,
        responses={
            404: {"model": ErrorEnvelope, "description": "Unknown id", "content": json_error},
            **errors,
        },
    )
    async def events(
        request: Request, job: Annotated[JobSummary, Depends(job_or_404)]
    ) -> AsyncIterator[ServerSentEvent]:
        """Server-sent events, one per stage change (`event: stage`, data: {stage, status,
        detail, seconds}) and of the job itself (`event: job`); the stream ends with the
        job. Reconnect with Last-Event-ID to resume."""
        after = 0
        last = request.headers.get("last-event-id", "")
        if last.isdigit() and len(last) < 19:
            after = int(last)
        while True:
            batch = await asyncio.to_thread(service.store.events, job.id, after=after)
            for event in batch:
                after = event.seq
                yield ServerSentEvent(
                    event="job" if event.stage == "job" else "stage",
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
            return _error_json(
                409, "finished", f"verification {job.id!r} already ended ({job.state.value})"
            )
        current = service.cancel(job.id) or job
        return service.store.status(current)

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
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
    )
    def prometheus() -> Response:
        """Prometheus text: verifications by verdict, stage durations, queue depth, reuse."""
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    del invalid, http_error, submit, status, events, cancel, health, prometheus
    return Guard(app, token=token, max_body=max_body, body_idle_seconds=body_idle_seconds)


def openapi_document(app: Guard) -> dict[str, Any]:
    inner: FastAPI = app.app  # type: ignore[assignment]
    return dict(inner.openapi())
