"""The reverse proxy to the services behind the gateway (one shared ``httpx.AsyncClient``).

Per request: the client's ``X-RLark-*`` headers, cookies and (except for agents) ``Authorization`` are
dropped; the gateway adds the caller it authenticated, signed with the internal secret
(``rlark_platform.identity.sign_caller``: for that service, method, target and body, once), plus
``X-Request-Id`` and ``X-Forwarded-*``. Every other
end-to-end header passes unchanged — ``Content-Type``, ``Accept``, ``Last-Event-ID`` (stream resumption) and
``Idempotency-Key`` (safe retries of ``POST /api/v1/jobs``) among them — and the service's status comes
back as it was (201 created, 200 an idempotent repeat, 409 a reused key). Paths and query
strings are forwarded unchanged (services serve the same ``/api/v1/...`` paths). Bodies are read whole
(the server's body limit bounds them); responses stream back, so ``?follow=true`` logs and event streams
pass through as they come, without a read timeout. An unreachable service gives 503 ``service_unavailable`` naming it.

A relayed response ends its upstream response and its bookkeeping (requests in flight, the caller's
``on_close``) however it ends — relayed to the end, the client gone before or during the body, cancelled.

Shutdown: ``close()`` ends open streams and waits (bounded) for requests in flight, then closes the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio
import httpx
import structlog
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller, SignedRequest, sign_caller
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

log = structlog.get_logger(__name__)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_DROP_REQUEST = HOP_BY_HOP | {"host", "content-length", "cookie", "forwarded"}
_DROP_RESPONSE = HOP_BY_HOP | {"set-cookie", "x-request-id", "server", "date"}
_TRUE = {"1", "true", "yes", "on"}


def forward_headers(raw: list[tuple[bytes, bytes]], *, keep_authorization: bool) -> list[tuple[str, str]]:
    """The client's headers worth forwarding: no hop-by-hop, no cookies, never any ``X-RLark-*``."""
    kept: list[tuple[str, str]] = []
    for key_bytes, value_bytes in raw:
        key = key_bytes.decode("latin-1").lower()
        if key in _DROP_REQUEST or key.startswith("x-rlark-") or key.startswith("x-forwarded-"):
            continue
        if key == "authorization" and not keep_authorization:
            continue
        kept.append((key, value_bytes.decode("latin-1")))
    return kept


def wants_stream(request: Request) -> bool:
    """Event streams and followed logs: no read timeout, relayed chunk by chunk."""
    return request.query_params.get(
        "follow", ""
    ).lower() in _TRUE or "text/event-stream" in request.headers.get("accept", "")


