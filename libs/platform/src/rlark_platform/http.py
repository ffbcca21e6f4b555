"""The FastAPI application every service API starts from.

Adds: request ids bound into logs, one log line per request and NUL refused (``request_context``),
uniform JSON errors (never a 500 for bad input; the framework's own 404/405 and a body it cannot decode —
not UTF-8, not JSON — answered in the same envelope, ``http_api_error``), ``/healthz`` (process alive), ``/readyz`` (dependencies
answer), ``/metrics`` (Prometheus; on a public app only with its bearer token), and the ``caller`` dependency that accepts only requests the
gateway signed — for this service, this method, target and body, once (``identity.ReplayGuard``, one per
app). The body limit and the HTTP server's own limits are ``body_limit`` and ``http_server``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import structlog
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from rlark_contracts.messages import text, validation_text
from starlette.exceptions import HTTPException as StarletteHTTPException

from rlark_platform.db.errors import database_unavailable
from rlark_platform.errors import ApiError
from rlark_platform.identity import (
    Caller,
    IdentityError,
    ReplayGuard,
    Role,
    SignedRequest,
    verify_caller,
)
from rlark_platform.request_context import RequestContext

NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}

log = structlog.get_logger(__name__)

ReadyCheck = Callable[[], Awaitable[None]]


def _safe_part(part: Any) -> str:
    # Field names come from the client: an unknown "field" may be pasted secret text. Never echo that.
    text = str(part)
    if len(text) > 64 or not text.isprintable() or any(c.isspace() for c in text):
        return "<unexpected field>"
    return text


def field_of(loc: Any) -> str:
    """The dotted path of a validation error's location: a list index as ``[0]``, a mapping key that looks
    like one as ``["0"]`` (pydantic gives the first as an int, the second as a str), never one for the other."""
    out = ""
    for p in loc:
        if p in ("body", "query", "path", "header", "[key]"):
            continue
        if isinstance(p, int) and not isinstance(p, bool):
            out += f"[{p}]"
            continue
        part = _safe_part(p)
        out += f'["{part}"]' if part.isdigit() else (f".{part}" if out else part)
    return out


def declared_field(loc: Any, known: frozenset[str] | None) -> str:
    """:func:`field_of`, where an API declares its ``known`` top-level fields: an error under any other name
    is the ``body``'s (a name the client made up is not repeated back, however harmless it looks)."""
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    if known is not None and parts and not (isinstance(parts[0], str) and parts[0] in known):
        return "body"
    return field_of(loc)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def http_api_error(exc: StarletteHTTPException) -> ApiError:
    """The error envelope of an ``HTTPException`` raised by the framework rather than by RLark's code: a
    route or method that does not exist, or a body FastAPI could not decode before validation (a 400 whose
    cause is the decoding error: bytes that are not UTF-8, JSON nested past the decoder's recursion limit),
    answered as every other malformed body is — 422 ``invalid_request`` naming ``body``."""
    cause = exc.__cause__
    if exc.status_code == 400 and cause is not None:
        if isinstance(cause, UnicodeDecodeError):
            said = text("invalid_request.body_not_utf8", field="body")
        elif isinstance(cause, RecursionError):
            said = text("invalid_request.body_too_deep", field="body")
        else:
            said = text("invalid_request.body_unreadable", field="body")
        return ApiError(422, "invalid_request", said, "body")
    return ApiError(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"), str(exc.detail))


def body_not_json(exc: RequestValidationError) -> ApiError | None:
    """The 422 for a body that is not JSON (no field to name: ``body``, and the decoder's reason), or None
    for other validation errors. Services with their own validation handler ask it first."""
    errors = exc.errors()
    if not errors or errors[0].get("type") != "json_invalid":
        return None
    why = str((errors[0].get("ctx") or {}).get("error", "JSON decode error"))
    return ApiError(
        422, "invalid_request", text("invalid_request.json_invalid", field="body", error=why), "body"
    )


def create_app(
    service: str,
    *,
    internal_secret: str,
    ready_checks: list[ReadyCheck] | None = None,
    title: str | None = None,
    public: bool = False,
    metrics_token: str = "",
    known_fields: frozenset[str] | None = None,
    **fastapi_kwargs: Any,
) -> FastAPI:
    """``public`` apps (the gateway) authenticate callers themselves; internal ones require the gateway.
    ``known_fields``: the top-level names of every body and query an app declares, when a 422 must name only
    those (:func:`declared_field`); otherwise any field is named, made safe to print.

    ``/metrics`` of a public app needs ``Authorization: Bearer <metrics_token>`` and is off (404) without a
    token; internal apps serve it openly (their port is not the public one)."""
    # RLark exports Prometheus metrics and logs, not OpenTelemetry: FastAPI's native telemetry off, or every
    # request looks the global OpenTelemetry providers up (three environment reads; ~3 % of a small request).
    fastapi_kwargs.setdefault("telemetry", NO_TELEMETRY)
    app = FastAPI(title=title or f"rlark-{service}", **fastapi_kwargs)
    app.state.internal_secret = internal_secret
    app.state.service = service
    app.state.replay_guard = ReplayGuard()
    checks = ready_checks or []

    app.add_middleware(RequestContext, service=service)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = http_api_error(exc)
        return JSONResponse(error.body(), status_code=error.status, headers=exc.headers or None)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        not_json = body_not_json(exc)
        if not_json is not None:
            return JSONResponse(not_json.body(), status_code=422)
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        field = declared_field(first.get("loc", ()), known_fields)
        details = []
        for error in errors:
            detail: dict[str, Any] = {
                "field": declared_field(error.get("loc", ()), known_fields),
                "message": error.get("msg", ""),
            }
            said = validation_text(detail["field"], error)
            details.append({**detail, **said.wire()} if said else detail)
        said = validation_text(field or "request", first)
        body = ApiError(
            422,
            "invalid_request",
            said or f"{field or 'request'}: {first.get('msg')}",
            field or None,
            {"errors": details},
        ).body()
        return JSONResponse(body, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        if database_unavailable(exc):
            # Its transaction was rolled back by the server: nothing was written, a retry is safe.
            log.warning("database unavailable", error_type=type(exc).__name__, error=str(exc))
            unavailable = ApiError(503, "database_unavailable", text("database_unavailable"))
            return JSONResponse(unavailable.body(), status_code=503, headers={"Retry-After": "1"})
        log.exception("unhandled error", error_type=type(exc).__name__)
        return JSONResponse(ApiError(500, "internal_error", text("internal_error")).body(), status_code=500)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        failures = []
        for check in checks:
            try:
                await check()
            except Exception as exc:
                failures.append(f"{getattr(check, '__name__', 'check')}: {type(exc).__name__}")
        if failures:
            return JSONResponse({"status": "not ready", "failures": failures}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> PlainTextResponse:
        if public:
            if not metrics_token:
                raise ApiError(404, "not_found", "metrics are not served here (RLARK_METRICS_TOKEN is unset)")
            sent = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(sent, f"Bearer {metrics_token}".encode()):
                raise ApiError(401, "unauthenticated", "metrics need Authorization: Bearer <metrics token>")
        return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)

    return app


def database_ready(pool: Any) -> ReadyCheck:
    """A readiness check that the service's database answers."""

    async def database() -> None:
        await pool.fetchval("SELECT 1")

    return database


def signed_request(request: Request, body: bytes) -> SignedRequest:
    """What the gateway must have signed for ``request`` to reach this service."""
    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    target = SignedRequest.target_of(raw_path, request.scope.get("query_string", b""))
    return SignedRequest(request.app.state.service, request.method, target, body)


async def require_caller(request: Request) -> Caller:
    """Dependency: the user the gateway vouched for on this very request; 401 for anything that bypassed
    the gateway, was signed for another service, method, target or body, expired, or was seen before.
    The body is already read (and bounded) when this runs: FastAPI reads it before the dependencies."""
    try:
        verified = verify_caller(
            request.app.state.internal_secret, request.headers, signed_request(request, await request.body())
        )
        request.app.state.replay_guard.check(verified)
    except IdentityError as exc:
        raise ApiError(401, "unauthenticated", str(exc)) from None
    caller = verified.caller
    structlog.contextvars.bind_contextvars(user=caller.user)
    return caller


async def require_admin(caller: Annotated[Caller, Depends(require_caller)]) -> Caller:
    if caller.role is not Role.ADMIN:
        raise ApiError(403, "forbidden", "this action needs the admin role")
    return caller


CallerDep = Annotated[Caller, Depends(require_caller)]
AdminDep = Annotated[Caller, Depends(require_admin)]
