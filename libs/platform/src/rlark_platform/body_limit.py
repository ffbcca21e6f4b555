"""A request body limit for every route of an ASGI app, enforced while the body streams in.

A declared ``Content-Length`` over the limit is answered 413 before a byte of the body is read; a body
without one (chunked) is counted as it arrives and answered 413 as soon as the count passes the limit. The
413 carries ``Connection: close`` so the server closes the connection instead of reading (and discarding)
the rest of what the client still sends. The app's read fails with ``BodyTooLarge``; whatever the app then
answers (its middleware may turn the exception into a 400 or a 500) is replaced by the 413. Nothing is
buffered here: the app reads as before.

When the app had already started answering when the limit was passed (it streamed a response while
reading), the rest of its answer is dropped and the connection ends.
"""

from __future__ import annotations

import json

from rlark_contracts.messages import text
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds {limit} bytes")
        self.limit = limit


def too_large_body(limit: int) -> bytes:
    said = text("payload_too_large", limit=limit)
    return json.dumps(
        {"error": {"code": "payload_too_large", "message": said.english, "field": None, **said.wire()}}
    ).encode()


class BodyLimit:
    """ASGI middleware: at most ``max_body_bytes`` of request body per request."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def _refuse(self, send: Send) -> None:
        body = too_large_body(self.max_body_bytes)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        for key, value in scope["headers"]:
            if key == b"content-length" and (not value.isdigit() or int(value) > limit):
                await self._refuse(send)
                return
        received = 0
        exceeded = late = started = False

        async def counted_receive() -> Message:
            nonlocal received, exceeded, late
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded, late = True, started
                    raise BodyTooLarge(limit)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                # Whatever the app answers to its failed read (middleware may have turned the exception
                # into a 400 or a 500) is replaced by the 413.
                if not started:
                    started = True
                    await self._refuse(send)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not exceeded or late:
                raise  # the server ends the connection
            if not started:
                await self._refuse(send)