class _Relayed(StreamingResponse):
    """An upstream response relayed as it comes; ``finish`` runs once it is over, however it ended (also
    when the client left before the body began, when the body iterator never runs)."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        finish: Callable[[], Awaitable[None]],
        status_code: int,
        headers: Mapping[str, str],
    ) -> None:
        super().__init__(content, status_code=status_code, headers=headers)
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._finish()


class Proxy:
    def __init__(
        self,
        upstreams: dict[str, str],
        internal_secret: str,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        self.upstreams = upstreams
        self._secret = internal_secret
        self._connect = connect_timeout_s
        self._read = read_timeout_s
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64),
            trust_env=False,
        )
        self.closing = asyncio.Event()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _enter(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight <= 0:
            self._in_flight = 0
            self._idle.set()

    async def forward(
        self,
        request: Request,
        service: str,
        caller: Caller | None,
        request_id: str | None,
        client: str,
        *,
        on_close: Callable[[], None] | None = None,
    ) -> Response:
        """Forward ``request`` to ``service`` as ``caller`` (None: no user identity, the agent route);
        ``client`` is the client's address (``X-Forwarded-For``). ``on_close`` runs once when the returned
        response is over, however it ended; not at all when this raises."""
        if self.closing.is_set():
            raise ApiError(503, "service_unavailable", text("service_unavailable.shutting_down"), service)
        base = self.upstreams[service]
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        url = base + raw_path.decode("latin-1")
        if request.url.query:
            url += "?" + request.url.query
        headers = forward_headers(request.scope["headers"], keep_authorization=caller is None)
        if request_id:
            headers.append(("x-request-id", request_id))
        headers.append(("x-forwarded-for", client))
        headers.append(("x-forwarded-proto", request.url.scheme))
        # The body limit (rlark_platform.body_limit) bounds what this reads.
        body = await request.body() if request.method not in ("GET", "HEAD") else b""
        streaming = wants_stream(request)
        timeout = httpx.Timeout(None if streaming else self._read, connect=self._connect)
        upstream_request = self._client.build_request(
            request.method, url, headers=headers, content=body, timeout=timeout
        )
        if caller is not None:
            # Signed over exactly what goes on the wire: this service, method, target and body.
            target = upstream_request.url.raw_path.decode("ascii")
            signed = SignedRequest(service, request.method, target, body)
            upstream_request.headers.update(sign_caller(self._secret, caller, signed))
        self._enter()
        try:
            upstream = await self._client.send(upstream_request, stream=True)
        except httpx.TimeoutException as exc:
            self._leave()
            if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
                raise _unavailable(service) from None
            raise ApiError(
                504, "upstream_timeout", text("upstream_timeout", service=service), service
            ) from None
        except (httpx.TransportError, RuntimeError):
            # RuntimeError: the client was closed under us (shutdown).
            self._leave()
            raise _unavailable(service) from None
        response_headers = {
            k: v for k, v in upstream.headers.multi_items() if k.lower() not in _DROP_RESPONSE
        }
        if request.method != "GET" and not streaming:
            # Changes answer small bodies; read them whole so errors surface here and audits see them.
            try:
                content = b"".join([chunk async for chunk in upstream.aiter_raw()])
            except httpx.TransportError:
                raise _unavailable(service) from None
            finally:
                await upstream.aclose()
                self._leave()
            if on_close is not None:
                on_close()
            return Response(content=content, status_code=upstream.status_code, headers=response_headers)
        finished = False

        async def finish() -> None:
            nonlocal finished
            if finished:
                return
            finished = True
            try:
                await upstream.aclose()  # the client may have gone: closing the upstream must still happen
            finally:
                self._leave()
                if on_close is not None:
                    on_close()

        return _Relayed(
            self._relay(upstream, watch_closing=streaming, service=service),
            finish,
            status_code=upstream.status_code,
            headers=response_headers,
        )

    async def _relay(
        self, upstream: httpx.Response, *, watch_closing: bool, service: str
    ) -> AsyncIterator[bytes]:
        """The upstream body, chunk by chunk; ends early when the gateway closes (``watch_closing``).
        Closing the upstream is the response's ``finish``, not this iterator's: it may never run."""
        chunks = upstream.aiter_raw()
        closing = asyncio.ensure_future(self.closing.wait()) if watch_closing else None
        step: asyncio.Future[bytes | None] | None = None
        try:
            while True:
                if closing is None:
                    chunk = await anext(chunks, None)
                else:
                    step = asyncio.ensure_future(anext(chunks, None))
                    done, _ = await asyncio.wait({step, closing}, return_when=asyncio.FIRST_COMPLETED)
                    if step not in done:
                        step.cancel()
                        with contextlib.suppress(BaseException):
                            await step
                        return
                    chunk = step.result()
                if chunk is None:
                    return
                yield chunk
        except httpx.TransportError as exc:
            log.info("upstream stream ended early", service=service, error=type(exc).__name__)
        finally:
            for pending in (step, closing):
                if pending is not None and not pending.done():
                    pending.cancel()  # the client left while waiting: the read in flight goes with it

    async def close(self, drain_s: float = 10.0) -> None:
        """End event streams now, let other requests finish (up to ``drain_s``), close the client."""
        self.closing.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), drain_s)
        await self._client.aclose()


def _unavailable(service: str) -> ApiError:
    return ApiError(503, "service_unavailable", text("service_unavailable", service=service), service)
