"""The web console's files with single-page-app fallback, the page shown when it is not built, and the
OpenAPI document at /api/openapi.json."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from conftest import echo_upstream, gateway_settings
from fastapi import FastAPI
from rlark_devinfra.testing import running_service
from rlark_gateway.api.console import add_console_routes
from rlark_gateway.domain.access import PROXY_ROUTES
from rlark_gateway.main import DEFINITION
from rlark_gateway.settings import GatewaySettings

pytestmark = pytest.mark.integration


@pytest.fixture
def web_dir(tmp_path: Path) -> Path:
    root = tmp_path / "dist"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>RLark console</title>")
    (root / "assets" / "app-1234.js").write_text("console.log('rlark')")
    (root / "favicon.ico").write_bytes(b"\x00\x01")
    (tmp_path / "secret.txt").write_text("outside the web dir")
    return root


@pytest.fixture
async def gateway_url(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, web_dir: Path
) -> AsyncIterator[str]:
    async with echo_upstream() as upstream:
        settings = gateway_settings(
            database_url, kafka_bootstrap, topic_prefix, upstream.url, web_dir=web_dir
        )
        async with running_service(DEFINITION, settings, worker=False) as service:
            yield service.url


async def test_console_files_are_served_with_spa_fallback_and_api_paths_stay_json(gateway_url: str) -> None:
    async with httpx.AsyncClient(base_url=gateway_url) as client:
        index = await client.get("/")
        assert index.status_code == 200
        assert "RLark console" in index.text
        assert index.headers["cache-control"] == "no-cache"
        deep_link = await client.get("/jobs/job-123/logs")
        assert deep_link.status_code == 200
        assert "RLark console" in deep_link.text
        dotted = await client.get("/clusters/gpu.a")
        assert "RLark console" in dotted.text
        asset = await client.get("/assets/app-1234.js")
        assert asset.text == "console.log('rlark')"
        assert "immutable" in asset.headers["cache-control"]
        assert (await client.get("/favicon.ico")).content == b"\x00\x01"
        assert (await client.get("/assets/missing-999.js")).status_code == 404
        traversal = await client.get("/%2e%2e/secret.txt")
        assert "outside the web dir" not in traversal.text
        api = await client.get("/api/v1/nothing-here")
        assert api.status_code == 401
        assert api.json()["error"]["code"] == "unauthenticated"
        wrong_method = await client.post("/")
        assert wrong_method.status_code == 405
        assert wrong_method.json()["error"]["code"] == "method_not_allowed"


async def test_openapi_documents_own_and_proxied_routes_by_tag(gateway_url: str) -> None:
    async with httpx.AsyncClient(base_url=gateway_url) as client:
        document = (await client.get("/api/openapi.json")).json()
        docs = await client.get("/api/docs")
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()
    tags = {t["name"] for t in document["tags"]}
    assert {"auth", "users", "audit", "events"} <= tags
    assert {r.resource for r in PROXY_ROUTES} <= tags
    paths = document["paths"]
    assert "/api/v1/auth/login" in paths
    assert "/api/v1/users/{username}" in paths
    assert set(paths["/api/v1/clusters{rest}"]) == {"get", "post", "put", "patch", "delete"}
    assert paths["/api/v1/jobs{rest}"]["post"]["tags"] == ["jobs"]


async def test_a_missing_console_build_explains_how_to_build_it(tmp_path: Path) -> None:
    app = FastAPI()
    add_console_routes(app, GatewaySettings(web_dir=tmp_path / "no-build-here"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for path in ("/", "/jobs/1"):
            response = await client.get(path)
            assert response.status_code == 200
            assert "not built" in response.text
            assert "npm run build" in response.text
            assert "RLARK_WEB_DIR" in response.text
