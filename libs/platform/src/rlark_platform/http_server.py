"""The HTTP server every service API runs on: uvicorn's httptools protocol (llhttp) with a deadline and a
size bound for request heads, behind a request body limit on every route (``body_limit.BodyLimit``,
``max_body_bytes``).

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but gives a client that sends a request
head one byte at a time all the time it wants, and every byte restarts its idle timer: a few hundred such
"slowloris" connections hold a server's sockets forever. ``HeadLimitProtocol`` gives each request head
``header_timeout_s`` in total, counted from the connection's start or the previous response's end, however
the bytes trickle in; past it the connection is closed. uvicorn's httptools protocol bounds no head size
(h11's did, at a third of the speed): here the request line and headers together may hold ``max_head_bytes``,
beyond which the client gets 400 and the connection is closed. The number of connections and requests is
bounded by ``limit_concurrency`` (uvicorn answers 503 beyond it). A WebSocket upgrade (the gateway's SSH
relays) ends the deadline: the connection is the WebSocket protocol's from then on, with frames of at most
``WS_MAX_FRAME_BYTES`` and no compression (``permessage-deflate`` is refused: what the relays carry is
encrypted).

Why httptools and not h11: h11 parses in pure Python; at 50 clients it was the largest single cost of the
gateway after the application itself (issue 18 item 6, docs/benchmarks.md).

Concurrency model: uvicorn calls the protocol's methods on the event loop thread, one at a time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rlark_platform.body_limit import BodyLimit
from rlark_platform.settings import ServiceSettings

WS_MAX_FRAME_BYTES = 1 << 20
HEAD_TOO_LARGE = "Request head too large."


class HeadTooLarge(httptools.HttpParserError):
    """Raised from a parser callback: the request line and headers passed ``max_head_bytes``."""


class HeadLimitProtocol(HttpToolsProtocol):
    header_timeout_s: float = 10.0
    max_head_bytes: int = 16 * 1024

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._head_too_large = False
        self._waiting_head = True
        self._unparsed_head_bytes = 0
        self._arm_head_deadline()

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.header_timeout_s, self._head_too_slow)

    def _disarm_head_deadline(self) -> None:
        deadline = getattr(self, "_head_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            self.logger.info("request head not complete in time; connection closed")
            self.transport.close()

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes:
            self._head_too_large = True
            raise HeadTooLarge(HEAD_TOO_LARGE)

    def data_received(self, data: bytes) -> None:
        # httptools keeps a header's pieces until its line ends, so the callbacks alone bound no line that
        # never ends: bytes received while a head is awaited are counted too.
        if self._waiting_head:
            self._unparsed_head_bytes += len(data)
        super().data_received(data)
        if (
            self._waiting_head
            and self._unparsed_head_bytes > self.max_head_bytes
            and not self.transport.is_closing()
        ):
            self._head_too_large = True
            self.send_400_response(HEAD_TOO_LARGE)

    def on_message_begin(self) -> None:
        self._head_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_head_deadline()  # the app has the request now
        self._waiting_head = False
        self._unparsed_head_bytes = 0
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        self._disarm_head_deadline()
        super().send_400_response(HEAD_TOO_LARGE if self._head_too_large else msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            self._disarm_head_deadline()
        elif self.cycle is None or self.cycle.response_complete:
            self._waiting_head = True
            self._arm_head_deadline()  # waiting for the next request's head (a pipelined one re-arms nothing)

    def handle_websocket_upgrade(self) -> None:
        # The connection now belongs to the WebSocket protocol: the deadline would close its transport.
        self._disarm_head_deadline()
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)


def server_config(app: Any, settings: ServiceSettings, port: int | None = None) -> uvicorn.Config:
    """uvicorn's configuration for a service API, with the limits from ``settings``, on ``port`` (default
    ``settings.http_port``; the gateway's tools origin is a second listener with the same limits)."""

    class Protocol(HeadLimitProtocol):
        header_timeout_s = settings.http_header_timeout_s
        max_head_bytes = settings.http_max_head_bytes

    return uvicorn.Config(
        BodyLimit(app, settings.max_body_bytes),
        host=settings.http_host,
        port=settings.http_port if port is None else port,
        http=Protocol,
        log_config=None,
        access_log=False,
        lifespan="off",
        # uvicorn would believe X-Forwarded-For/-Proto from 127.0.0.1; the gateway decides whom to
        # believe itself (RLARK_TRUSTED_PROXIES), the services never need it.
        proxy_headers=False,
        timeout_keep_alive=settings.http_keep_alive_s,
        limit_concurrency=settings.http_max_connections,
        # WebSockets (the gateway's SSH relays): frames up to 1 MiB, at most 8 queued per connection.
        ws_max_size=WS_MAX_FRAME_BYTES,
        ws_max_queue=8,
        # Never permessage-deflate: relayed bytes are SSH's, encrypted, so they do not shrink, and deflating
        # them cost the gateway 37 CPU-seconds per GiB (an agent's client offers it by default; ADR 0010).
        ws_per_message_deflate=False,
    )


__all__ = ["HEAD_TOO_LARGE", "WS_MAX_FRAME_BYTES", "HeadLimitProtocol", "HeadTooLarge", "server_config"]
