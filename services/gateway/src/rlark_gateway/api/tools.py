"""The gateway's tools origin (ADR 0012): jobs' TensorBoard and Ray dashboard, and nothing else.

A second listener of the gateway (``RLARK_TOOLS_PORT``; browsers reach it at ``RLARK_TOOLS_URL``) serves
``/jobs/{job}/{tool}/...`` and ``/open``; every other path is 404, so a page a job's server sends — which the
job's user may control — runs on an origin where no API route and no console session exist.

- ``GET /open?ticket=`` exchanges a ticket the main origin signed (``domain.tools``; one use, short-lived,
  refused when another user's bearer token comes with it) for the cookie ``rlark_tool`` (HttpOnly,
  SameSite=Strict, ``Path=/jobs/{job}/{tool}/``) and sends the browser there with a page that refreshes to
  it (a redirect would carry the cross-site navigation along, and a Strict cookie would not be sent).
- ``GET|POST|PUT|PATCH|DELETE /jobs/{job}/{tool}/...`` authenticate with ``Authorization: Bearer`` (the CLI,
  scripts) or that cookie — never the console's session cookie, which a browser also sends here when both
  origins share a host name — and authorize each request again: the pass's credential must still be valid,
  the scheduler is asked for the job as that user (another user's job is its 404) and the tool must be
  available (``domain.tools.check_available``). Then a relay opens, as for SSH, with a ``tcp`` order for the
  tool's service of the job's Header worker; its agent connects it to the server (starting TensorBoard on
  demand) and the gateway speaks HTTP/1.1 over the relayed bytes (``httpcore`` with a network backend whose
  one connection is the relay). The answer streams back; hop-by-hop and origin-wide headers are dropped.

The user's credentials are never forwarded to the tool. The Ray dashboard gets the job attempt's Ray token
(``X-Ray-Authorization``, ADR 0022), derived here for that request only. Forms are accepted (TensorBoard posts them), no
change is audited here (a tool's POSTs are reads of the job's own server), and a foreign ``Origin`` is still
refused (``guards.RequestGuard``).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import quote

import httpcore
from fastapi import APIRouter, FastAPI, Query, Request, WebSocket
from rlark_contracts.messages import text
from rlark_contracts.relay import OP_TCP, RELAY_FRAME_BYTES, SERVICE_RAY_DASHBOARD
from rlark_platform.errors import ApiError
from rlark_platform.http import create_app
from rlark_platform.identity import ray_token
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.websockets import WebSocketState

from rlark_gateway.api.deps import GatewayDep, bearer_token, served_over_https
from rlark_gateway.api.guards import RequestGuard
from rlark_gateway.api.outputs import ReleasingResponse, job_as_caller
from rlark_gateway.domain.relay import RelayRefused, RelayTarget
from rlark_gateway.domain.tools import (
    TICKET_QUERY,
    TOOL_COOKIE,
    Tool,
    ToolRefused,
    check_available,
    issue,
    tool_named,
    tool_path,
    upstream_path,
    verify,
)
from rlark_gateway.handlers import Principal
from rlark_gateway.relays import Relay, RelayHub
from rlark_gateway.wiring import Gateway

router = APIRouter()
TOOL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]

MAX_REQUEST_BODY = 1 << 20
REQUEST_HEADERS = frozenset(
    {"accept", "accept-encoding", "accept-language", "content-type", "if-none-match", "if-modified-since"}
)
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate"}
)
ORIGIN_WIDE = frozenset(
    {"set-cookie", "clear-site-data", "strict-transport-security", "service-worker-allowed", "alt-svc"}
)
"""Response headers that act on the gateway's whole origin (its session cookie, its storage, its transport):
never TensorBoard's to send, so never passed on, with CORS grants (``access-control-*``)."""


