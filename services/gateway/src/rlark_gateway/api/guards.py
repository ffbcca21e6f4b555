"""The gateway's outermost request guard (pure ASGI, so event streams pass through untouched).

Before the app sees a change (POST/PUT/PATCH/DELETE): a foreign browser origin is refused 403
``cross_origin_refused`` and a body that is not JSON or YAML 415 ``unsupported_media_type``
(``domain.requests``) — the two things a cross-site page can do with a victim's cookie without a CORS
preflight. The tools origin (ADR 0012) is foreign to the main origin like any other (it is never among the
allowed origins, ``settings``); its own guard accepts forms. Every answer gets the security headers (CSP, frame and sniffing rules, referrer policy; HSTS
over HTTPS). The client address and scheme, as trusted proxies report them, are put in the scope's state
for the rest of the request (``deps.client_address``, ``deps.served_over_https``).
"""

from __future__ import annotations

import json

from fastapi import FastAPI
from fastapi.routing import APIRoute
from rlark_platform.openapi import error_responses
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlark_gateway.domain.access import CHANGE_METHODS
from rlark_gateway.domain.requests import (
    HSTS,
    SECURITY_HEADERS,
    Network,
    body_media_type_allowed,
    client_address,
    foreign_request,
    from_trusted_proxy,
)

CLIENT_KEY = "rlark.client"
HTTPS_KEY = "rlark.https"


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() != "0"
    return "transfer-encoding" in headers


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        trusted_proxies: list[Network],
        allowed_origins: list[str],
        *,
        forms: bool = False,
    ) -> None:
        self.app = app
        self.trusted = trusted_proxies
        self.allowed_origins = allowed_origins
        self.forms = forms
        """Any body type (the tools origin: a job's TensorBoard posts forms); the Origin rule still holds."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        peer = scope["client"][0] if scope.get("client") else None
        state = scope.setdefault("state", {})
        state[CLIENT_KEY] = client_address(peer, headers.getlist("x-forwarded-for"), self.trusted)
        https = scope.get("scheme") == "https"
        if from_trusted_proxy(peer, self.trusted):
            proto = headers.get("x-forwarded-proto", "").split(",")[-1].strip().lower()
            https = https or proto == "https"
        state[HTTPS_KEY] = https
        extra = [(name.encode(), value.encode()) for name, value in SECURITY_HEADERS]
        if https:
            extra.append((HSTS[0].encode(), HSTS[1].encode()))

        async def secured_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                added = [(name, value) for name, value in extra if name not in present]
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        if scope["method"] in CHANGE_METHODS:
            reason = foreign_request(
                headers.get("origin"),
                headers.get("sec-fetch-site"),
                headers.get("host"),
                self.allowed_origins,
            )
            if reason is not None:
                await _refuse(secured_send, 403, "cross_origin_refused", reason, "Origin")
                return
            if (
                _has_body(headers)
                and not self.forms
                and not body_media_type_allowed(headers.get("content-type"))
            ):
                await _refuse(
                    secured_send,
                    415,
                    "unsupported_media_type",
                    "request bodies must be JSON (application/json) or YAML (application/yaml)",
                    "Content-Type",
                )
                return
        await self.app(scope, receive, secured_send)


async def _refuse(send: Send, status: int, code: str, message: str, field: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message, "field": field}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),  # the body it may still send is not read
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


GUARD_ANSWERS = (403, 413, 415)
"""What the guard (and the body limit under it) may answer on a change before the route runs."""


def document_guard_answers(app: FastAPI) -> None:
    """List the guard's answers on every change route of ``app`` (its OpenAPI document stays complete)."""
    for route in app.routes:
        if isinstance(route, APIRoute) and route.methods and route.methods & CHANGE_METHODS:
            route.responses = {**error_responses(*GUARD_ANSWERS), **route.responses}
