"""A job's TensorBoard, proxied through the platform (issue 15.4, ADR 0010).

``GET|POST /api/v1/jobs/{job_id}/tensorboard/...``: authorized like every job route (the scheduler is asked
as the caller: another user's job is its 404). Each request opens a relay on the same rendezvous as SSH — a
``tcp`` order for the ``tensorboard`` service of the job's Header worker; that worker's agent starts a
TensorBoard server over the job's ``tensorboardDir`` if none runs (as the job's unprivileged uid, stopped
when idle) and connects the relay to it — and the gateway speaks HTTP/1.1 over the relayed bytes
(``httpcore`` with a network backend whose one connection is the relay). The server runs with
``--path_prefix`` set to this route, so its own links stay under it. The answer streams back as it comes;
hop-by-hop headers are dropped. Any job status: it works after the job ended while the files exist.

TensorBoard's own POSTs (form bodies) pass the request guard's body-type rule and are not audited as changes
(``domain.requests.is_tool_path``); the Origin check still applies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpcore
from fastapi import APIRouter, Request, WebSocket
from rlark_contracts.relay import (
    OP_TCP,
    RELAY_FRAME_BYTES,
    SERVICE_TENSORBOARD,
    TENSORBOARD_PATH,
    TENSORBOARD_START_S,
)
from rlark_platform.errors import ApiError
from rlark_platform.openapi import error_responses
from starlette.responses import RedirectResponse, Response
from starlette.websockets import WebSocketState

from rlark_gateway.api.deps import GatewayDep, PrincipalDep
from rlark_gateway.api.outputs import ReleasingResponse, job_as_caller
from rlark_gateway.domain.relay import RelayRefused, RelayTarget
from rlark_gateway.relays import Relay, RelayHub

router = APIRouter(tags=["tensorboard"])

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


@router.api_route(TENSORBOARD_PATH, methods=["GET"], include_in_schema=False)
async def tensorboard_root(job_id: str) -> Response:
    return RedirectResponse(TENSORBOARD_PATH.format(job_id=job_id) + "/", status_code=307)


@router.api_route(
    TENSORBOARD_PATH + "/{path:path}",
    methods=["GET", "POST"],
    responses={
        **error_responses(401, 403, 404, 409, 413, 422, 429, 502, 503, 504),
        "default": {"description": "TensorBoard's own answer, passed on (any status)"},
    },
)
async def tensorboard(
    job_id: str, path: str, request: Request, principal: PrincipalDep, gw: GatewayDep
) -> Response:
    """Your job's TensorBoard (an admin: any job's), served from its Header's cluster agent on demand."""
    job = await job_as_caller(gw, principal, job_id)
    if not job.get("tensorboard_dir"):
        raise ApiError(404, "no_tensorboard", f"job {job_id} declares no tensorboardDir", "job_id")
    body = await request.body()
    if len(body) > MAX_REQUEST_BODY:
        raise ApiError(413, "payload_too_large", "TensorBoard requests carry at most 1 MiB", "body")
    try:
        target = header_worker(job)
        hub: RelayHub[WebSocket] = gw.relays
        relay = await hub.open(
            target, OP_TCP, {"service": SERVICE_TENSORBOARD}, prepare_s=TENSORBOARD_START_S
        )
    except RelayRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, exc.field) from None
    stream = _RelayStream(relay)
    pool = httpcore.AsyncConnectionPool(network_backend=_RelayBackend(stream), max_connections=1, retries=0)
    headers = [(k.encode(), v.encode()) for k, v in request.headers.items() if k.lower() in REQUEST_HEADERS]
    headers.append((b"host", b"127.0.0.1"))
    if body or request.method == "POST":
        headers.append((b"content-length", str(len(body)).encode()))
    target_url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    try:
        answer = await pool.handle_async_request(
            httpcore.Request(request.method, f"http://127.0.0.1{target_url}", headers=headers, content=body)
        )
    except (httpcore.ProtocolError, httpcore.NetworkError, httpcore.TimeoutException) as exc:
        await pool.aclose()
        await stream.aclose()
        raise ApiError(502, "tensorboard_failed", f"TensorBoard did not answer: {exc}", "job_id") from None

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
