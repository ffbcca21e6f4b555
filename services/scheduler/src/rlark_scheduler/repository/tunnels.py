"""The ``tunnel_links`` table (each domain link as each cluster's agent last reported it) and the
jobs' tunnel reasons (``jobs.tunnel_reason`` / ``reason_before_tunnel``: an outage shown as a job's
reason, the reason it replaced kept to come back)."""

from __future__ import annotations

from datetime import datetime

from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.tunnels import LinkObservation


async def upsert_tunnel_link(
    conn: Connection,
    *,
    domain: str,
    cluster: str,
    peer: str,
    up: bool,
    last_error: str,
    rtt_ms: float | None,
    bytes_sent: int,
    bytes_received: int,
    at: datetime,
) -> bool:
    """Store one agent's report on one link; ``since`` moves only when the state changes. A report
    older than the stored one changes nothing (returns False)."""
    row = await conn.fetchval(
        """INSERT INTO tunnel_links (domain, cluster, peer, up, since, last_error, rtt_ms, bytes_sent,
                                     bytes_received, reported_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $5)
           ON CONFLICT (domain, cluster, peer) DO UPDATE SET
               since = CASE WHEN tunnel_links.up = EXCLUDED.up THEN tunnel_links.since
                            ELSE EXCLUDED.since END,
               up = EXCLUDED.up, last_error = EXCLUDED.last_error, rtt_ms = EXCLUDED.rtt_ms,
               bytes_sent = EXCLUDED.bytes_sent, bytes_received = EXCLUDED.bytes_received,
               reported_at = EXCLUDED.reported_at
            WHERE tunnel_links.reported_at <= EXCLUDED.reported_at
           RETURNING 1""",
        domain,
        cluster,
        peer,
        up,
        at,
        last_error,
        rtt_ms,
        bytes_sent,
        bytes_received,
    )
    return row is not None


async def delete_tunnel_link(conn: Connection, domain: str, cluster: str, peer: str, at: datetime) -> bool:
    """Forget a closed link, unless a newer report on it arrived first (False: nothing changed)."""
    row = await conn.fetchval(
        """DELETE FROM tunnel_links
            WHERE domain = $1 AND cluster = $2 AND peer = $3 AND reported_at <= $4
           RETURNING 1""",
        domain,
        cluster,
        peer,
        at,
    )
    return row is not None


async def tunnel_links(conn: Connection, domain: str) -> list[LinkObservation]:
    rows = await conn.fetch(
        "SELECT domain, cluster, peer, up, since, last_error, reported_at FROM tunnel_links WHERE domain = $1",
        domain,
    )
    return [
        LinkObservation(
            r["domain"], r["cluster"], r["peer"], r["up"], r["since"], r["last_error"], r["reported_at"]
        )
        for r in rows
    ]


async def tunnel_judged_jobs(conn: Connection, domain: str | None) -> list[str]:
    """Starting/Running jobs whose tunnels need judging: in a domain with a link reported down, or
    carrying a tunnel reason; only ``domain``'s when given."""
    rows = await conn.fetch(
        """SELECT id FROM jobs j
            WHERE status = ANY($1::text[]) AND network_domain IS NOT NULL
              AND ($2::text IS NULL OR network_domain = $2)
              AND (tunnel_reason IS NOT NULL OR EXISTS (
                   SELECT 1 FROM tunnel_links t WHERE t.domain = j.network_domain AND NOT t.up))
            ORDER BY submitted_seq""",
        [JobStatus.STARTING.value, JobStatus.RUNNING.value],
        domain,
    )
    return [r["id"] for r in rows]


async def tunnel_reason(conn: Connection, job_id: str) -> str | None:
    value = await conn.fetchval("SELECT tunnel_reason FROM jobs WHERE id = $1", job_id)
    return None if value is None else str(value)


async def mark_tunnel_reason(conn: Connection, job_id: str, reason: str, now: datetime) -> None:
    """Show ``reason`` as the job's reason, remembering the one it replaces (unless that is an
    earlier tunnel reason still shown)."""
    await conn.execute(
        """UPDATE jobs SET reason_before_tunnel = CASE
                               WHEN tunnel_reason IS NULL OR reason <> tunnel_reason THEN reason
                               ELSE reason_before_tunnel END,
                           reason = $2, tunnel_reason = $2, updated_at = $3
            WHERE id = $1""",
        job_id,
        reason,
        now,
    )


async def clear_tunnel_reason(conn: Connection, job_id: str, now: datetime) -> str:
    """Drop the tunnel reason; the job's earlier reason comes back unless a status change replaced
    it meanwhile. Returns the reason now shown."""
    value = await conn.fetchval(
        """UPDATE jobs SET reason = CASE WHEN reason = tunnel_reason
                                         THEN COALESCE(reason_before_tunnel, '') ELSE reason END,
                           tunnel_reason = NULL, reason_before_tunnel = NULL, updated_at = $2
            WHERE id = $1
           RETURNING reason""",
        job_id,
        now,
    )
    return str(value or "")


RTT_CHANGE = 0.2
"""A round trip this much (a fraction) above or below the stored one is worth telling the placement loop."""


async def record_round_trip(conn: Connection, a: str, b: str, rtt_ms: float, at: datetime) -> bool:
    """Keep the round trip last measured between clusters ``a`` and ``b`` (in any domain; kept after their
    links close: what the placer prefers links by, ADR 0026). True when the pair is new or its round trip
    moved by more than :data:`RTT_CHANGE`; an older measurement than the stored one changes nothing."""
    low, high = sorted((a, b))
    before = await conn.fetchval(
        """SELECT rtt_ms FROM cluster_links WHERE a = $1 AND b = $2""",
        low,
        high,
    )
    stored = await conn.fetchval(
        """INSERT INTO cluster_links (a, b, rtt_ms, measured_at) VALUES ($1, $2, $3, $4)
           ON CONFLICT (a, b) DO UPDATE SET rtt_ms = EXCLUDED.rtt_ms, measured_at = EXCLUDED.measured_at
            WHERE cluster_links.measured_at <= EXCLUDED.measured_at
           RETURNING 1""",
        low,
        high,
        rtt_ms,
        at,
    )
    if stored is None:
        return False
    return before is None or abs(rtt_ms - before) > RTT_CHANGE * max(before, 0.1)


async def round_trips(conn: Connection) -> dict[tuple[str, str], float]:
    """(a, b) with a < b → the round trip last measured between them, in ms."""
    rows = await conn.fetch("SELECT a, b, rtt_ms FROM cluster_links")
    return {(r["a"], r["b"]): float(r["rtt_ms"]) for r in rows}
