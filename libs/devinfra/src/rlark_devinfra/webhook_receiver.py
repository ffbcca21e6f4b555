"""A real HTTP webhook receiver for tests and the notifier bench: uvicorn serving a small ASGI app in the
caller's event loop, on 127.0.0.1 and a free port.

It keeps every request it got (path, headers, raw body, arrival time) and answers each path with the
statuses scripted for it (``fail(path, 500, times=2)``: the first two requests get 500), 200 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from rlark_devinfra.testing import free_port


@dataclass(frozen=True)
class Received:
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: float
    """``time.time()`` when the body was read."""


@dataclass
class WebhookReceiver:
    port: int = 0
    requests: list[Received] = field(default_factory=list)
    _script: dict[str, list[int]] = field(default_factory=dict)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    on_request: Callable[[Received], None] | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def fail(self, path: str, status: int, *, times: int) -> None:
        """Answer the next ``times`` requests to ``path`` with ``status``."""
        self._script.setdefault(path, []).extend([status] * times)

    def to(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def wait_for(
        self, check: Callable[[], bool], timeout_s: float = 30.0, what: str = "requests"
    ) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not check():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise AssertionError(f"{what} not received after {timeout_s}s (got {len(self.requests)})")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), min(remaining, 0.5))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        script = self._script.get(path)
        status = script.pop(0) if script else 200
        received = Received(
            path=path,
            query=scope.get("query_string", b"").decode(),
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            body=body,
            status=status,
            at=time.time(),
        )
        self.requests.append(received)
        if self.on_request is not None:
            self.on_request(received)
        self._arrived.set()
        answer = b'{"ok":true}' if status < 300 else b'{"error":"scripted failure"}'
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer})


@contextlib.asynccontextmanager
async def webhook_receiver() -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver(port=free_port())
    config = uvicorn.Config(
        receiver, host="127.0.0.1", port=receiver.port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield receiver
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
