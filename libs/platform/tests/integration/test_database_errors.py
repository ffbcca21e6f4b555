"""A request whose SQL fails in PostgreSQL is a 500 that costs the service nothing afterwards: its
connection goes back to the (small) pool, its transaction is rolled back, and the error is logged as a
plain traceback — never with the failing frames' local values — so the next request is answered.

A NUL in a path once reached SQL on several services (refused since 2cde817); behind the adversarial
probe the services then seemed to hang: each 500 was logged, in the in-process test stack, as a rich
traceback with every frame's locals (about 10,000 lines, seconds of a blocked event loop each)."""

from __future__ import annotations

import time
import uuid

import asyncpg
import pytest
from fastapi import FastAPI, Request
from rlark_devinfra.testing import TEST_SECRET, running_service, settings_for
from rlark_platform.db import transaction
from rlark_platform.http import create_app
from rlark_platform.identity import Role
from rlark_platform.service import ServiceContext, ServiceDefinition
from rlark_platform.settings import ServiceSettings

pytestmark = pytest.mark.integration

POOL_SIZE = 2
MARKER = f"local-value-{uuid.uuid4().hex}"


def build_api(ctx: ServiceContext[ServiceSettings, None]) -> FastAPI:
    app = create_app("dberrors", internal_secret=TEST_SECRET)
    pool = ctx.require_pool()

    @app.get("/broken")
    async def broken(_: Request) -> dict[str, str]:
        kept_local = MARKER  # a failing frame's local: must not reach the log
        async with transaction(pool) as conn:
            await conn.execute("CREATE TEMP TABLE IF NOT EXISTS held (v text)")
            value = await conn.fetchval("SELECT $1::text", "a\x00b")  # PostgreSQL refuses NUL in text
        return {"value": str(value), "local": kept_local}

    @app.get("/stalled")
    async def stalled(_: Request) -> dict[str, str]:
        # The process stalls mid-transaction past the server's idle-in-transaction limit (as a paused or
        # starved replica does): the server ends the session and rolls the write back.
        async with transaction(pool) as conn:
            await conn.execute("SET LOCAL idle_in_transaction_session_timeout = '100ms'")
            await conn.execute("INSERT INTO written (v) VALUES ('stalled')")
            time.sleep(0.5)  # noqa: ASYNC251 -- blocks the whole process, as SIGSTOP would
            await conn.execute("INSERT INTO written (v) VALUES ('after')")
        return {"written": "yes"}

    @app.get("/terminated")
    async def terminated(_: Request) -> dict[str, str]:
        async with transaction(pool) as conn:
            await conn.execute("INSERT INTO written (v) VALUES ('terminated')")
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")  # an operator ends it
        return {"written": "yes"}

    @app.get("/fine")
    async def fine(_: Request) -> dict[str, int]:
        async with pool.acquire() as conn:
            open_transactions = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%'"
            )
        return {"idle_in_transaction": int(open_transactions)}

    return app


DEFINITION = ServiceDefinition(
    name="dberrors",
    settings_type=ServiceSettings,
    migrations=None,
    build_api=build_api,
    relay=False,
    kafka=False,
)


def small_pool_settings(database_url: str) -> ServiceSettings:
    return settings_for(
        DEFINITION,
        database_url=database_url,
        kafka_bootstrap="127.0.0.1:9",  # kafka=False: never contacted
        topic_prefix="unused.",
        db_pool_min=1,
        db_pool_max=POOL_SIZE,
    )


@pytest.mark.timeout(120)
async def test_database_errors_beyond_the_pool_size_leave_the_service_answering(
    database_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    settings = small_pool_settings(database_url)
    async with (
        running_service(DEFINITION, settings, worker=False) as svc,
        svc.client(
            "root",
            Role.ADMIN,
            timeout=None,  # the test's timeout is the only limit
        ) as client,
    ):
        for _ in range(POOL_SIZE * 3):
            response = await client.get("/broken")
            assert response.status_code == 500, response.text
            assert response.json()["error"]["code"] == "internal_error"
        response = await client.get("/fine")
    assert response.status_code == 200, response.text
    assert response.json() == {"idle_in_transaction": 0}
    logged = capfd.readouterr().out
    assert logged.count("CharacterNotInRepertoireError") >= POOL_SIZE * 3
    assert "Traceback (most recent call last)" in logged
    assert MARKER not in logged, "a failing frame's local value was logged"


@pytest.mark.timeout(120)
async def test_a_request_whose_session_the_database_ended_is_a_503_to_retry_and_wrote_nothing(
    database_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    settings = small_pool_settings(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS written (v text)")
        async with (
            running_service(DEFINITION, settings, worker=False) as svc,
            svc.client("root", Role.ADMIN, timeout=None) as client,
        ):
            for path in ["/stalled", "/terminated"] * POOL_SIZE:
                response = await client.get(path)
                assert response.status_code == 503, (path, response.text)
                assert response.json()["error"]["code"] == "database_unavailable"
                assert response.headers["Retry-After"] == "1"
            response = await client.get("/fine")  # the pool replaced the lost sessions
            assert response.status_code == 200, response.text
            assert response.json() == {"idle_in_transaction": 0}
        assert await conn.fetchval("SELECT count(*) FROM written") == 0, "a lost transaction's write stayed"
    finally:
        await conn.close()
    logged = capfd.readouterr().out
    assert logged.count("database unavailable") >= POOL_SIZE * 2
    assert "unhandled error" not in logged
