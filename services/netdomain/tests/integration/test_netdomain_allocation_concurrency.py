"""Concurrent allocations in one domain are serialised by the domain's row lock: every worker gets
a distinct address, the lowest ones, and none is lost (repository and use cases against real
PostgreSQL, without Kafka)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from ipaddress import IPv4Address, IPv4Network

import asyncpg
import pytest
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested, AddressRequest
from rlark_netdomain.domain import nth_assignable
from rlark_netdomain.handlers.addresses import allocate_addresses, release_addresses
from rlark_netdomain.handlers.publishing import EventMeta
from rlark_netdomain.main import DEFINITION
from rlark_netdomain.repository import allocations, domains
from rlark_platform.db import apply_migrations, create_pool, load_migrations, transaction
from rlark_platform.messaging import PLATFORM_MIGRATIONS_TABLE, platform_migrations

pytestmark = pytest.mark.integration

NETWORK = IPv4Network("10.90.0.0/22")


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    conn = await asyncpg.connect(database_url)
    await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
    assert DEFINITION.migrations is not None
    await apply_migrations(conn, load_migrations(DEFINITION.migrations))
    await conn.close()
    pool = await create_pool(database_url, min_size=1, max_size=8)
    async with transaction(pool) as conn:
        await domains.insert_domain(conn, "busy", NETWORK, "", "test", NETWORK.network_address + 1)
    yield pool
    await pool.close()


async def allocate(pool: asyncpg.Pool, job_id: str, workers: int) -> bool:
    request = AddressesRequested(
        job_id=job_id,
        domain="busy",
        workers=[AddressRequest(worker_id=f"{job_id}-{i}", cluster=f"c{i % 3}") for i in range(workers)],
    )
    async with transaction(pool) as conn:
        return await allocate_addresses(conn, request, EventMeta())


async def release(pool: asyncpg.Pool, job_id: str) -> int:
    async with transaction(pool) as conn:
        return await release_addresses(
            conn, AddressesReleaseRequested(job_id=job_id, domain="busy"), EventMeta()
        )


async def addresses_in_use(pool: asyncpg.Pool) -> list[IPv4Address]:
    async with pool.acquire() as conn:
        return await allocations.used_addresses_from(conn, "busy", NETWORK.network_address, 10_000)


async def test_concurrent_requests_get_distinct_lowest_addresses(pool: asyncpg.Pool) -> None:
    results = await asyncio.gather(*(allocate(pool, f"job-{n}", 7) for n in range(24)))

    assert all(results)
    used = await addresses_in_use(pool)
    assert used == [nth_assignable(NETWORK, i) for i in range(24 * 7)]


async def test_concurrent_releases_and_allocations_never_share_an_address(pool: asyncpg.Pool) -> None:
    for n in range(10):
        assert await allocate(pool, f"old-{n}", 5)

    await asyncio.gather(
        *(release(pool, f"old-{n}") for n in range(0, 10, 2)),
        *(allocate(pool, f"new-{n}", 5) for n in range(10)),
    )

    used = await addresses_in_use(pool)
    assert len(used) == len(set(used)) == 5 * 5 + 10 * 5
    async with pool.acquire() as conn:
        for n in range(10):
            assert len(await allocations.job_allocations(conn, f"new-{n}")) == 5
        # The invariant the search relies on: below scan_from, every assignable address is
        # allocated or on the free list, never both.
        listed = set(await allocations.free_list(conn, "busy", 1000))
        domain = await domains.get_domain(conn, "busy")
    assert domain is not None
    assert not listed & set(used)
    below = {a for a in (nth_assignable(NETWORK, i) for i in range(100)) if a < domain.scan_from}
    assert below == {a for a in used if a < domain.scan_from} | listed
    assert len(below) >= 50  # at least the ten jobs of five allocated before the releases
