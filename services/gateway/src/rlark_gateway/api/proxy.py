"""Routes forwarded to the services: ``/api/v1/{clusters,nodes,labels,agent}`` → inventory, ``keys`` →
keys, ``domains`` → netdomain, ``{jobs,templates,projects}`` → scheduler, ``notifications`` → notifier
(``domain.access.PROXY_ROUTES``).

Each request is authenticated and authorised here (role rules in ``domain.access``) before it is forwarded
with the signed caller; ``POST /api/v1/agent/session`` and ``POST /api/v1/agent/lease`` are forwarded
without a user identity because inventory checks the agent's own credential (its session token, for the
lease). A streaming request (``?follow=true``, ``Accept: text/event-stream``) takes one of the caller's stream places (``RLARK_EVENTS_MAX_STREAMS_PER_USER``, shared
with ``GET /api/v1/events``) until its response is over. The services' own OpenAPI documents describe the bodies.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request, Response
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.openapi import error_responses
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from rlark_gateway.api.deps import audit_note, authenticate, client_address, gateway, take_stream
from rlark_gateway.domain.access import (
    API_PREFIX,
    PROXY_METHODS,
    PROXY_ROUTES,
    Access,
    ProxyRoute,
    audit_action,
    denial,
    has_dot_segments,
    required_access,
)
from rlark_gateway.proxy import wants_stream


def _not_found(path: str) -> ApiError:
    return ApiError(404, "not_found", text("not_found.route", path=path))


def _created_target(response: Response, resource: str) -> str | None:
    """``<resource>/<id or name>`` from a JSON creation answer, for the audit log."""
    if not 200 <= response.status_code < 300:
        return None
    if not response.headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        body = json.loads(bytes(response.body))
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(body, dict):
        for key in ("id", "name"):
            value = body.get(key)
            if isinstance(value, str | int) and str(value):
                return f"{resource}/{value}"
    return None


Handler = Callable[[Request, str], Awaitable[Response]]


def _handler(route: ProxyRoute) -> Handler:
    async def forward(request: Request, rest: str) -> Response:
        if (rest and rest[0] not in "/:") or has_dot_segments(request.url.path):
            raise _not_found(request.url.path)
        gw = gateway(request)
        method, path = request.method, request.url.path
        note = audit_note(request)
        note.action, note.target = audit_action(method, path)
        if required_access(method, path) is Access.PUBLIC:
            caller = None
            note.actor = "agent"
        else:
            principal = await authenticate(request)
            refused = denial(principal.caller, method, path, request.query_params.multi_items())
            if refused is not None:
                raise ApiError(403, refused.code, refused.message, refused.field)
            caller = principal.caller
        request_id = structlog.contextvars.get_contextvars().get("request_id")
        release = None
        if caller is not None and wants_stream(request):
            # Followed logs and job events are long-lived like GET /api/v1/events: the same per-user cap.
            take_stream(gw, caller.user)
            release = partial(gw.streams.give_back, caller.user)
        try:
            response = await gw.proxy.forward(
                request, route.service, caller, request_id, client_address(request), on_close=release
            )
        except BaseException:
            if release is not None:
                release()  # forward raised: its response, which would have given the place back, never came
            raise
        if method == "POST" and note.target == route.resource:
            note.target = _created_target(response, route.resource) or note.target
        return response

    return forward


PROXIED_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {"description": "Created (the service's answer)"},
    202: {"description": "Accepted (the service's answer)"},
    204: {"description": "Done, no content (the service's answer)"},
    **error_responses(401, 403, 404, 409, 413, 422, 503, 504),
}
"""Every status a forwarded request can answer: the services' (see their documents) and the gateway's own
(401, 403 before forwarding; 404 for a path no service serves; 503, 504 when the service is away)."""


class ForwardedPrefixes(BaseRoute):
    """The forwarded resources matched by one dict lookup, ahead of every other route, and forwarded without
    FastAPI's endpoint machinery: walking the gateway's own routes to reach the documented proxy routes, then
    solving the handler's parameters, were a fifth of the gateway's CPU per forwarded call (issue 18 item 6).

    A request the gateway answers itself under a forwarded resource (a key's ``DELETE``, a job's outputs and
    tools) is left to its route: when one of ``own[resource]`` matches it fully, this answers ``NONE`` and the
    router goes on in order. So does any path whose resource is not forwarded (``/api/v1/nodesX`` reaches the
    documented routes, which answer 404 as before)."""

    def __init__(self, handlers: Mapping[str, Handler], own: Mapping[str, Sequence[BaseRoute]]) -> None:
        self._handlers = handlers
        self._own = own

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["method"] not in PROXY_METHODS:
            return Match.NONE, {}
        path: str = scope["path"]
        if not path.startswith(_RESOURCES):
            return Match.NONE, {}
        tail = path[len(_RESOURCES) :]
        cut = next((i for i, c in enumerate(tail) if c in "/:"), len(tail))
        handler = self._handlers.get(tail[:cut])
        if handler is None:
            return Match.NONE, {}
        for route in self._own.get(tail[:cut], ()):
            if route.matches(scope)[0] is Match.FULL:
                return Match.NONE, {}
        return Match.FULL, {"endpoint": handler, "path_params": {"rest": tail[cut:]}}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await scope["endpoint"](Request(scope, receive, send), scope["path_params"]["rest"])
        await response(scope, receive, send)


_RESOURCES = API_PREFIX + "/"


def _resource_of(path: str) -> str:
    """``keys`` for ``/api/v1/keys/{key_id}``; "" for a path outside ``/api/v1/``."""
    if not path.startswith(_RESOURCES):
        return ""
    tail = path[len(_RESOURCES) :]
    return tail[: next((i for i, c in enumerate(tail) if c in "/:{"), len(tail))]


def add_proxy_routes(app: FastAPI, own: Sequence[APIRouter]) -> None:
    """One documented route per resource and method, and ``ForwardedPrefixes`` ahead of every route doing the
    work; ``own`` are the gateway's routers included before this (their routes under a forwarded resource
    keep precedence)."""
    handlers: dict[str, Handler] = {}
    for route in PROXY_ROUTES:
        router = APIRouter(tags=[route.resource])
        handler = handlers[route.resource] = _handler(route)
        for method in PROXY_METHODS:
            router.add_api_route(
                f"{API_PREFIX}/{route.resource}{{rest:path}}",
                handler,
                methods=[method],
                name=f"{route.resource}_{method.lower()}",
                summary=f"{method} /api/v1/{route.resource}… → {route.service}",
                description=f"{route.summary}. Forwarded to the {route.service} service; see docs/api.md.",
                operation_id=f"proxy_{route.resource}_{method.lower()}",
                response_class=Response,
                responses=PROXIED_RESPONSES,
            )
        app.include_router(router)
    shadowed: dict[str, list[BaseRoute]] = {}
    for router in own:
        for own_route in router.routes:
            resource = _resource_of(getattr(own_route, "path", ""))
            if resource in handlers:
                shadowed.setdefault(resource, []).append(own_route)
    app.router.routes.insert(0, ForwardedPrefixes(handlers, shadowed))


def add_fallback_route(app: FastAPI) -> None:
    async def unknown(request: Request, rest: str) -> Response:
        await authenticate(request)
        raise _not_found(request.url.path)

    app.add_api_route("/api/{rest:path}", unknown, methods=list(PROXY_METHODS), include_in_schema=False)
