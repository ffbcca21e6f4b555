"""SQL of the ``tunnel_endpoints`` table: each cluster's verified endpoint in a domain (where its
agent accepts the domain's tunnels, and its key), published with the domain's tunnel topology.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rlark_platform.db.pool import Connection


@dataclass(frozen=True, slots=True)
class StoredEndpoint:
    """A cluster's verified endpoint in a domain: where its agent accepts tunnels, and its key."""

    cluster: str
    host: str
    port: int
    public_key: str
    announced_at: datetime


async def tunnel_endpoint(conn: Connection, domain: str, cluster: str) -> StoredEndpoint | None:
    row = await conn.fetchrow(
        """SELECT cluster, host, port, public_key, announced_at FROM tunnel_endpoints
            WHERE domain = $1 AND cluster = $2""",
        domain,
        cluster,
    )
    return StoredEndpoint(**dict(row)) if row else None


async def tunnel_endpoints(conn: Connection, domain: str) -> list[StoredEndpoint]:
    rows = await conn.fetch(
        """SELECT cluster, host, port, public_key, announced_at FROM tunnel_endpoints
            WHERE domain = $1 ORDER BY cluster""",
        domain,
    )
    return [StoredEndpoint(**dict(r)) for r in rows]


async def upsert_tunnel_endpoint(conn: Connection, domain: str, endpoint: StoredEndpoint) -> bool:
    """Store a cluster's endpoint unless a later announcement is stored already; True when the
    stored host, port or key changed (a repeated announcement only moves ``announced_at``)."""
    changed = await conn.fetchval(
        """WITH before AS (
               SELECT host, port, public_key FROM tunnel_endpoints WHERE domain = $1 AND cluster = $2
           ), written AS (
               INSERT INTO tunnel_endpoints (domain, cluster, host, port, public_key, announced_at)
               VALUES ($1, $2, $3, $4, $5, $6)
               ON CONFLICT (domain, cluster) DO UPDATE SET
                   host = EXCLUDED.host, port = EXCLUDED.port, public_key = EXCLUDED.public_key,
                   announced_at = EXCLUDED.announced_at
                WHERE tunnel_endpoints.announced_at <= EXCLUDED.announced_at
               RETURNING host, port, public_key
           )
           SELECT EXISTS (
               SELECT 1 FROM written w
                WHERE NOT EXISTS (SELECT 1 FROM before b WHERE (b.host, b.port, b.public_key)
                                                             = (w.host, w.port, w.public_key)))""",
        domain,
        endpoint.cluster,
        endpoint.host,
        endpoint.port,
        endpoint.public_key,
        endpoint.announced_at,
    )
    return bool(changed)


async def delete_tunnel_endpoints(conn: Connection, domain: str, clusters: Sequence[str]) -> None:
    """Forget the endpoints of clusters that left the domain's topology."""
    await conn.execute(
        "DELETE FROM tunnel_endpoints WHERE domain = $1 AND cluster = ANY($2::text[])", domain, list(clusters)
    )
