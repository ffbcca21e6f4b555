"""The WebSockets of a service's HTTP server (``server_config``; the gateway's SSH relays, ADR 0010) on a real
uvicorn on loopback: no compression is negotiated whatever the client offers (relayed bytes are encrypted:
deflating them only burnt the gateway's CPU), and frames keep their 1 MiB bound."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI, WebSocket
from rlark_devinfra.testing import free_port, uvicorn_serving
from rlark_platform.http_server import WS_MAX_FRAME_BYTES, server_config
from rlark_platform.settings import ServiceSettings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


def echo_app() -> FastAPI:
    app = FastAPI()

    @app.websocket("/echo")
    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            await ws.send_bytes(message.get("bytes") or b"")

    return app


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    port = free_port()
    async with uvicorn_serving(server_config(echo_app(), ServiceSettings(http_port=port))):
        yield f"ws://127.0.0.1:{port}/echo"


async def test_a_client_offering_permessage_deflate_gets_plain_frames(echo_url: str) -> None:
    payload = os.urandom(256 * 1024)
    async with connect(echo_url, compression="deflate") as ws:
        assert "permessage-deflate" in (ws.request.headers.get("Sec-WebSocket-Extensions") or "")
        assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
        assert ws.protocol.extensions == []
        await ws.send(payload)
        assert await ws.recv() == payload


async def test_frames_up_to_the_limit_pass_and_a_larger_one_closes_the_socket(echo_url: str) -> None:
    async with connect(echo_url, compression=None, max_size=None) as ws:
        full = os.urandom(WS_MAX_FRAME_BYTES)
        await ws.send(full)
        assert await ws.recv() == full
        await ws.send(full + b"!")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
