"""A TCP round-robin in front of a service's replicas, as a Kubernetes Service is, for replica tests.

Each new connection goes to the next backend that accepts it (a killed replica refuses, so it is skipped;
a stopped one accepts and hangs, as it would behind a real Service); a connection once made stays with its
backend until either side closes it. Backends are ports on 127.0.0.1, added and removed as replicas come
and go (a rolling update adds the new one before it retires the old). Runs in the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter


class Balancer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.backends: list[int] = []
        self.connections: Counter[int] = Counter()
        """Connections made per backend port, over the balancer's life."""
        self._turn = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._forward(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for _ in range(len(self.backends)):
            port = self.backends[self._turn % len(self.backends)]
            self._turn += 1
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection("127.0.0.1", port)
                self.connections[port] += 1
                break
        try:
            if upstream is not None:
                await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))
        finally:
            for side in (writer, *([upstream[1]] if upstream else [])):
                side.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until end of file (then pass the end on); when either side breaks, close the sink, which ends
    the other direction's copy too."""
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.close()
