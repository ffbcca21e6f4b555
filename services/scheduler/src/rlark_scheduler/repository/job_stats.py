"""Counts for the scheduler's metrics (``rlark_scheduler.metrics``): jobs by status, and how long each
job placed since a timeline cursor waited for its placement. Read-only."""

from __future__ import annotations

from dataclasses import dataclass

from rlark_platform.db.pool import Connection


async def jobs_by_status(conn: Connection) -> dict[str, int]:
    """``{status: jobs}`` for every status some job has now."""
    rows = await conn.fetch("SELECT status, count(*) AS n FROM jobs GROUP BY status")
    return {row["status"]: row["n"] for row in rows}


@dataclass(frozen=True, slots=True)
class Placements:
    cursor: int
    """The timeline seq to read after next time."""
    waited_s: list[float]
    """Per placement after the old cursor: seconds from the job's submission (or its latest return to
    Pending: a restart, a cluster lost before its workers existed) to the placement's commit."""


SETTLE_S = 30
"""Rows newer than this are not read yet: a seq is taken at insert and its row shows at commit, so a
transaction still open could hold a lower seq than a newer row already visible. None stays open this long."""


async def settled_seq(conn: Connection) -> int:
    """The newest timeline seq older than ``SETTLE_S``: every row up to it has committed."""
    seq: int = await conn.fetchval(
        """SELECT COALESCE((SELECT seq FROM job_events WHERE at < now() - make_interval(secs => $1)
                             ORDER BY seq DESC LIMIT 1), 0)""",
        SETTLE_S,
    )
    return seq


async def placements_after(conn: Connection, cursor: int, limit: int = 1000) -> Placements:
    """The placements (timeline ``status`` rows to Scheduled) after ``cursor`` and settled, oldest
    first, at most ``limit``; the returned cursor covers every row read, placements or not."""
    upto = await settled_seq(conn)
    rows = await conn.fetch(
        """SELECT e.seq,
                  EXTRACT(EPOCH FROM e.at - COALESCE(
                      (SELECT max(p.at) FROM job_events p
                        WHERE p.job_id = e.job_id AND p.kind = 'status' AND p.to_status = 'Pending'
                          AND p.seq < e.seq),
                      j.created_at))::float8 AS waited_s
             FROM job_events e JOIN jobs j ON j.id = e.job_id
            WHERE e.seq > $1 AND e.seq <= $2 AND e.kind = 'status' AND e.to_status = 'Scheduled'
            ORDER BY e.seq
            LIMIT $3""",
        cursor,
        upto,
        limit,
    )
    last = rows[-1]["seq"] if len(rows) == limit else upto
    return Placements(cursor=max(last, cursor), waited_s=[max(row["waited_s"], 0.0) for row in rows])
