"""SQL of the ``domains`` table: a domain's name, CIDR and description, the cursor of its address
pool (``scan_from``) and the clusters of its tunnel topology.

:func:`lock_domain` and :func:`lock_domains` take the domain's row lock, which orders allocations,
releases, topology changes and relay decisions in one domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from ipaddress import IPv4Address, IPv4Network

import asyncpg
from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import DomainCidr
from rlark_netdomain.repository import inet


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    cidr: IPv4Network
    description: str
    created_by: str
    created_at: datetime
    scan_from: IPv4Address
    topology_clusters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DomainSummary:
    domain: Domain
    allocated: int
    warnings: list[str]


class DomainNameTaken(Exception):
    pass


class DomainCidrTaken(Exception):
    """The exclusion constraint refused a CIDR overlapping another domain (a lost race)."""


def _domain(row: asyncpg.Record) -> Domain:
    return Domain(
        name=row["name"],
        cidr=row["cidr"],
        description=row["description"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        scan_from=inet.address(row["scan_from"]),
        topology_clusters=tuple(row["topology_clusters"]),
    )


async def insert_domain(
    conn: Connection, name: str, cidr: IPv4Network, description: str, created_by: str, scan_from: IPv4Address
) -> Domain:
    try:
        row = await conn.fetchrow(
            """INSERT INTO domains (name, cidr, description, created_by, scan_from)
               VALUES ($1, $2, $3, $4, $5) RETURNING *""",
            name,
            cidr,
            description,
            created_by,
            scan_from,
        )
    except asyncpg.UniqueViolationError:
        raise DomainNameTaken() from None
    except asyncpg.ExclusionViolationError:
        raise DomainCidrTaken() from None
    assert row is not None
    return _domain(row)


async def get_domain(conn: Connection, name: str) -> Domain | None:
    row = await conn.fetchrow("SELECT * FROM domains WHERE name = $1", name)
    return _domain(row) if row else None


async def lock_domain(conn: Connection, name: str) -> Domain | None:
    """The domain, locked until the transaction ends: allocations in it are serialised here."""
    row = await conn.fetchrow("SELECT * FROM domains WHERE name = $1 FOR UPDATE", name)
    return _domain(row) if row else None


async def lock_domains(conn: Connection, names: Iterable[str]) -> list[Domain]:
    """Several domains, locked in name order (one order everywhere, so no deadlock)."""
    rows = await conn.fetch(
        "SELECT * FROM domains WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE", sorted(set(names))
    )
    return [_domain(r) for r in rows]


async def list_domains(conn: Connection, *, limit: int, offset: int) -> tuple[list[DomainSummary], int]:
    """A page of domains ordered by name, with their allocation and warning counts, and the total."""
    rows = await conn.fetch(
        """SELECT d.*,
                  (SELECT count(*) FROM allocations a WHERE a.domain = d.name) AS allocated,
                  ARRAY(SELECT w.message FROM overlap_warnings w WHERE w.domain = d.name
                        ORDER BY w.cluster, w.kind, w.cluster_cidr) AS warnings
           FROM domains d ORDER BY d.name LIMIT $1 OFFSET $2""",
        limit,
        offset,
    )
    total = await conn.fetchval("SELECT count(*) FROM domains")
    return [DomainSummary(_domain(r), r["allocated"], list(r["warnings"])) for r in rows], int(total)


async def domain_cidrs(conn: Connection) -> list[DomainCidr]:
    rows = await conn.fetch("SELECT name, cidr FROM domains ORDER BY name")
    return [DomainCidr(r["name"], r["cidr"]) for r in rows]


async def delete_domain(conn: Connection, name: str) -> None:
    await conn.execute("DELETE FROM domains WHERE name = $1", name)


async def set_scan_from(conn: Connection, name: str, address: IPv4Address) -> None:
    await conn.execute("UPDATE domains SET scan_from = $2 WHERE name = $1", name, address)


async def set_topology(conn: Connection, name: str, clusters: Sequence[str]) -> None:
    await conn.execute("UPDATE domains SET topology_clusters = $2 WHERE name = $1", name, list(clusters))
