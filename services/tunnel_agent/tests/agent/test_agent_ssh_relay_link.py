"""The agent's SSH relay on its own (ADR 0010): on an ``ssh`` order it connects the worker's sshd (a TCP echo
listener here) and dials the relay back without offering compression — SSH's bytes are encrypted, so
``permessage-deflate`` only cost CPU — and the bytes cross both ways unchanged until the gateway ends it.
A small WebSocket server that accepts compression stands in for the gateway. A download over the agent's
limit is refused with 413 whether the agent reads the outputs itself or asks a pod's files server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlark_devinfra.testing import free_port
from rlark_tunnel_agent.agent.files import answer
from rlark_tunnel_agent.agent.ssh_link import SshLink
from rlark_tunnel_agent.runtime.driver import OutputRoot
from websockets.asyncio.server import ServerConnection, serve


async def test_the_relay_dials_back_uncompressed_and_carries_bytes_both_ways_unchanged() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    sshd = await asyncio.start_server(echo, "127.0.0.1", 0)
    sshd_port = sshd.sockets[0].getsockname()[1]
    payload = os.urandom(3 * 1024 * 1024 + 7)
    result: asyncio.Future[tuple[str | None, list[object], bytes]] = (
        asyncio.get_running_loop().create_future()
    )

    async def gateway(ws: ServerConnection) -> None:
        assert ws.request is not None
        if ws.request.path == "/api/v1/agent/link":
            await ws.send(json.dumps({"op": "ssh", "relay": "r1", "secret": "s1", "job": "j", "worker": "w"}))
            await ws.wait_closed()
        elif ws.request.path == "/api/v1/agent/relay/r1":
            offered = ws.request.headers.get("Sec-WebSocket-Extensions")
            back = bytearray()

            async def send() -> None:
                for start in range(0, len(payload), 200_000):
                    await ws.send(payload[start : start + 200_000])

            sending = asyncio.create_task(send())
            async for message in ws:
                back.extend(message if isinstance(message, bytes) else message.encode())
                if len(back) >= len(payload):
                    break
            await sending
            await ws.close()
            result.set_result((offered, list(ws.protocol.extensions), bytes(back)))

    async def resolve(job_id: str, worker_id: str) -> tuple[str, int]:
        assert (job_id, worker_id) == ("j", "w")
        return "127.0.0.1", sshd_port

    port = free_port()
    stopping = asyncio.Event()
    async with serve(gateway, "127.0.0.1", port, max_size=None), sshd:
        link = SshLink(f"http://127.0.0.1:{port}", lambda: "agent-token", resolve)
        running = asyncio.create_task(link.run(stopping))
        try:
            offered, extensions, back = await asyncio.wait_for(result, 60)
        finally:
            stopping.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(running, 15)
    assert offered is None
    assert extensions == []
    assert back == payload


async def _files_head(link_of: Callable[[str], SshLink]) -> dict[str, Any]:
    """The head an agent's link sends back for a download order of ``/data/out/big.bin`` (``link_of`` builds
    the link for the stand-in gateway's URL)."""
    head: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def gateway(ws: ServerConnection) -> None:
        assert ws.request is not None
        if ws.request.path == "/api/v1/agent/link":
            order = {"op": "files", "relay": "f1", "secret": "s1", "job": "j", "worker": "w"}
            await ws.send(json.dumps({**order, "action": "download", "path": "/data/out/big.bin"}))
            await ws.wait_closed()
        elif ws.request.path == "/api/v1/agent/relay/f1":
            head.set_result(json.loads(await ws.recv()))
            await ws.close()

    port = free_port()
    stopping = asyncio.Event()
    async with serve(gateway, "127.0.0.1", port):
        running = asyncio.create_task(link_of(f"http://127.0.0.1:{port}").run(stopping))
        try:
            return await asyncio.wait_for(head, 60)
        finally:
            stopping.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(running, 15)


async def unused(job_id: str, worker_id: str) -> tuple[str, int]:
    raise LookupError("no ssh here")


async def test_a_download_over_the_agents_limit_is_refused_413_on_both_runtimes(tmp_path: Path) -> None:
    out = tmp_path / "w" / "out"
    out.mkdir(parents=True)
    (out / "big.bin").write_bytes(b"x" * 1001)

    async def outputs(job_id: str, worker_id: str) -> list[OutputRoot]:
        return [OutputRoot("/data/out", str(tmp_path / "w"), ("out",))]

    head = await _files_head(lambda url: SshLink(url, lambda: "t", unused, outputs, max_download_bytes=1000))
    assert (head["ok"], head["status"], head["code"]) == (False, 413, "download_too_large")
    assert head["params"]["limit"] == 1000

    sent: list[dict[str, Any]] = []

    async def pod_files(job_id: str, worker_id: str, order: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        sent.append(order)  # a pod's files server gets the agent's limit with the order
        return await answer(await outputs(job_id, worker_id), order, int(order["max_bytes"]))

    head = await _files_head(
        lambda url: SshLink(url, lambda: "t", unused, files=pod_files, max_download_bytes=1000)
    )
    assert (head["status"], head["code"]) == (413, "download_too_large")
    assert sent[0]["max_bytes"] == 1000
