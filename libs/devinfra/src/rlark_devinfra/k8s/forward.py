"""``python -m rlark_devinfra.k8s.forward LISTEN_HOST:PORT TARGET_HOST:PORT``: a plain TCP forwarder.

The deployment test bed's stand-in for a lab's load balancer or ingress (ADR 0027): it listens on this
machine's address, outside every cluster, and opens a connection to the target (a Service's address, which
the cluster's `netsvc` routes) per client connection, copying bytes both ways until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.close()


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    server = await asyncio.start_server(handle, *listen)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    asyncio.run(serve(_address(sys.argv[1]), _address(sys.argv[2])))


if __name__ == "__main__":
    main()
