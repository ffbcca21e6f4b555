"""Request heads on a service's HTTP server (``server_config``: uvicorn's httptools protocol with
``HeadLimitProtocol``) on a real uvicorn on loopback: a head past ``http_max_head_bytes`` is refused with 400
and the connection closed, however it is cut into packets; one within it is served; a head that trickles in
is closed at its deadline; a kept-alive connection gets a fresh deadline and bound for each request."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from rlark_devinfra.testing import free_port, uvicorn_serving
from rlark_platform.http_server import HEAD_TOO_LARGE, server_config
from rlark_platform.settings import ServiceSettings

MAX_HEAD = 8 * 1024
DEADLINE_S = 0.5


def hello_app() -> FastAPI:
    app = FastAPI()

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    return app


@pytest.fixture
async def port() -> AsyncIterator[int]:
    chosen = free_port()
    settings = ServiceSettings(
        http_port=chosen, http_max_head_bytes=MAX_HEAD, http_header_timeout_s=DEADLINE_S
    )
    async with uvicorn_serving(server_config(hello_app(), settings)):
        yield chosen


async def exchange(port: int, parts: list[bytes]) -> bytes:
    """Send ``parts`` one write each (stopping once the server has answered or closed: writing on would
    reset the connection and lose the answer), then read until the server closes (or 5 s pass)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                received += await asyncio.wait_for(reader.read(65536), 0.02)
            if received or reader.at_eof():
                break
        return bytes(received) + await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def request(extra_header_bytes: int, *, close: bool = True) -> bytes:
    filler = b"x-filler: " + b"a" * extra_header_bytes + b"\r\n" if extra_header_bytes else b""
    connection = b"connection: close\r\n" if close else b""
    return b"GET /hello HTTP/1.1\r\nhost: test\r\n" + filler + connection + b"\r\n"


async def test_a_head_within_the_bound_is_served(port: int) -> None:
    answer = await exchange(port, [request(MAX_HEAD - 200)])
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b'{"hello":"world"}')


@pytest.mark.parametrize("packets", [1, 10])
async def test_a_head_past_the_bound_is_refused_400_and_closed(port: int, packets: int) -> None:
    head = request(MAX_HEAD + 100)
    size = -(-len(head) // packets)
    answer = await exchange(port, [head[i : i + size] for i in range(0, len(head), size)])
    assert answer.startswith(b"HTTP/1.1 400")
    assert answer.endswith(HEAD_TOO_LARGE.encode())
    assert b"connection: close" in answer.lower()


async def test_a_header_line_without_end_is_bounded_too(port: int) -> None:
    """No CRLF ever comes: the parser still hands over the value so far, and the bound applies to it."""
    answer = await exchange(port, [b"GET /hello HTTP/1.1\r\nx-endless: ", *[b"b" * 1024] * 12])
    assert answer.startswith(b"HTTP/1.1 400")
    assert answer.endswith(HEAD_TOO_LARGE.encode())


async def test_each_request_on_a_kept_alive_connection_has_a_bound_of_its_own(port: int) -> None:
    """Three heads of two thirds of the bound each, on one connection: none is refused (the count restarts)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for last in (False, False, True):
            writer.write(request(MAX_HEAD * 2 // 3, close=last))
            answer = await asyncio.wait_for(reader.readuntil(b'{"hello":"world"}'), 5)
            assert answer.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()


async def test_a_trickling_head_is_closed_at_its_deadline(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /hello HTTP/1.1\r\n")
        for _ in range(100):  # one header byte at a time, well inside any idle timer, past the deadline
            if reader.at_eof():
                break
            writer.write(b"x")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(), 0.05)
        assert reader.at_eof(), "the server kept a head open past its deadline"
    finally:
        writer.close()


async def test_the_deadline_starts_again_after_each_response(port: int) -> None:
    """A kept-alive connection whose second head arrives whole, after longer than one deadline since the
    connection began but within one of the first response, is served."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await asyncio.sleep(DEADLINE_S * 0.6)
        writer.write(request(0, close=False))
        first = await asyncio.wait_for(reader.readuntil(b'{"hello":"world"}'), 5)
        assert first.startswith(b"HTTP/1.1 200")
        await asyncio.sleep(DEADLINE_S * 0.6)
        writer.write(request(0))
        second = await asyncio.wait_for(reader.read(), 5)
        assert second.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
