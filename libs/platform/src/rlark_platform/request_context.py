"""What every service API does around each HTTP request, as one pure ASGI middleware.

- A request id: the caller's ``X-Request-Id`` (the gateway sends its own), else a new one; bound into every
  log line of the request and returned as the response's ``X-Request-Id``.
- NUL refused: NUL is valid in a URL but never in a name, id or filter, and PostgreSQL text cannot hold it
  (one reaching SQL was a 500 and left the service slow to answer): 422 ``invalid_request`` naming
  ``path`` or ``query``, for every route.
- One log line per request (not for ``/healthz``, ``/readyz``, ``/metrics``) and the request metrics.

Pure ASGI rather than ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` runs the rest of the
app in a task of its own and passes the body through memory streams — about a fifth of a service's CPU per
small request — and event streams pass through this untouched.
"""

from __future__ import annotations

import time
import uuid

import structlog
from prometheus_client import Counter, Histogram
from rlark_contracts.messages import text
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlark_platform.errors import ApiError

log = structlog.get_logger("rlark_platform.http")

REQUESTS = Counter("rlark_http_requests_total", "HTTP requests", ["service", "method", "status"])
LATENCY = Histogram(
    "rlark_http_request_seconds",
    "HTTP request latency",
    ["service"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_REQUEST_ID = b"x-request-id"


def nul_in(path: str, query: str) -> str | None:
    """``"path"`` or ``"query"`` when the decoded path, or the query, holds a NUL character; else None."""
    if "\x00" in path:
        return "path"
    if "%00" in query or "\x00" in query:
        return "query"
    return None


class RequestContext:
    """ASGI middleware: request id, NUL refusal, a log line and metrics for each HTTP request of ``service``."""

    def __init__(self, app: ASGIApp, service: str) -> None:
        self.app = app
        self.service = service
        self._latency = LATENCY.labels(service)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = next((v.decode("latin-1") for k, v in scope["headers"] if k == _REQUEST_ID), None)
        request_id = request_id or uuid.uuid4().hex[:16]
        returned_id = request_id.encode("latin-1")
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != _REQUEST_ID]
                message["headers"] = [*headers, (_REQUEST_ID, returned_id)]
            await send(message)

        structlog.contextvars.bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        try:
            where = nul_in(scope["path"], scope.get("query_string", b"").decode("latin-1"))
            if where is None:
                await self.app(scope, receive, send_with_id)
            else:
                message = text("invalid_request.nul", field=where)
                refusal = JSONResponse(
                    ApiError(422, "invalid_request", message, where).body(), status_code=422
                )
                await refusal(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            REQUESTS.labels(self.service, scope["method"], str(status)).inc()
            self._latency.observe(elapsed)
            if scope["path"] not in _QUIET_PATHS:
                log.info(
                    "request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    ms=round(elapsed * 1000, 2),
                )
            structlog.contextvars.unbind_contextvars("request_id")
