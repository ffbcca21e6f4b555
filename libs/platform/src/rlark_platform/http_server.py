"""The HTTP server every service API runs on: uvicorn's h11 protocol with a deadline for request heads,
behind a request body limit on every route (``body_limit.BodyLimit``, ``max_body_bytes``).

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but gives a client that sends a request
head one byte at a time all the time it wants, and every byte restarts its idle timer: a few hundred such
"slowloris" connections hold a server's sockets forever. ``HeadDeadlineProtocol`` gives each request head
``header_timeout_s`` in total, counted from the connection's start or the previous response's end, however
the bytes trickle in; past it the connection is closed. The head's size is bounded by h11
(``h11_max_incomplete_event_size``), the number of connections and requests by ``limit_concurrency``
(uvicorn answers 503 beyond it). A WebSocket upgrade (the gateway's SSH relays) ends the deadline: the
connection is the WebSocket protocol's from then on, with frames of at most ``WS_MAX_FRAME_BYTES`` and
no compression (``permessage-deflate`` is refused: what the relays carry is encrypted).

Concurrency model: uvicorn calls the protocol's methods on the event loop thread, one at a time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from rlark_platform.body_limit import BodyLimit
from rlark_platform.settings import ServiceSettings

WS_MAX_FRAME_BYTES = 1 << 20


class HeadDeadlineProtocol(H11Protocol):
    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline: asyncio.TimerHandle | None = None
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

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a request head was parsed: the app has it now
            self._disarm_head_deadline()

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()
        if self.cycle is cycle and not self.transport.is_closing():
            self._arm_head_deadline()  # waiting for the next request's head
        elif self.cycle is not cycle:
            self._disarm_head_deadline()  # a pipelined request was already waiting

    def handle_websocket_upgrade(self, event: Any) -> None:
        # The connection now belongs to the WebSocket protocol: the deadline would close its transport.
        self._disarm_head_deadline()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)


def server_config(app: Any, settings: ServiceSettings, port: int | None = None) -> uvicorn.Config:
    """uvicorn's configuration for a service API, with the limits from ``settings``, on ``port`` (default
    ``settings.http_port``; the gateway's tools origin is a second listener with the same limits)."""

    class Protocol(HeadDeadlineProtocol):
        header_timeout_s = settings.http_header_timeout_s

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
        h11_max_incomplete_event_size=settings.http_max_head_bytes,
        limit_concurrency=settings.http_max_connections,
        # WebSockets (the gateway's SSH relays): frames up to 1 MiB, at most 8 queued per connection.
        ws_max_size=WS_MAX_FRAME_BYTES,
        ws_max_queue=8,
        # Never permessage-deflate: relayed bytes are SSH's, encrypted, so they do not shrink, and deflating
        # them cost the gateway 37 CPU-seconds per GiB (an agent's client offers it by default; ADR 0010).
        ws_per_message_deflate=False,
    )


__all__ = ["WS_MAX_FRAME_BYTES", "HeadDeadlineProtocol", "server_config"]
