"""The reverse proxy to the services behind the gateway (one shared ``aiohttp.ClientSession``).

Per request: the client's ``X-RLark-*`` headers, cookies and (except for agents) ``Authorization`` are
dropped; the gateway adds the caller it authenticated, signed with the internal secret
(``rlark_platform.identity.sign_caller``: for that service, method, target and body, once), plus
``X-Request-Id`` and ``X-Forwarded-*``. Every other
end-to-end header passes unchanged — ``Content-Type``, ``Accept``, ``Last-Event-ID`` (stream resumption) and
``Idempotency-Key`` (safe retries of ``POST /api/v1/jobs``) among them — and the service's status comes
back as it was (201 created, 200 an idempotent repeat, 409 a reused key). Paths and query
strings are forwarded unchanged (services serve the same ``/api/v1/...`` paths). Bodies are read whole
(the server's body limit bounds them). Answers to changes, and GET answers of a declared length up to
``WHOLE_BODY_BYTES``, are read whole and answered as one response; others stream back, so ``?follow=true``
logs and event streams pass through as they come, without a read timeout. An unreachable service gives 503 ``service_unavailable`` naming it.

A relayed response ends its upstream response and its bookkeeping (requests in flight, the caller's
``on_close``) however it ends — relayed to the end, the client gone before or during the body, cancelled.

Idle connections to a service are reused for ``idle_s`` only (``upstream_idle_s``), less than the services'
own keep-alive (``http_keep_alive_s``): otherwise a request can go out on a connection its service is closing
at that moment, and fail with 503 though the service is up.

Shutdown: ``close()`` ends open streams and waits (bounded) for requests in flight, then closes the client.

Why aiohttp's client and not httpx here: httpx's connection pool walks every pooled connection (asking each
socket for its peer and readability) on every request, a third of the gateway's CPU at 50 concurrent
clients; aiohttp's connector hands out an idle keep-alive connection in constant time. The session keeps
no cookies (``DummyCookieJar``: one user's ``Set-Cookie`` must never reach another's request), adds no
headers of its own and relays bodies as they came (no decompression).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from urllib.parse import quote

import aiohttp
import anyio
import structlog
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller, SignedRequest, sign_caller
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from yarl import URL

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
WHOLE_BODY_BYTES = 1 << 20
"""GET answers up to this size (declared by ``Content-Length``) are read whole; larger or unsized ones stream."""
# aiohttp's own request headers, never added: the client's (or none) go upstream as they came.
_NO_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
# Printable ASCII but space: what a request target may hold as it is; any other byte is percent-encoded.
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))


def upstream_target(raw_path: bytes, query_string: bytes) -> str:
    """The request target sent upstream (and signed): the client's raw path and query, with any byte outside
    printable ASCII percent-encoded (the escapes the client sent stay as they were)."""
    target = raw_path + (b"?" + query_string if query_string else b"")
    return quote(target, safe=_TARGET_SAFE)


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
        idle_s: float = 2.0,
    ) -> None:
        self.upstreams = upstreams
        self._secret = internal_secret
        self._connect = connect_timeout_s
        self._read = read_timeout_s
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self._stream_timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
        self._client = aiohttp.ClientSession(
            # Below the services' keep-alive: a service closes an idle connection after its
            # http_keep_alive_s, and a request sent on it at that moment is lost (a CI run's 503).
            connector=aiohttp.TCPConnector(limit=512, limit_per_host=0, keepalive_timeout=idle_s),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=_NO_AUTO_HEADERS,
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
        url = URL(base + upstream_target(raw_path, request.scope.get("query_string", b"")), encoded=True)
        headers = forward_headers(request.scope["headers"], keep_authorization=caller is None)
        if request_id:
            headers.append(("x-request-id", request_id))
        headers.append(("x-forwarded-for", client))
        headers.append(("x-forwarded-proto", request.url.scheme))
        # The body limit (rlark_platform.body_limit) bounds what this reads.
        body = await request.body() if request.method not in ("GET", "HEAD") else b""
        streaming = wants_stream(request)
        if caller is not None:
            # Signed over exactly what goes on the wire: this service, method, target and body.
            signed = SignedRequest(service, request.method, url.raw_path_qs, body)
            headers.extend(sign_caller(self._secret, caller, signed).items())
        self._enter()
        try:
            upstream = await self._client.request(
                request.method,
                url,
                headers=headers,
                data=body if request.method not in ("GET", "HEAD") else None,
                allow_redirects=False,
                timeout=self._stream_timeout if streaming else self._timeout,
            )
        except aiohttp.ConnectionTimeoutError:
            self._leave()
            raise _unavailable(service) from None
        except (aiohttp.ServerTimeoutError, TimeoutError):
            self._leave()
            raise ApiError(
                504, "upstream_timeout", text("upstream_timeout", service=service), service
            ) from None
        except (aiohttp.ClientError, RuntimeError):
            # RuntimeError: the session was closed under us (shutdown).
            self._leave()
            raise _unavailable(service) from None
        response_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE}
        if not streaming and (request.method != "GET" or _small(upstream)):
            # Changes answer small bodies; read them whole so errors surface here and audits see them. Small
            # reads too: one plain response costs the gateway less than relaying (a task watching the client).
            try:
                content = await upstream.read()
            except (aiohttp.ClientError, TimeoutError):
                raise _unavailable(service) from None
            finally:
                upstream.release()
                self._leave()
            if on_close is not None:
                on_close()
            return Response(content=content, status_code=upstream.status, headers=response_headers)
        finished = False

        async def finish() -> None:
            nonlocal finished
            if finished:
                return
            finished = True
            try:
                # The client may have gone: a body not read to its end closes the connection, else it is reused.
                if upstream.content.at_eof():
                    upstream.release()
                else:
                    upstream.close()
            finally:
                self._leave()
                if on_close is not None:
                    on_close()

        return _Relayed(
            self._relay(upstream, watch_closing=streaming, service=service),
            finish,
            status_code=upstream.status,
            headers=response_headers,
        )

    async def _relay(
        self, upstream: aiohttp.ClientResponse, *, watch_closing: bool, service: str
    ) -> AsyncIterator[bytes]:
        """The upstream body, chunk by chunk; ends early when the gateway closes (``watch_closing``).
        Closing the upstream is the response's ``finish``, not this iterator's: it may never run."""
        chunks = upstream.content.iter_any()
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
        except (aiohttp.ClientError, TimeoutError) as exc:
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
        await self._client.close()


def _small(upstream: aiohttp.ClientResponse) -> bool:
    """A body of a declared length up to ``WHOLE_BODY_BYTES``: read whole rather than relayed."""
    length = upstream.content_length
    return length is not None and length <= WHOLE_BODY_BYTES


def _unavailable(service: str) -> ApiError:
    return ApiError(503, "service_unavailable", text("service_unavailable", service=service), service)
