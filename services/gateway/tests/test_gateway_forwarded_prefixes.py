"""``ForwardedPrefixes``: forwarded resources found by one lookup ahead of every route, never shadowing a route
the gateway serves itself under the same resource."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from rlark_gateway.api.proxy import ForwardedPrefixes, add_proxy_routes
from starlette.routing import Match


def scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": []}


def lane() -> ForwardedPrefixes:
    own = APIRouter()

    @own.delete("/api/v1/keys/{key_id}")
    async def delete_key(key_id: str) -> None: ...

    @own.get("/api/v1/jobs/{job_id}/outputs/{path:path}")
    async def outputs(job_id: str, path: str) -> None: ...

    @own.get("/api/v1/auth/me")
    async def me() -> None: ...

    app = FastAPI()
    app.include_router(own)
    add_proxy_routes(app, [own])
    first = app.router.routes[0]
    assert isinstance(first, ForwardedPrefixes)
    return first


def test_a_forwarded_resource_matches_with_the_rest_of_its_path() -> None:
    found = lane()
    for method, path, rest in [
        ("GET", "/api/v1/nodes", ""),
        ("GET", "/api/v1/nodes/alpha/n1", "/alpha/n1"),
        ("POST", "/api/v1/jobs:preview", ":preview"),
        ("GET", "/api/v1/keys/k1", "/k1"),  # only DELETE of a key is the gateway's own
        ("PATCH", "/api/v1/jobs/j1", "/j1"),
    ]:
        match, child = found.matches(scope(method, path))
        assert match is Match.FULL, (method, path)
        assert child["path_params"] == {"rest": rest}


def test_the_gateways_own_routes_and_other_paths_are_left_to_the_router() -> None:
    found = lane()
    for method, path in [
        ("DELETE", "/api/v1/keys/k1"),
        ("GET", "/api/v1/jobs/j1/outputs/logs/a.txt"),
        ("GET", "/api/v1/auth/me"),
        ("GET", "/api/v1/nodesX"),  # not a forwarded resource: the documented routes answer 404
        ("GET", "/api/v2/nodes"),
        ("OPTIONS", "/api/v1/nodes"),
        ("GET", "/"),
    ]:
        assert found.matches(scope(method, path))[0] is Match.NONE, (method, path)
    assert found.matches({"type": "websocket", "path": "/api/v1/nodes"})[0] is Match.NONE
