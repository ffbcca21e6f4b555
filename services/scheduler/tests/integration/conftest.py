"""Fixtures for the scheduler's integration tests: the real service (API + worker) on real PostgreSQL
and Kafka, a producer standing in for inventory, keys, netdomain and the agents, and readers of the
topics the scheduler publishes."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from rlark_contracts import TopicNames
from rlark_devinfra.testing import (
    RunningService,
    TopicReader,
    provision_test_prefix,
    running_service,
    settings_for,
)
from rlark_platform.db import apply_migrations, create_pool, load_migrations
from rlark_platform.messaging import PLATFORM_MIGRATIONS_TABLE, KafkaAccess, platform_migrations
from rlark_platform.messaging.producer import delete_topics_with_prefix
from rlark_scheduler.main import DEFINITION
from scheduler_it_support import World


@pytest.fixture
def scheduler_settings() -> dict[str, Any]:
    """Settings the ``scheduler`` fixture starts with; a test module overrides this to change some."""
    return {
        "placement_poll_s": 1.0,
        "address_retry_s": 1.0,
        "stream_poll_s": 0.5,
        "cluster_offline_grace_s": 2.0,
    }


@pytest.fixture
async def scheduler(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, scheduler_settings: dict[str, Any]
) -> AsyncIterator[RunningService]:
    settings = settings_for(
        DEFINITION,
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        **scheduler_settings,
    )
    async with running_service(DEFINITION, settings) as running:
        yield running


@pytest.fixture
def world(scheduler: RunningService, producer: AIOKafkaProducer, names: TopicNames) -> World:
    return World(producer, names)


@pytest.fixture
async def placements(
    scheduler: RunningService, kafka_admin: KafkaAccess, names: TopicNames
) -> AsyncIterator[TopicReader]:
    async with TopicReader(kafka_admin, names.physical("scheduler.placements")) as reader:
        yield reader


@pytest.fixture
async def job_topic(
    scheduler: RunningService, kafka_admin: KafkaAccess, names: TopicNames
) -> AsyncIterator[TopicReader]:
    async with TopicReader(kafka_admin, names.physical("scheduler.jobs")) as reader:
        yield reader


@pytest.fixture(scope="module")
async def shared_scheduler(
    postgres_server_url: str, kafka_bootstrap: str, kafka_admin: KafkaAccess
) -> AsyncIterator[RunningService]:
    """One service for a whole module of tests that only read and refuse (no placement races):
    its own database and topic prefix, dropped afterwards. Tests keep apart by their names."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = postgres_server_url.rsplit("/", 1)[0] + f"/{name}"
    prefix = f"t{uuid.uuid4().hex[:10]}."
    await provision_test_prefix(kafka_admin, prefix)
    settings = settings_for(
        DEFINITION,
        database_url=url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        placement_poll_s=1.0,
    )
    async with running_service(DEFINITION, settings) as running:
        yield running
    with contextlib.suppress(Exception):
        await delete_topics_with_prefix(kafka_admin, prefix)
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on a database migrated for the scheduler and no service: for placement loops driven by hand."""
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
        assert DEFINITION.migrations is not None
        await apply_migrations(conn, load_migrations(DEFINITION.migrations))
    finally:
        await conn.close()
    pool = await create_pool(database_url, min_size=1, max_size=8)
    yield pool
    await pool.close()
