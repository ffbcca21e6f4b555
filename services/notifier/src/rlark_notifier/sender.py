"""The HTTP adapter: sends one rendered request to a webhook, after checking where its host resolves.

The URL was checked when it was registered (``domain.urls``); here each resolved address is checked again,
so a host name that later resolves to a link-local or (unless allowed) private address is refused before
any byte is sent. Redirects are never followed (a redirect to the metadata service would bypass it).
Errors name no URL: DingTalk, Slack and Feishu URLs carry their tokens.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from rlark_notifier.domain import OutgoingRequest, UrlPolicy, address_allowed, literal_address, truncate

MAX_ANSWER_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Sent:
    """What came back: a status code and the answer's first bytes, or an error with no answer."""

    status_code: int | None
    body: str
    error: str
    duration_ms: int


class HttpSender:
    def __init__(self, policy: UrlPolicy, timeout_s: float) -> None:
        self._policy = policy
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s), follow_redirects=False, trust_env=False
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _refused_address(self, url: str) -> str | None:
        parts = urlsplit(url)
        host = parts.hostname or ""
        literal = literal_address(host)
        if literal is not None:  # nothing to resolve: judged as registration judged it
            why = address_allowed(literal, self._policy)
            return f"{host} is a refused address: {why}" if why else None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM
            )
        except OSError as exc:
            return f"cannot resolve {host}: {exc.strerror or type(exc).__name__}"
        for info in infos:
            why = address_allowed(ipaddress.ip_address(info[4][0]), self._policy)
            if why:
                return f"{host} resolves to a refused address: {why}"
        return None

    async def send(self, request: OutgoingRequest) -> Sent:
        started = time.monotonic()

        def elapsed() -> int:
            return int((time.monotonic() - started) * 1000)

        refused = await self._refused_address(request.url)
        if refused:
            return Sent(None, "", truncate(refused), elapsed())
        try:
            async with self._client.stream(
                "POST", request.url, content=request.body, headers=request.headers
            ) as response:
                answer = b""
                async for chunk in response.aiter_bytes():
                    answer += chunk
                    if len(answer) >= MAX_ANSWER_BYTES:
                        break
                text = answer[:MAX_ANSWER_BYTES].decode("utf-8", "replace")
                return Sent(response.status_code, text, "", elapsed())
        except httpx.HTTPError as exc:
            said = str(exc).replace(request.url, "<url>") or type(exc).__name__
            return Sent(None, "", truncate(f"{type(exc).__name__}: {said}"), elapsed())
