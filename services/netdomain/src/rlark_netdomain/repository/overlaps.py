"""SQL of overlap checking: the advisory lock that serialises domain creation with cluster updates,
and the ``overlap_warnings`` table (a domain overlapped by a cluster's declared or observed CIDR).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from ipaddress import IPv4Network

import asyncpg
from rlark_platform.db.pool import Connection

#: Advisory lock key shared by domain creation and cluster updates ("NDOVERLAP" folded to 63 bits).
_OVERLAP_LOCK = 0x4E444F5645524C50


@dataclass(frozen=True, slots=True)
class OverlapWarning:
    domain: str
    cluster: str
    kind: str
    cluster_cidr: IPv4Network
    message: str
    detected_at: datetime


def _warning(row: asyncpg.Record) -> OverlapWarning:
    return OverlapWarning(
        domain=row["domain"],
        cluster=row["cluster"],
        kind=row["kind"],
        cluster_cidr=row["cluster_cidr"],
        message=row["message"],
        detected_at=row["detected_at"],
    )


async def lock_overlap_checks(conn: Connection) -> None:
    """Serialise overlap checks (domain creation, cluster updates) until the transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _OVERLAP_LOCK)


async def cluster_warnings(conn: Connection, cluster: str) -> list[OverlapWarning]:
    rows = await conn.fetch("SELECT * FROM overlap_warnings WHERE cluster = $1", cluster)
    return [_warning(r) for r in rows]


async def domain_warnings(conn: Connection, domain: str) -> list[OverlapWarning]:
    rows = await conn.fetch(
        "SELECT * FROM overlap_warnings WHERE domain = $1 ORDER BY cluster, kind, cluster_cidr", domain
    )
    return [_warning(r) for r in rows]


async def insert_warning(
    conn: Connection, domain: str, cluster: str, kind: str, cluster_cidr: IPv4Network, message: str
) -> None:
    await conn.execute(
        """INSERT INTO overlap_warnings (domain, cluster, kind, cluster_cidr, message)
           VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""",
        domain,
        cluster,
        kind,
        cluster_cidr,
        message,
    )


async def delete_warning(
    conn: Connection, domain: str, cluster: str, kind: str, cluster_cidr: IPv4Network
) -> None:
    await conn.execute(
        """DELETE FROM overlap_warnings
           WHERE domain = $1 AND cluster = $2 AND kind = $3 AND cluster_cidr = $4""",
        domain,
        cluster,
        kind,
        cluster_cidr,
    )
