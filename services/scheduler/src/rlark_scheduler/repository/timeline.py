"""What a follower of a job reads: the timeline (``job_events``), ``worker_logs`` and ``job_outputs``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rlark_contracts.messages import Text
from rlark_platform.db.pool import Connection

# ---------------------------------------------------------------------------------------- job events


@dataclass(frozen=True)
class EventRow:
    seq: int
    job_id: str
    kind: str
    from_status: str
    to_status: str
    worker_id: str | None
    phase: str | None
    reason: str
    details: dict[str, Any]
    at: datetime


async def reasons_said(conn: Connection, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """How each job's current reason can be said in another language (ADR 0011): the ``said``
    (``{"message_key", "params"}``) or ``parts`` kept by the latest timeline row that wrote that
    reason; jobs whose reason no row keyed are absent."""
    if not job_ids:
        return {}
    rows = await conn.fetch(
        """SELECT DISTINCT ON (e.job_id) e.job_id, e.details
             FROM job_events e JOIN jobs j ON j.id = e.job_id AND e.reason = j.reason
            WHERE e.job_id = ANY($1::text[]) AND (e.details ? 'said' OR e.details ? 'parts')
            ORDER BY e.job_id, e.seq DESC""",
        list(job_ids),
    )
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        details = row["details"]
        found[row["job_id"]] = {"parts": details["parts"]} if "parts" in details else details["said"]
    return found


async def worker_reasons_said(conn: Connection, job_id: str) -> dict[str, dict[str, Any]]:
    """Like :func:`reasons_said`, for each worker of ``job_id``: its reason's key and params."""
    rows = await conn.fetch(
        """SELECT DISTINCT ON (e.worker_id) e.worker_id, e.details
             FROM job_events e JOIN workers w ON w.id = e.worker_id AND e.reason = w.reason
            WHERE e.job_id = $1 AND e.kind = 'worker' AND e.details ? 'said'
            ORDER BY e.worker_id, e.seq DESC""",
        job_id,
    )
    return {row["worker_id"]: row["details"]["said"] for row in rows}


async def insert_event(
    conn: Connection,
    job_id: str,
    kind: str,
    *,
    at: datetime,
    from_status: str = "",
    to_status: str = "",
    worker_id: str | None = None,
    phase: str | None = None,
    reason: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """One timeline row. A ``reason`` that is a catalogue sentence keeps its key and params in
    ``details.said`` (``{"message_key", "params"}``, ADR 0011) so clients can say it in their language."""
    await insert_events(
        conn, [NewEvent(job_id, kind, at, from_status, to_status, worker_id, phase, reason, details)]
    )


@dataclass(frozen=True)
class NewEvent:
    """A timeline row to write (see :func:`insert_event`)."""

    job_id: str
    kind: str
    at: datetime
    from_status: str = ""
    to_status: str = ""
    worker_id: str | None = None
    phase: str | None = None
    reason: str = ""
    details: dict[str, Any] | None = None


async def insert_events(conn: Connection, events: Sequence[NewEvent]) -> None:
    """Timeline rows in the order given, in one pipelined round trip (as :func:`insert_event` each)."""
    if not events:
        return
    rows = []
    for e in events:
        details = {**(e.details or {}), "said": e.reason.wire()} if isinstance(e.reason, Text) else e.details
        rows.append(
            (
                e.job_id,
                e.kind,
                e.from_status,
                e.to_status,
                e.worker_id,
                e.phase,
                e.reason,
                details or {},
                e.at,
            )
        )
    await conn.executemany(
        """INSERT INTO job_events (job_id, kind, from_status, to_status, worker_id, phase, reason,
                                   details, at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)""",
        rows,
    )


async def events_of(
    conn: Connection, job_id: str, *, after: int = 0, kinds: Sequence[str] = (), limit: int = 1000
) -> list[EventRow]:
    rows = await conn.fetch(
        """SELECT seq, job_id, kind, from_status, to_status, worker_id, phase, reason, details, at
             FROM job_events
            WHERE job_id = $1 AND seq > $2 AND (cardinality($3::text[]) = 0 OR kind = ANY($3::text[]))
            ORDER BY seq LIMIT $4""",
        job_id,
        after,
        list(kinds),
        limit,
    )
    return [EventRow(**dict(r)) for r in rows]


# ---------------------------------------------------------------------------------------------- logs


@dataclass(frozen=True)
class LogRow:
    cursor: int
    worker_id: str
    seq: int
    line: str


async def insert_logs(
    conn: Connection, job_id: str, worker_id: str, first_seq: int, lines: Sequence[str]
) -> int:
    """Store lines ``first_seq, first_seq + 1, ...``; lines already stored are skipped. Returns how
    many were new."""
    result = await conn.execute(
        """INSERT INTO worker_logs (job_id, worker_id, seq, line)
           SELECT $1, $2, $3 + l.n - 1, l.line FROM unnest($4::text[]) WITH ORDINALITY AS l(line, n)
           ON CONFLICT (worker_id, seq) DO NOTHING""",
        job_id,
        worker_id,
        first_seq,
        list(lines),
    )
    return int(result.rsplit(" ", 1)[-1])


async def logs_of(
    conn: Connection,
    job_id: str,
    *,
    worker_id: str | None,
    since_seq: int | None,
    after_cursor: int,
    limit: int,
    attempt: int | None = None,
) -> list[LogRow]:
    """A job's lines in cursor order; of one worker, and/or of the workers of one attempt."""
    rows = await conn.fetch(
        """SELECT cursor, worker_id, seq, line FROM worker_logs
            WHERE job_id = $1 AND ($2::text IS NULL OR worker_id = $2)
              AND ($3::bigint IS NULL OR seq > $3) AND cursor > $4
              AND ($6::integer IS NULL OR worker_id IN (
                      SELECT id FROM workers WHERE job_id = $1 AND attempt = $6))
            ORDER BY cursor LIMIT $5""",
        job_id,
        worker_id,
        since_seq,
        after_cursor,
        limit,
        attempt,
    )
    return [LogRow(r["cursor"], r["worker_id"], r["seq"], r["line"]) for r in rows]


async def last_lines(conn: Connection, worker_id: str, count: int) -> list[str]:
    rows = await conn.fetch(
        "SELECT line FROM worker_logs WHERE worker_id = $1 ORDER BY seq DESC LIMIT $2", worker_id, count
    )
    return [r["line"] for r in reversed(rows)]


# ------------------------------------------------------------------------------------------- outputs


async def upsert_outputs(
    conn: Connection, job_id: str, worker_id: str, files: list[dict[str, Any]], truncated: bool
) -> None:
    await conn.execute(
        """INSERT INTO job_outputs (job_id, worker_id, files, truncated) VALUES ($1, $2, $3, $4)
           ON CONFLICT (job_id, worker_id) DO UPDATE SET files = EXCLUDED.files,
               truncated = EXCLUDED.truncated, listed_at = now()""",
        job_id,
        worker_id,
        files,
        truncated,
    )


async def outputs_of(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT worker_id, files, truncated FROM job_outputs WHERE job_id = $1 ORDER BY worker_id", job_id
    )
    return [{"worker_id": r["worker_id"], "files": r["files"], "truncated": r["truncated"]} for r in rows]
