"""Benchmark of address allocation through the repository, in PostgreSQL.

``bench_db_allocations`` fills a /16 domain with 60,000 allocated addresses (a random sample, so
the free ones are scattered holes; seeded with one ``unnest`` insert), then times allocation
requests of one worker each, every one in its own transaction exactly as the consumer runs them
(domain row lock, paged search from ``scan_from``, insert, outbox events):

- ``fill``: new jobs take the lowest free addresses;
- ``churn``: a random earlier job releases its address (not timed), then a new job allocates.

Run it as ``python -m rlark_devinfra.benches.netdomain postgresql://.../<empty database>``; it prints JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
import time
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network

import asyncpg
import structlog
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested, AddressRequest
from rlark_netdomain.domain import count_assignable, nth_assignable
from rlark_netdomain.handlers.addresses import allocate_addresses, release_addresses
from rlark_netdomain.handlers.publishing import EventMeta
from rlark_netdomain.main import DEFINITION
from rlark_netdomain.repository import domains
from rlark_platform.db import apply_migrations, create_pool, ensure_database, load_migrations, transaction
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import PLATFORM_MIGRATIONS_TABLE, platform_migrations


def _percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))]


async def _migrate(database_url: str) -> None:
    await ensure_database(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
        assert DEFINITION.migrations is not None
        await apply_migrations(conn, load_migrations(DEFINITION.migrations))
    finally:
        await conn.close()


async def seed_allocations(
    conn: Connection, domain: str, job_id: str, cluster: str, addresses: Sequence[IPv4Address]
) -> None:
    """Fill a domain with one worker per address of one job, in one statement (the netdomain's
    ``allocations`` table as its migrations define it)."""
    await conn.execute(
        """INSERT INTO allocations (job_id, worker_id, domain, cluster, address)
           SELECT $1, 'w' || n, $2, $3, a FROM unnest($4::inet[]) WITH ORDINALITY AS t (a, n)""",
        job_id,
        domain,
        cluster,
        list(addresses),
    )


async def bench_db_allocations(
    database_url: str,
    *,
    n_in_use: int = 60_000,
    cidr: str = "10.100.0.0/16",
    operations: int = 1_000,
    seed: int = 20240601,
) -> dict[str, float | int | str]:
    """Allocations per second and latency percentiles (ms) of one-worker allocation requests in a
    domain with ``n_in_use`` addresses taken. Use an empty database: the domain ``bench`` is
    created in it (a domain overlapping ``cidr`` there makes it fail)."""
    network = IPv4Network(cidr)
    capacity = count_assignable(network)
    if n_in_use + operations > capacity:
        raise ValueError(f"{network} has only {capacity} assignable addresses")
    rng = random.Random(seed)
    await _migrate(database_url)
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        async with transaction(pool) as conn:
            await domains.insert_domain(
                conn, "bench", network, "benchmark", "bench", network.network_address + 1
            )
        taken = [nth_assignable(network, i) for i in rng.sample(range(capacity), n_in_use)]
        started = time.perf_counter()
        async with transaction(pool) as conn:
            await seed_allocations(conn, "bench", "seed", "bench-cluster", taken)
        seed_s = time.perf_counter() - started
        await pool.execute("ANALYZE allocations")

        async def allocate(job_id: str) -> float:
            request = AddressesRequested(
                job_id=job_id, domain="bench", workers=[AddressRequest(worker_id=f"{job_id}-0", cluster="c")]
            )
            began = time.perf_counter()
            async with transaction(pool) as conn:
                assert await allocate_addresses(conn, request, EventMeta())
            return time.perf_counter() - began

        fill = [await allocate(f"fill-{i}") for i in range(operations)]
        jobs = [f"fill-{i}" for i in range(operations)]
        churn: list[float] = []
        for i in range(operations):
            victim = jobs.pop(rng.randrange(len(jobs)))
            async with transaction(pool) as conn:
                await release_addresses(
                    conn, AddressesReleaseRequested(job_id=victim, domain="bench"), EventMeta()
                )
            churn.append(await allocate(f"churn-{i}"))
            jobs.append(f"churn-{i}")
        in_use_after = await pool.fetchval("SELECT count(*) FROM allocations WHERE domain = 'bench'")
    finally:
        await pool.close()

    timings = sorted(fill + churn)
    return {
        "network": str(network),
        "capacity": capacity,
        "n_in_use": n_in_use,
        "in_use_after": int(in_use_after),
        "seed_s": round(seed_s, 3),
        "allocations": len(timings),
        "allocations_per_s": round(len(timings) / sum(timings), 1),
        "p50_ms": round(_percentile(timings, 0.50) * 1e3, 3),
        "p99_ms": round(_percentile(timings, 0.99) * 1e3, 3),
        "max_ms": round(timings[-1] * 1e3, 3),
        "fill_p99_ms": round(_percentile(sorted(fill), 0.99) * 1e3, 3),
        "churn_p99_ms": round(_percentile(sorted(churn), 0.99) * 1e3, 3),
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(
            "usage: python -m rlark_devinfra.benches.netdomain postgresql://HOST:PORT/EMPTY_DATABASE"
        )
    # One log line per allocation would measure the terminal, not the allocator.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(json.dumps(asyncio.run(bench_db_allocations(sys.argv[1]))))
