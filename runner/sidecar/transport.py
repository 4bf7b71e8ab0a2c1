"""What stands between a client and the sidecar's API: the bearer token, the body's framing and
size (read whole here, with a deadline on each piece), the request headers' deadline and the
connection bound (a uvicorn protocol).

Every refusal is a JSON error body (`{"error": {code, message, problems}}`).
"""

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import h11
from fastapi.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from runner.sidecar.request import ErrorBody, ErrorDetail

HEADER_TIMEOUT_SECONDS = 10.0  # the request line and every header
BODY_IDLE_SECONDS = 30.0  # between two pieces of a body
MAX_CONNECTIONS = 128
# A refused body is still read (and dropped) up to this much and this long before the answer:
# closing a socket with unread bytes makes Linux send a reset, which can destroy the 413 before
# the client reads it (measured: httpx saw "peer closed connection" for a 2 MiB post against a
# 1 MiB limit, about one run in thirty). nginx's lingering close and Go's rstAvoidanceDelay are
# the same remedy.
LINGER_BYTES = 16 * 1024 * 1024
LINGER_SECONDS = 5.0
LINGER_IDLE_SECONDS = 1.0  # a client still sending sends on; one that stopped is not waited for

access = logging.getLogger("runner.sidecar.access")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def error_json(
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


class AccessLog:
    """Pure ASGI middleware outermost: one INFO line per request once its answer starts
    (method, path, status, milliseconds, client), refused ones too. The query string is left
    out (it is never a credential here, but a log line need not carry one either)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()

        async def answered(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                client = scope.get("client")
                access.info(
                    "%s %s %d %.0f ms%s",
                    scope.get("method", "?"),
                    scope.get("path", "?"),
                    message.get("status", 0),
                    (time.monotonic() - started) * 1000,
                    f" from {client[0]}" if client else "",
                )
            await send(message)

        await self.app(scope, receive, answered)


# Read without the token (GET or HEAD): a liveness or readiness probe (a kubelet's carries no
# secret) and the API's own description; nothing about a verification.
OPEN_PATHS = ("/healthz", "/openapi.json")


def _open(scope: Scope) -> bool:
    return scope.get("method") in ("GET", "HEAD") and scope.get("path") in OPEN_PATHS


class StreamBound:
    """Pure ASGI middleware: at most `limit` event streams (GET .../events) open at once, past
    it a 429 with Retry-After. A stream holds its connection for as long as its job runs: a
    token holder that opened one per connection (190 were measured) left every connection
    busy, and then each new client was reset. The default bound is half of --max-connections,
    so requests that end always find a connection."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = max(1, limit)
        self.open = 0  # one event loop: no lock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.endswith("/events"):
            await self.app(scope, receive, send)
            return
        if self.open >= self.limit:
            refused = error_json(
                429,
                "too-many-streams",
                f"{self.open} event streams are open, the most this sidecar keeps: close one, "
                "or poll the status",
                headers={"Retry-After": "5"},
            )
            await refused(scope, receive, send)
            return
        self.open += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open -= 1


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
        lengths = {v.strip() for k, v in raw_headers if k == b"content-length"}
        chunked = b"transfer-encoding" in headers
        if not self._authorized(headers) and not _open(scope):
            await self._linger(receive, lengths, chunked=chunked)
            response = error_json(
                401,
                "unauthorized",
                "this sidecar needs Authorization: Bearer <token>",
                headers={"WWW-Authenticate": "Bearer", "Connection": "close"},
            )
            await response(scope, receive, send)
            return
        problem = self._framing_problem(lengths, chunked=chunked)
        if problem is not None:
            status, code, message = problem
            await self._linger(receive, lengths, chunked=chunked)
            await self._refuse(scope, receive, send, status, code, message)
            return
        if not lengths and not chunked:
            await self.app(scope, receive, send)  # no body
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _authorized(self, headers: Mapping[bytes, bytes]) -> bool:
        if self.token is None:
            return True
        scheme, _, credential = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self.token)

    def _framing_problem(
        self, lengths: set[bytes], *, chunked: bool
    ) -> tuple[int, str, str] | None:
        """Why the body's framing is refused (status, code, message), or None."""
        if lengths and chunked:
            return (
                400,
                "bad-request",
                "a request with both Content-Length and Transfer-Encoding is refused (RFC 9112)",
            )
        if len(lengths) > 1:
            return 400, "bad-request", "Content-Length is given twice"
        if lengths:
            (length,) = lengths
            declared = int(length) if length.isdigit() and len(length) < 19 else -1
            if declared < 0:
                return 400, "bad-request", "Content-Length is not a number"
            if declared > self.max_body:
                return 413, "too-large", f"the request body is larger than {self.max_body} bytes"
        return None

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, counted against the limit as it streams in, each piece within its
        deadline; None when the request was answered here (or the client went away)."""
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
                return None
            if message["type"] != "http.request":
                return None  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                if message.get("more_body", False):
                    await self._discard(receive, LINGER_BYTES)
                await self._too_large(scope, receive, send)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _linger(self, receive: Receive, lengths: set[bytes], *, chunked: bool) -> None:
        """Before an early answer: drop the body the client is still sending (bounded), so the
        close that follows does not reset the answer away. A declared length past the budget is
        not waited for."""
        if not lengths and not chunked:
            return
        declared = [int(v) for v in lengths if v.isdigit() and len(v) < 19]
        budget = self.max_body + LINGER_BYTES
        if declared and max(declared) > budget:
            return
        await self._discard(receive, budget)

    async def _discard(self, receive: Receive, budget: int) -> None:
        """Read and drop the rest of a refused body: at most `budget` bytes within
        LINGER_SECONDS (a client that keeps sending past that gets the answer anyway)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LINGER_SECONDS
        while budget > 0:
            left = min(deadline - loop.time(), LINGER_IDLE_SECONDS)
            if left <= 0:
                return
            try:
                message = await asyncio.wait_for(receive(), left)
            except TimeoutError:
                return
            if message["type"] != "http.request":
                return
            budget -= len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
    ) -> None:
        # The connection closes after: what is left of this request's bytes (beyond what
        # _discard read) is not read.
        await error_json(status, code, message, headers={"Connection": "close"})(
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
    or a later one on the same connection) is closed with 408. (uvicorn's keep-alive timeout
    only starts after a response, so a client that sends half a header line held its
    connection forever.)

    Slow clients cannot lock others out: past half of `max_connections` a new connection gets a
    quarter of the header deadline, and at the bound a new connection takes the place of the
    one that has waited longest for its headers (closed with 408); only when every connection
    is busy with a request is the new one closed. (With a fixed deadline alone, 128 slow
    connections kept new clients out for about 13 s per wave.)"""

    header_timeout: float = HEADER_TIMEOUT_SECONDS
    max_connections: int = MAX_CONNECTIONS
    _header_timer: asyncio.TimerHandle | None = None
    _waiting_since: float | None = None  # when it began to wait for a request's headers

    @classmethod
    def bounded(cls, *, header_timeout: float, max_connections: int) -> type[H11Protocol]:
        return type(
            "BoundedH11Protocol",
            (cls,),
            {"header_timeout": header_timeout, "max_connections": max_connections},
        )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections and not self._evict_slowest():
            transport.close()
            return
        self._await_headers()

    def _evict_slowest(self) -> bool:
        """Close the connection that has waited longest for its headers (not this one)."""
        waiting = [
            c
            for c in self.connections
            if c is not self
            and isinstance(c, BoundedH11Protocol)
            and c._waiting_since is not None
            and not c.transport.is_closing()
        ]
        if not waiting:
            return False
        min(waiting, key=lambda c: c._waiting_since or 0.0)._headers_late()
        return True

    def _await_headers(self) -> None:
        self._stop_header_timer()
        deadline = self.header_timeout
        if len(self.connections) > self.max_connections // 2:
            deadline = max(1.0, deadline / 4)  # under pressure
        self._waiting_since = self.loop.time()
        self._header_timer = self.loop.call_later(deadline, self._headers_late)

    def _stop_header_timer(self) -> None:
        self._waiting_since = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._stop_header_timer()
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
