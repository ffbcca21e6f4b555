"""What a pool's connection carries to its next borrower (``rlark_platform.db.pool.PooledConnection``): session
state that outlives a transaction is undone on release when it was taken the declared way — a LISTEN
(``add_listener``), a session-level advisory lock (``mark_session_state``) — and an open transaction is
always rolled back; a plain borrow costs no reset round trip (a session variable set without saying so
is still there for the next borrower, which is why nothing in RLark sets one)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from rlark_platform.db import create_pool
from rlark_platform.db.pool import mark_session_state

pytestmark = pytest.mark.integration


@pytest.fixture
async def one_connection(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool of exactly one connection: every borrow gets the same session back."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    yield pool
    await pool.close()


async def backend_pid(pool: asyncpg.Pool) -> int:
    async with pool.acquire() as conn:
        pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    return pid


async def test_a_marked_session_advisory_lock_is_released_with_the_connection(
    one_connection: asyncpg.Pool, database_url: str
) -> None:
    key = f"pool-reset-{uuid.uuid4().hex}"
    pid = await backend_pid(one_connection)
    async with one_connection.acquire() as conn:
        mark_session_state(conn)
        assert await conn.fetchval("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key)
    assert await backend_pid(one_connection) == pid  # the same session, kept open
    other = await asyncpg.connect(database_url)
    try:
        assert await other.fetchval("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key), (
            "the lock outlived its borrower"
        )
    finally:
        await other.close()


async def test_a_listen_ends_with_the_borrow(one_connection: asyncpg.Pool) -> None:
    channel = f"pool_reset_{uuid.uuid4().hex[:12]}"
    async with one_connection.acquire() as conn:
        await conn.add_listener(channel, lambda *_: None)
        assert await conn.fetchval("SELECT $1 = ANY(ARRAY(SELECT pg_listening_channels()))", channel)
    async with one_connection.acquire() as conn:
        assert await conn.fetch("SELECT pg_listening_channels()") == []


async def test_an_unfinished_transaction_is_rolled_back(one_connection: asyncpg.Pool) -> None:
    table = f"pool_reset_{uuid.uuid4().hex[:12]}"
    async with one_connection.acquire() as conn:
        await conn.execute("BEGIN")
        await conn.execute(f"CREATE TABLE {table} (v int)")
    async with one_connection.acquire() as conn:
        assert await conn.fetchval("SELECT to_regclass($1)", table) is None
        assert not conn.is_in_transaction()


async def test_a_plain_borrow_sends_no_reset(one_connection: asyncpg.Pool) -> None:
    """The observable difference from asyncpg's default (``RESET ALL`` on every release)."""
    async with one_connection.acquire() as conn:
        await conn.execute("SELECT set_config('rlark.pool_probe', 'kept', false)")
    async with one_connection.acquire() as conn:
        assert await conn.fetchval("SELECT current_setting('rlark.pool_probe', true)") == "kept"
    async with one_connection.acquire() as conn:
        mark_session_state(conn)
    async with one_connection.acquire() as conn:
        assert await conn.fetchval("SELECT current_setting('rlark.pool_probe', true)") in ("", None)
