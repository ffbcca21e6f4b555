from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from rlark_contracts import TopicNames
from rlark_platform.db import apply_migrations, create_pool, load_migrations
from rlark_platform.messaging import (
    PLATFORM_MIGRATIONS_TABLE,
    KafkaAccess,
    create_producer,
    ensure_topics,
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


@pytest.fixture
async def names(kafka_admin: KafkaAccess, topic_prefix: str) -> TopicNames:
    names = TopicNames(topic_prefix)
    await ensure_topics(kafka_admin, names, partitions=1)
    return names


@pytest.fixture
async def producer(kafka_admin: KafkaAccess):  # type: ignore[no-untyped-def]
    p = await create_producer(kafka_admin, "test")
    yield p
    await p.stop()