def answer_headers(pairs: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """TensorBoard's response headers as the gateway passes them on: no hop-by-hop header, no length (the
    answer is re-streamed), nothing that acts on the gateway's origin as a whole."""
    kept: dict[str, str] = {}
    for raw_name, raw_value in pairs:
        name = raw_name.decode("latin-1").lower()
        if name in HOP_BY_HOP or name in ORIGIN_WIDE or name == "content-length":
            continue
        if name.startswith("access-control-"):
            continue
        kept[name] = raw_value.decode("latin-1")
    return kept


class _RelayStream(httpcore.AsyncNetworkStream):
    """The relay's WebSocket as the byte stream of one HTTP connection."""

    def __init__(self, relay: Relay[WebSocket]) -> None:
        self._relay, self._left = relay, b""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - httpcore's
        if not self._left:
            async with asyncio.timeout(timeout):
                message = await self._relay.agent.receive()
            if message["type"] == "websocket.disconnect":
                return b""
            self._left = message.get("bytes") or str(message.get("text") or "").encode()
        data, self._left = self._left[:max_bytes], self._left[max_bytes:]
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's
        for start in range(0, len(buffer), RELAY_FRAME_BYTES):
            await self._relay.agent.send_bytes(buffer[start : start + RELAY_FRAME_BYTES])

    async def aclose(self) -> None:
        ws = self._relay.agent
        if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await ws.close()
        self._relay.close()

    async def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise httpcore.UnsupportedProtocol("the relay carries plain HTTP to the agent's local server")

    def get_extra_info(self, info: str) -> Any:
        return None


class _RelayBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, stream: _RelayStream) -> None:
        self._stream = stream

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return self._stream

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise httpcore.UnsupportedProtocol("no unix sockets over a relay")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def header_worker(job: dict[str, Any]) -> RelayTarget:
    """The worker whose TensorBoard serves the job: its Header (rank 0); 409 while it holds none."""
    workers = list(job.get("workers") or [])
    chosen = next((w for w in workers if w.get("is_header")), None) or next(
        (w for w in workers if w.get("rank") == 0), None
    )
    if chosen is None:
        raise RelayRefused(409, "no_workers_yet", f"job {job.get('id')} holds no workers yet", "job_id")
    return RelayTarget(str(job["id"]), str(chosen["id"]), str(chosen["cluster"]))


def refusal(exc: ToolRefused | RelayRefused) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message, exc.field)


async def tool_principal(request: Request, gw: Gateway, job_id: str, tool: str) -> Principal:
    """Who calls a tool: a bearer token, else the tools cookie for this job's tool (its credential still
    valid); 401 ``tool_unauthenticated`` without either. The console's session cookie is not read here."""
    bearer = bearer_token(request)
    if bearer is not None:
        return await gw.accounts.authenticate(bearer, None)
    cookie = request.cookies.get(TOOL_COOKIE)
    if not cookie:
        raise ApiError(401, "tool_unauthenticated", text("tool_unauthenticated", tool=tool))
    secret = gw.settings.internal_secret.get_secret_value()
    try:
        found = verify(secret, cookie, "cookie", time.time(), job=job_id, tool=tool)
    except ToolRefused as exc:
        raise refusal(exc) from None
    principal = await gw.accounts.authenticate_digest(found.via, found.credential)
    if principal.username != found.user:
        raise ApiError(401, "tool_pass_invalid", text("tool_pass_invalid"), TICKET_QUERY)
    return principal


async def available(gw: Gateway, principal: Principal, job_id: str, tool: Tool) -> dict[str, Any]:
    """The job as ``principal`` sees it, once it has ``tool`` now; ApiError otherwise."""
    job = await job_as_caller(gw, principal, job_id)
    try:
        check_available(tool, job)
    except ToolRefused as exc:
        raise refusal(exc) from None
    return job


@router.get("/open")
async def open_tool(
    request: Request, gw: GatewayDep, ticket: Annotated[str, Query(alias=TICKET_QUERY, max_length=4096)]
) -> Response:
    """Exchange a main-origin ticket for this origin's cookie of one job's tool, then go to the tool."""
    secret, now = gw.settings.internal_secret.get_secret_value(), time.time()
    try:
        found = verify(secret, ticket, "ticket", now)
        spec = tool_named(found.tool)
    except ToolRefused as exc:
        raise refusal(exc) from None
    bearer = bearer_token(request)
    if bearer is not None and (await gw.accounts.authenticate(bearer, None)).username != found.user:
        raise ApiError(403, "tool_pass_other_user", text("tool_pass_other_user"), TICKET_QUERY)
    if not gw.used_tickets.take(found, now):
        raise ApiError(401, "tool_pass_invalid", text("tool_pass_invalid"), TICKET_QUERY)
    principal = await gw.accounts.authenticate_digest(found.via, found.credential)
    await available(gw, principal, found.job, spec)
    ttl = gw.settings.tool_cookie_ttl_s
    cookie = issue(
        secret, "cookie", found.job, spec.name, found.user, found.via, found.credential, int(now) + ttl
    )
    target = tool_path(quote(found.job, safe=""), spec.name)
    # A page that refreshes to the tool, not a redirect: the browser's next navigation then starts on this
    # origin, so the SameSite=Strict cookie goes with it even when the console is another site.
    link = html.escape(target, quote=True)
    page = (
        '<!doctype html><html><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={link}"><title>{html.escape(spec.label)}</title></head>'
        f'<body><a href="{link}">{html.escape(spec.label)}</a></body></html>'
    )
    response = HTMLResponse(page, headers={"cache-control": "no-store"})
    response.set_cookie(
        TOOL_COOKIE,
        cookie,
        max_age=ttl,
        path=target,
        httponly=True,
        samesite="strict",
        secure=gw.settings.cookie_secure or served_over_https(request),
    )
    return response


