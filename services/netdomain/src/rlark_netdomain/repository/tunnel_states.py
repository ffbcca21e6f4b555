"""SQL of the ``tunnel_states`` table: each agent's last report on each link of a domain, shown with
the domain and read by the relay decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import Link


@dataclass(frozen=True, slots=True)
class TunnelLinkState:
    """One agent's last report on one link of a domain."""

    cluster: str
    peer: str
    state: str
    since: datetime
    rtt_ms: float | None
    bytes_sent: int
    bytes_received: int
    last_error: str
    reported_at: datetime


async def upsert_tunnel_state(conn: Connection, domain: str, link: TunnelLinkState) -> bool:
    """Store a link report of an existing domain; an older report than the stored one, or one for
    an unknown domain, changes nothing (False). ``since`` moves only when the state changes."""
    row = await conn.fetchval(
        """INSERT INTO tunnel_states (domain, cluster, peer, state, since, rtt_ms, bytes_sent,
                                      bytes_received, last_error, reported_at)
           SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
            WHERE EXISTS (SELECT 1 FROM domains WHERE name = $1)
           ON CONFLICT (domain, cluster, peer) DO UPDATE SET
               since = CASE WHEN tunnel_states.state = EXCLUDED.state THEN tunnel_states.since
                            ELSE EXCLUDED.since END,
               state = EXCLUDED.state, rtt_ms = EXCLUDED.rtt_ms, bytes_sent = EXCLUDED.bytes_sent,
               bytes_received = EXCLUDED.bytes_received, last_error = EXCLUDED.last_error,
               reported_at = EXCLUDED.reported_at
            WHERE tunnel_states.reported_at <= EXCLUDED.reported_at
           RETURNING 1""",
        domain,
        link.cluster,
        link.peer,
        link.state,
        link.since,
        link.rtt_ms,
        link.bytes_sent,
        link.bytes_received,
        link.last_error,
        link.reported_at,
    )
    return row is not None


async def delete_tunnel_state(conn: Connection, domain: str, cluster: str, peer: str, at: datetime) -> bool:
    """Forget a closed link, unless a newer report on it arrived first (False: nothing changed)."""
    row = await conn.fetchval(
        """DELETE FROM tunnel_states
            WHERE domain = $1 AND cluster = $2 AND peer = $3 AND reported_at <= $4
           RETURNING 1""",
        domain,
        cluster,
        peer,
        at,
    )
    return row is not None


async def tunnel_states(conn: Connection, domain: str) -> list[TunnelLinkState]:
    rows = await conn.fetch(
        """SELECT cluster, peer, state, since, rtt_ms, bytes_sent, bytes_received, last_error,
                  reported_at
             FROM tunnel_states WHERE domain = $1 ORDER BY cluster, peer""",
        domain,
    )
    return [TunnelLinkState(**dict(r)) for r in rows]


async def forget_tunnel_states(conn: Connection, domain: str, links: Iterable[Link]) -> None:
    """Drop both sides' reports on these links (they described a relayed path that is gone)."""
    pairs = sorted(links)
    if not pairs:
        return
    await conn.execute(
        """DELETE FROM tunnel_states t
            USING unnest($2::text[], $3::text[]) AS p(a, b)
            WHERE t.domain = $1
              AND ((t.cluster = p.a AND t.peer = p.b) OR (t.cluster = p.b AND t.peer = p.a))""",
        domain,
        [p.a for p in pairs],
        [p.b for p in pairs],
    )
