"""Fixtures for the gateway's tests: a real gateway on real PostgreSQL and Kafka, in front of a tiny
FastAPI "echo" upstream that stands in for the four services (each under its own path prefix, so a
test sees which service a request reached and exactly what the gateway forwarded)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from rlark_devinfra.testing import free_port, provision_test_prefix, running_service, settings_for
from rlark_gateway.main import DEFINITION
from rlark_gateway.settings import GatewaySettings
from rlark_platform.messaging import KafkaAccess

ADMIN = "root"
ADMIN_PASSWORD = "Adm1n-Passw0rd-for-tests"
USER_PASSWORD = "user-passw0rd"
# argon2id with a small cost: the tests exercise the logic, not the hardness (production keeps defaults).
FAST_HASH: dict[str, Any] = {"password_time_cost": 1, "password_memory_kib": 1024, "password_parallelism": 1}


def echo_app() -> FastAPI:
    """Answers every request with what it received; ``?follow=true`` streams three SSE events,
    ``?hang=S`` answers after S seconds, ``?status=N`` answers with status N."""
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def echo(path: str, request: Request) -> Response:
        body = await request.body()
        if request.query_params.get("follow") == "true":

            async def events() -> AsyncIterator[bytes]:
                for i in range(3):
                    yield f"data: {i}\n\n".encode()
                    await asyncio.sleep(0.05)

            return StreamingResponse(events(), media_type="text/event-stream")
        if "hang" in request.query_params:
            await asyncio.sleep(float(request.query_params["hang"]))
        payload: dict[str, Any] = {
            "method": request.method,
            "path": "/" + path,
            "query": request.url.query,
            "headers": [[k.decode(), v.decode()] for k, v in request.headers.raw],
            "body": body.decode(errors="replace"),
        }
        with contextlib.suppress(ValueError):
            sent = json.loads(body) if body else None
            if isinstance(sent, dict) and "name" in sent:
                payload["name"] = sent["name"]
        return JSONResponse(payload, status_code=int(request.query_params.get("status", "200")))

    return app


@dataclass
class Upstream:
    url: str
    server: uvicorn.Server
    task: asyncio.Task[None]


@contextlib.asynccontextmanager
async def echo_upstream(app: FastAPI | None = None) -> AsyncIterator[Upstream]:
    """The echo app (or ``app``, a test's own stand-in services) served on a free port."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app or echo_app(),
            host="127.0.0.1",
            port=port,
            log_config=None,
            lifespan="off",
            timeout_graceful_shutdown=5,
        )
    )
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.02)
    try:
        yield Upstream(f"http://127.0.0.1:{port}", server, task)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def gateway_settings(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, upstream_url: str, **extra: Any
) -> GatewaySettings:
    values: dict[str, Any] = {
        "inventory_url": f"{upstream_url}/inventory",
        "keys_url": f"{upstream_url}/keys",
        "netdomain_url": f"{upstream_url}/netdomain",
        "scheduler_url": f"{upstream_url}/scheduler",
        "notifier_url": f"{upstream_url}/notifier",
        "tools_port": free_port(),  # not the default API port + 1, which another test's server may hold
        **FAST_HASH,
        **extra,
    }
    return settings_for(
        DEFINITION,
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        **values,
    )


@dataclass
class Stack:
    """A running gateway (bootstrap admin ``root``) in front of the echo upstream."""

    url: str
    settings: GatewaySettings
    upstream_url: str
    database_url: str

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30, **kwargs)

    async def login(self, username: str, password: str) -> httpx.AsyncClient:
        """A (not yet opened) client holding a console session cookie."""
        async with self.client() as client:
            response = await client.post(
                "/api/v1/auth/login", json={"username": username, "password": password}
            )
            assert response.status_code == 200, response.text
        return self.client(cookies={"rlark_session": response.cookies["rlark_session"]})

    async def admin(self) -> httpx.AsyncClient:
        return await self.login(ADMIN, ADMIN_PASSWORD)

    async def new_user(self, role: str = "user", password: str = USER_PASSWORD) -> tuple[str, str]:
        """Create a fresh user (unique name) as the admin; returns (username, password)."""
        username = f"u{uuid.uuid4().hex[:10]}"
        async with await self.admin() as admin:
            response = await admin.post(
                "/api/v1/users", json={"username": username, "password": password, "role": role}
            )
            assert response.status_code == 201, response.text
        return username, password

    async def user_client(self, role: str = "user") -> tuple[str, httpx.AsyncClient]:
        username, password = await self.new_user(role)
        return username, await self.login(username, password)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.database_url)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()


async def _create_database(server_url: str) -> str:
    name = f"t_gw_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return f"{server_url.rpartition('/')[0]}/{name}"


async def _drop_database(server_url: str, database_url: str) -> None:
    name = database_url.rpartition("/")[2]
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def gateway_database(server_url: str) -> AsyncIterator[str]:
    """A fresh database for a test module's gateway(s) (its URL), dropped after."""
    database_url = await _create_database(server_url)
    try:
        yield database_url
    finally:
        await _drop_database(server_url, database_url)


@contextlib.asynccontextmanager
async def gateway_replicas(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess, **extra: Any
) -> AsyncIterator[tuple[Stack, Stack]]:
    """Two gateway processes' worth of gateway (each its own app, pool and port) on one database, in front
    of one echo upstream, with ``extra`` settings."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    await provision_test_prefix(kafka_admin, prefix)
    async with gateway_database(postgres_server_url) as database_url, echo_upstream() as upstream:
        settings = [
            gateway_settings(
                database_url,
                kafka_bootstrap,
                prefix,
                upstream.url,
                bootstrap_admin_username=ADMIN,
                bootstrap_admin_password=ADMIN_PASSWORD,
                **extra,
            )
            for _ in range(2)
        ]
        async with (
            running_service(DEFINITION, settings[0], worker=False) as first,
            running_service(DEFINITION, settings[1], worker=False) as second,
        ):
            assert first.url != second.url
            yield (
                Stack(first.url, settings[0], upstream.url, database_url),
                Stack(second.url, settings[1], upstream.url, database_url),
            )


@pytest.fixture(scope="module")
async def stack(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[Stack]:
    """One gateway per test module (tests use their own users, so they do not interfere)."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    await provision_test_prefix(kafka_admin, prefix)
    async with gateway_database(postgres_server_url) as database_url, echo_upstream() as upstream:
        settings = gateway_settings(
            database_url,
            kafka_bootstrap,
            prefix,
            upstream.url,
            bootstrap_admin_username=ADMIN,
            bootstrap_admin_password=ADMIN_PASSWORD,
        )
        async with running_service(DEFINITION, settings, worker=False) as service:
            yield Stack(service.url, settings, upstream.url, database_url)
