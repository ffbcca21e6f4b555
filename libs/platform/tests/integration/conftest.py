from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from rlark_platform.db import apply_migrations, create_pool, load_migrations
from rlark_platform.messaging import (
    PLATFORM_MIGRATIONS_TABLE,
    platform_migrations,
)

SAMPLE = Path(__file__).parent / "sample_migrations"


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    conn = await asyncpg.connect(database_url)
    await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
    await apply_migrations(conn, load_migrations(SAMPLE))
    await conn.close()
    pool = await create_pool(database_url, min_size=1, max_size=5)
    yield pool
    await pool.close()
