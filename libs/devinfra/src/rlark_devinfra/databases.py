"""Scratch PostgreSQL databases: made empty on a server, dropped (connections and all) when done."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def with_database(server_url: str, database: str) -> str:
    """``server_url`` pointed at ``database`` instead of its own."""
    base, _, _ = server_url.rpartition("/")
    return f"{base}/{database}"


@asynccontextmanager
async def scratch_database(server_url: str, prefix: str = "t") -> AsyncIterator[str]:
    """The URL of a brand-new, empty database on ``server_url``'s server, dropped on the way out."""
    import asyncpg

    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
