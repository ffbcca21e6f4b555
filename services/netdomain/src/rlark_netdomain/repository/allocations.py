"""SQL of a domain's addresses: ``allocations`` (one per worker, job and worker as the key, unique in
its domain) and ``free_addresses`` (released addresses below the domain's ``scan_from``).

The caller holds the domain's row lock (``domains.lock_domain``) while it allocates or releases;
the primary key (job, worker) and the unique (domain, address) are the last line of defence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address

import asyncpg
from rlark_platform.db.pool import Connection

from rlark_netdomain.repository import inet


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: str
    worker_id: str
    domain: str
    cluster: str
    address: IPv4Address


def _allocation(row: asyncpg.Record) -> Allocation:
    return Allocation(
        job_id=row["job_id"],
        worker_id=row["worker_id"],
        domain=row["domain"],
        cluster=row["cluster"],
        address=inet.address(row["address"]),
    )


# --- the free list ---------------------------------------------------------------------------------


async def free_list(conn: Connection, domain: str, limit: int) -> list[IPv4Address]:
    """Up to ``limit`` lowest released addresses of ``domain`` that are not allocated again."""
    rows = await conn.fetch(
        """SELECT f.address FROM free_addresses f
           WHERE f.domain = $1 AND NOT EXISTS (
               SELECT 1 FROM allocations a WHERE a.domain = f.domain AND a.address = f.address)
           ORDER BY f.address LIMIT $2""",
        domain,
        limit,
    )
    return [inet.address(r["address"]) for r in rows]


async def add_to_free_list(conn: Connection, domain: str, addresses: Sequence[IPv4Address]) -> None:
    await conn.execute(
        """INSERT INTO free_addresses (domain, address) SELECT $1, a FROM unnest($2::inet[]) AS t (a)
           ON CONFLICT DO NOTHING""",
        domain,
        list(addresses),
    )


async def remove_from_free_list(conn: Connection, domain: str, addresses: Sequence[IPv4Address]) -> None:
    await conn.execute(
        "DELETE FROM free_addresses WHERE domain = $1 AND address = ANY($2::inet[])", domain, list(addresses)
    )


# --- allocations -----------------------------------------------------------------------------------


async def job_allocations(conn: Connection, job_id: str) -> list[Allocation]:
    rows = await conn.fetch("SELECT * FROM allocations WHERE job_id = $1 ORDER BY worker_id", job_id)
    return [_allocation(r) for r in rows]


async def used_addresses_from(
    conn: Connection, domain: str, start: IPv4Address, limit: int
) -> list[IPv4Address]:
    """Up to ``limit`` allocated addresses of ``domain`` at or above ``start``, ascending."""
    rows = await conn.fetch(
        """SELECT address FROM allocations WHERE domain = $1 AND address >= $2
           ORDER BY address LIMIT $3""",
        domain,
        start,
        limit,
    )
    return [inet.address(r["address"]) for r in rows]


async def insert_allocations(
    conn: Connection, domain: str, job_id: str, rows: Sequence[tuple[str, str, IPv4Address]]
) -> None:
    """Insert ``(worker_id, cluster, address)`` rows for one job in one statement."""
    if not rows:
        return
    await conn.execute(
        """INSERT INTO allocations (job_id, worker_id, domain, cluster, address)
           SELECT $1, w, $2, c, a FROM unnest($3::text[], $4::text[], $5::inet[]) AS t (w, c, a)""",
        job_id,
        domain,
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
    )


async def delete_job_allocations(conn: Connection, job_id: str) -> list[Allocation]:
    rows = await conn.fetch("DELETE FROM allocations WHERE job_id = $1 RETURNING *", job_id)
    return [_allocation(r) for r in rows]


async def allocation_counts(conn: Connection, domain: str) -> dict[str, int]:
    """Allocated addresses per cluster, by cluster name."""
    rows = await conn.fetch(
        "SELECT cluster, count(*) AS n FROM allocations WHERE domain = $1 GROUP BY cluster ORDER BY cluster",
        domain,
    )
    return {r["cluster"]: r["n"] for r in rows}


async def jobs_in_domain(conn: Connection, domain: str, limit: int) -> list[str]:
    rows = await conn.fetch(
        "SELECT DISTINCT job_id FROM allocations WHERE domain = $1 ORDER BY job_id LIMIT $2", domain, limit
    )
    return [r["job_id"] for r in rows]


async def cluster_has_allocations(conn: Connection, domain: str, cluster: str) -> bool:
    found = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM allocations WHERE domain = $1 AND cluster = $2)", domain, cluster
    )
    return bool(found)
