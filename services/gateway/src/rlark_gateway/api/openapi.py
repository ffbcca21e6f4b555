"""``/api/openapi.json``: the whole public API in one document — the gateway's own routes and, in place of
each proxied ``/api/v1/<resource>{rest}`` catch-all, the operations the service behind it documents.

Role: clients, the docs page and schemathesis (tests/adversarial) read one document that says, per
operation, its parameters, bodies and every status it can answer. A service's document is fetched from
the service (``GET <upstream>/openapi.json``) when this document is asked for, until each has answered
once (then kept: a service's routes change only with a deploy, which restarts the gateway too). A service
that does not answer keeps its catch-all entries, so the document is always served.

Merging: the service's component schemas are renamed ``<service>.<Name>`` (services may use the same
names), its paths under the resources the gateway forwards to it are added with those resources' tags,
and every forwarded operation also lists what the gateway itself may answer before or instead of the
service (:data:`GATEWAY_ANSWERS`).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import httpx
import structlog
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from rlark_platform.openapi import error_responses

from rlark_gateway.domain.access import API_PREFIX, PROXY_ROUTES
from rlark_gateway.wiring import Gateway

log = structlog.get_logger(__name__)

OPENAPI_PATH = "/api/openapi.json"
SERVICE_DOCUMENT_PATH = "/openapi.json"
FETCH_TIMEOUT_S = 5.0
GATEWAY_ANSWERS = (401, 403, 413, 415, 503, 504)
"""Statuses the gateway answers on a forwarded route: not signed in, not allowed (also a foreign origin),
body too large, a body neither JSON nor YAML, the service unavailable or too slow."""
_METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options"})
_REF = "#/components/schemas/"


def _renamed(node: Any, prefix: str) -> Any:
    """``node`` with every ``$ref`` to a component schema pointing at ``<prefix><Name>``."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
                out[key] = _REF + prefix + value[len(_REF) :]
            else:
                out[key] = _renamed(value, prefix)
        return out
    if isinstance(node, list):
        return [_renamed(item, prefix) for item in node]
    return node


def _resource_of(path: str, resources: list[str]) -> str | None:
    for resource in resources:
        base = f"{API_PREFIX}/{resource}"
        if path == base or path.startswith((base + "/", base + ":")):
            return resource
    return None


def merge_documents(own: dict[str, Any], services: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The gateway's document ``own`` with each answering service's operations merged in (pure)."""
    merged = copy.deepcopy(own)
    schemas = merged.setdefault("components", {}).setdefault("schemas", {})
    gateway_answers = {str(status): spec for status, spec in _answers().items()}
    for service, document in sorted(services.items()):
        resources = [route.resource for route in PROXY_ROUTES if route.service == service]
        prefix = f"{service}."
        renamed = _renamed(document, prefix)
        for name, schema in renamed.get("components", {}).get("schemas", {}).items():
            schemas[prefix + name] = schema
        for path, item in renamed.get("paths", {}).items():
            resource = _resource_of(path, resources)
            if resource is None:
                continue  # a route the gateway does not forward
            for method, operation in item.items():
                if method not in _METHODS:
                    continue
                operation["tags"] = [resource]
                operation["operationId"] = f"{service}_{operation.get('operationId', method + path)}"
                operation["responses"] = {**gateway_answers, **operation.get("responses", {})}
            merged["paths"][path] = item
        for resource in resources:
            merged["paths"].pop(f"{API_PREFIX}/{resource}{{rest}}", None)
    return merged


def _answers() -> dict[str, Any]:
    """The gateway's own answers on forwarded routes, as response objects referring to ``ErrorBody``."""
    return {
        str(status): {
            "description": spec["description"],
            "content": {"application/json": {"schema": {"$ref": _REF + "ErrorBody"}}},
        }
        for status, spec in error_responses(*GATEWAY_ANSWERS).items()
    }


async def _fetch(client: httpx.AsyncClient, service: str, base: str) -> dict[str, Any] | None:
    try:
        response = await client.get(base + SERVICE_DOCUMENT_PATH)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("service API document unavailable", service=service, error=type(exc).__name__)
        return None
    return document if isinstance(document, dict) and isinstance(document.get("paths"), dict) else None


def add_openapi_route(app: FastAPI, gw: Gateway) -> None:
    """Serve the merged document at :data:`OPENAPI_PATH`, in place of FastAPI's own document route
    (kept as the app's ``openapi_url``, which the docs page reads)."""
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != OPENAPI_PATH]
    fetched: dict[str, dict[str, Any]] = {}
    lock = asyncio.Lock()

    async def openapi() -> JSONResponse:
        services = {route.service for route in PROXY_ROUTES}
        async with lock:
            missing = sorted(services - fetched.keys())
            if missing:
                async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, trust_env=False) as client:
                    found = await asyncio.gather(
                        *(_fetch(client, service, gw.proxy.upstreams[service]) for service in missing)
                    )
                fetched.update({s: d for s, d in zip(missing, found, strict=True) if d is not None})
            document = merge_documents(app.openapi(), fetched)
        return JSONResponse(document)

    app.add_api_route(OPENAPI_PATH, openapi, methods=["GET"], include_in_schema=False)
