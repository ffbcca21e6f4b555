"""A service's extra HTTP listeners (``ServiceDefinition.build_listeners``; the gateway's tools origin, ADR
0012): each serves its own app on its own port, both listen once the main API answers, and both stop with the
service."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI
from rlark_devinfra.testing import TEST_SECRET, free_port
from rlark_platform.service import ServiceContext, ServiceDefinition, serve
from rlark_platform.settings import ServiceSettings

pytestmark = pytest.mark.integration


def app_saying(what: str) -> FastAPI:
    app = FastAPI()

    @app.get("/who")
    async def who() -> dict[str, str]:
        return {"app": what}

    return app


async def answered(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """The first answer at ``url`` once the server listens (it starts in the background)."""
    for _ in range(200):
        try:
            return await client.get(url)
        except httpx.ConnectError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"nothing answered at {url}")


async def test_an_extra_listener_serves_its_own_app_and_stops_with_the_service() -> None:
    main_port, extra_port = free_port(), free_port()

    def listeners(ctx: ServiceContext[ServiceSettings, None]) -> list[tuple[FastAPI, int]]:
        return [(app_saying("extra"), extra_port)]

    definition = ServiceDefinition(
        name="listeners",
        settings_type=ServiceSettings,
        migrations=None,
        build_api=lambda ctx: app_saying("main"),
        build_listeners=listeners,
        needs_database=False,
        relay=False,
        kafka=False,
    )
    settings = ServiceSettings(service_name="listeners", internal_secret=TEST_SECRET, http_port=main_port)
    stop = asyncio.Event()
    served = asyncio.create_task(serve(definition, settings, api=True, worker=False, stop=stop))
    async with httpx.AsyncClient(timeout=5) as client:
        main = await answered(client, f"http://127.0.0.1:{main_port}/who")
        extra = await client.get(f"http://127.0.0.1:{extra_port}/who")
        assert main.json() == {"app": "main"}
        assert extra.json() == {"app": "extra"}
        stop.set()
        await asyncio.wait_for(served, 30)
        for port in (main_port, extra_port):
            try:
                await client.get(f"http://127.0.0.1:{port}/who")
            except httpx.ConnectError:
                continue
            raise AssertionError(f"port {port} still answers after the service stopped")
