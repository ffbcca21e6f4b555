"""Connection pool and the transaction helper every repository call runs inside."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import asyncpg
from asyncpg.pool import PoolConnectionProxy

Connection = asyncpg.Connection | PoolConnectionProxy
"""What repositories take: a plain connection or one borrowed from a pool."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(url, min_size=min_size, max_size=max_size, init=_init_connection)
    assert pool is not None
    return pool


async def ensure_database(url: str) -> None:
    """Create the database named in ``url`` on its server when missing (idempotent, race-safe)."""
    base, _, name = url.rpartition("/")
    name = name.split("?", 1)[0]
    conn = await asyncpg.connect(f"{base}/postgres")
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            quoted = '"' + name.replace('"', '""') + '"'
            with suppress(asyncpg.DuplicateDatabaseError):
                await conn.execute(f"CREATE DATABASE {quoted}")
    finally:
        await conn.close()


@asynccontextmanager
async def transaction(pool: asyncpg.Pool) -> AsyncIterator[Connection]:
    """One connection in one transaction: committed on normal exit, rolled back on any exception."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn
