"""What a download and a TensorBoard answer may carry, without sockets (ADR 0010): a file name the job chose
cannot break the answer's headers; TensorBoard cannot set cookies or other origin-wide headers on the
gateway's origin; a streamed answer gives back its stream place and relay however it ends — also when its
body never started (the server refused a header, the client went away first)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rlark_gateway.api.outputs import ReleasingResponse
from rlark_gateway.api.tools import answer_headers
from rlark_gateway.domain.outputs import download_headers
from starlette.types import Message

SCOPE: dict[str, Any] = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}}


def test_a_file_name_with_line_breaks_cannot_add_headers() -> None:
    _, headers = download_headers(
        {"kind": "file", "name": "a\r\nSet-Cookie: rlark_session=x\x00.txt", "size": 3}
    )
    disposition = headers["Content-Disposition"]
    assert not any(ch in disposition for ch in "\r\n\x00")
    assert disposition.startswith('attachment; filename="a__Set-Cookie: rlark_session=x_.txt"')
    assert "filename*=UTF-8''a%0D%0ASet-Cookie" in disposition


def test_tensorboard_cannot_set_cookies_or_origin_wide_headers() -> None:
    pairs = [
        (b"Content-Type", b"text/html; charset=utf-8"),
        (b"Content-Security-Policy", b"default-src 'self'"),
        (b"Set-Cookie", b"rlark_session=attacker; Path=/"),
        (b"Clear-Site-Data", b'"cookies"'),
        (b"Access-Control-Allow-Origin", b"*"),
        (b"Strict-Transport-Security", b"max-age=0"),
        (b"Connection", b"close"),
        (b"Content-Length", b"12"),
    ]
    assert answer_headers(pairs) == {
        "content-type": "text/html; charset=utf-8",
        "content-security-policy": "default-src 'self'",
    }


async def chunks(released: list[str]) -> AsyncIterator[bytes]:
    try:
        yield b"data"
    finally:
        released.append("body")


@pytest.mark.parametrize("fails", [False, True])
async def test_a_streamed_answer_is_released_once_however_it_ends(fails: bool) -> None:
    released: list[str] = []

    async def release() -> None:
        released.append("release")

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays: the answer ends on its own
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if fails and message["type"] == "http.response.start":
            raise RuntimeError("Invalid HTTP header value")  # what the HTTP server says before any byte

    response = ReleasingResponse(chunks(released), release)
    if fails:
        with pytest.raises(RuntimeError):
            await response(SCOPE, receive, send)
        assert released == ["release"]  # the body never started: only the response can release
    else:
        await response(SCOPE, receive, send)
        assert released.count("release") == 1
