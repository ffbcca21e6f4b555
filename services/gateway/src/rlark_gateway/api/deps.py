"""Request dependencies: who is calling (session cookie or API token), admin checks, audit notes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import structlog
from fastapi import Depends, Request
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.paging import PageNumber, PageSize

from rlark_gateway.api.guards import CLIENT_KEY, HTTPS_KEY
from rlark_gateway.handlers import Principal
from rlark_gateway.wiring import Gateway

SESSION_COOKIE = "rlark_session"


@dataclass
class AuditNote:
    """Filled during a request and written by the audit middleware after it: who did what to what."""

    actor: str | None = None
    role: str | None = None
    action: str | None = None
    target: str | None = None


def gateway(request: Request) -> Gateway:
    found: Gateway = request.app.state.gateway
    return found


def audit_note(request: Request) -> AuditNote:
    note = getattr(request.state, "audit", None)
    if not isinstance(note, AuditNote):
        note = AuditNote()
        request.state.audit = note
    return note


def client_address(request: Request) -> str:
    """The client's address as ``guards.RequestGuard`` found it (trusted proxies' ``X-Forwarded-For``)."""
    found = request.scope.get("state", {}).get(CLIENT_KEY)
    if isinstance(found, str):
        return found
    return request.client.host if request.client is not None else "unknown"


def served_over_https(request: Request) -> bool:
    """Whether the client reached us over HTTPS (directly, or through a trusted proxy that says so)."""
    return bool(request.scope.get("state", {}).get(HTTPS_KEY, request.url.scheme == "https"))


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise ApiError(401, "unauthenticated", "the Authorization header must be 'Bearer <api token>'")
    return value.strip()


async def authenticate(request: Request) -> Principal:
    principal = await gateway(request).accounts.authenticate(
        bearer_token(request), request.cookies.get(SESSION_COOKIE)
    )
    note = audit_note(request)
    note.actor, note.role = principal.username, principal.role.value
    structlog.contextvars.bind_contextvars(user=principal.username)
    return principal


def take_stream(gw: Gateway, user: str) -> None:
    """One of ``user``'s places for long-lived streams (event streams, followed logs), or 429
    ``too_many_streams``; every place taken is given back with ``gw.streams.give_back(user)``."""
    if not gw.streams.take(user):
        raise ApiError(
            429,
            "too_many_streams",
            text("too_many_streams", limit=gw.streams.limit),
        )


async def require_admin(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
    if not principal.is_admin:
        raise ApiError(403, "forbidden", text("forbidden"))
    return principal


PrincipalDep = Annotated[Principal, Depends(authenticate)]
AdminDep = Annotated[Principal, Depends(require_admin)]
GatewayDep = Annotated[Gateway, Depends(gateway)]
PageDep = PageNumber
PageSizeDep = PageSize