@router.get("/jobs/{job_id}/{tool}")
async def tool_root(job_id: str, tool: str) -> Response:
    return RedirectResponse(tool_path(quote(job_id, safe=""), tool), status_code=307)


@router.api_route("/jobs/{job_id}/{tool}/{path:path}", methods=TOOL_METHODS)
async def serve_tool(job_id: str, tool: str, path: str, request: Request, gw: GatewayDep) -> Response:
    """A job's tool, from its Header's cluster agent, for its owner or an admin."""
    try:
        spec = tool_named(tool)
    except ToolRefused as exc:
        raise refusal(exc) from None
    principal = await tool_principal(request, gw, job_id, spec.name)
    job = await available(gw, principal, job_id, spec)
    body = await request.body()
    if len(body) > MAX_REQUEST_BODY:
        raise ApiError(413, "payload_too_large", "a tool's requests carry at most 1 MiB", "body")
    try:
        target = header_worker(job)
        hub: RelayHub[WebSocket] = gw.relays
        relay = await hub.open(target, OP_TCP, {"service": spec.name}, prepare_s=spec.prepare_s)
    except RelayRefused as exc:
        raise refusal(exc) from None
    stream = _RelayStream(relay)
    pool = httpcore.AsyncConnectionPool(network_backend=_RelayBackend(stream), max_connections=1, retries=0)
    headers = [(k.encode(), v.encode()) for k, v in request.headers.items() if k.lower() in REQUEST_HEADERS]
    headers.append((b"host", b"127.0.0.1"))
    if spec.name == SERVICE_RAY_DASHBOARD:
        # The Header's Ray refuses calls without its job attempt's token (ADR 0022). The gateway derives it and
        # adds it here only, on the relay to that Ray: the user's request never carries it, no answer shows it.
        secret = gw.settings.internal_secret.get_secret_value()
        token = ray_token(secret, str(job["id"]), int(job.get("attempt") or 1))
        headers.append((b"x-ray-authorization", f"Bearer {token}".encode()))
    if body or request.method != "GET":
        headers.append((b"content-length", str(len(body)).encode()))
    target_url = upstream_path(spec, raw_path(request)) + (
        f"?{request.url.query}" if request.url.query else ""
    )
    try:
        answer = await pool.handle_async_request(
            httpcore.Request(request.method, f"http://127.0.0.1{target_url}", headers=headers, content=body)
        )
    except (httpcore.ProtocolError, httpcore.NetworkError, httpcore.TimeoutException) as exc:
        await pool.aclose()
        await stream.aclose()
        raise ApiError(
            502, "tool_failed", text("tool_failed", tool=spec.label, reason=str(exc)[:300]), "job_id"
        ) from None

    async def release() -> None:
        await answer.aclose()
        await pool.aclose()
        await stream.aclose()

    async def content() -> AsyncIterator[bytes]:
        try:
            async for chunk in answer.aiter_stream():
                yield chunk
        finally:
            await response.release()

    response = ReleasingResponse(
        content(), release, status_code=answer.status, headers=answer_headers(answer.headers)
    )
    return response


def raw_path(request: Request) -> str:
    """The path as the client encoded it (what the tool's own links produced)."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path


def _is_tool_route(route: BaseRoute) -> bool:
    """Not one of ``create_app``'s own routes (health, readiness, metrics): those stay on the main origin."""
    return not isinstance(route, Route) or route.path == "/open" or route.path.startswith("/jobs/")


def build_tools_api(gw: Gateway) -> FastAPI:
    """The tools origin's app: the tool routes only (no API, no console, no health or metrics routes)."""
    app = create_app(
        "gateway-tools",
        internal_secret=gw.settings.internal_secret.get_secret_value(),
        public=True,
        docs_url=None,
        openapi_url=None,
        redoc_url=None,
    )
    app.state.gateway = gw
    app.include_router(router)
    app.router.routes = [route for route in app.router.routes if _is_tool_route(route)]
    app.add_middleware(
        RequestGuard, trusted_proxies=gw.settings.trusted_proxies, allowed_origins=[], forms=True
    )
    return app


__all__ = ["answer_headers", "build_tools_api", "header_worker"]
