"""The ``capacity_changes`` queue and the NOTIFY channels.

A use case that changes capacity queues a row naming what changed in its own transaction; the NOTIFY
wakes the placement loop at commit, which applies and deletes the rows it read (see
``placement_loop``). ``ACTIVITY_CHANNEL`` wakes the API's streams following a job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rlark_platform.db.pool import Connection

CHANGES_CHANNEL = "scheduler_changes"
"""NOTIFY channel that wakes the placement loop (payload unused)."""


QUOTAS = "quotas"
"""The ``kind`` of a change to any project's quota (its key: the project): the loop reloads them all."""
DOMAINS = "domains"
"""The ``kind`` of a change to a network domain (its key: the domain): the loop reloads them all (ADR 0026)."""
LINKS = "links"
"""The ``kind`` of a new round trip between two clusters (key ``a/b``): the loop reloads them all (ADR 0026)."""

ACTIVITY_CHANNEL = "scheduler_job_activity"
"""NOTIFY channel with a job id as payload: something a follower of that job may want happened."""


async def add_change(conn: Connection, kind: str, key: str) -> None:
    """Queue a change for the placement loop and wake it (NOTIFY is delivered at commit)."""
    await conn.execute("INSERT INTO capacity_changes (kind, key) VALUES ($1, $2)", kind, key)
    await conn.execute("SELECT pg_notify($1, '')", CHANGES_CHANNEL)


async def add_changes(conn: Connection, kind: str, keys: Iterable[str]) -> None:
    keys = list(keys)
    if not keys:
        return
    await conn.execute(
        "INSERT INTO capacity_changes (kind, key) SELECT $1, k FROM unnest($2::text[]) AS k", kind, keys
    )
    await conn.execute("SELECT pg_notify($1, '')", CHANGES_CHANNEL)


async def notify_activity(conn: Connection, *job_ids: str) -> None:
    """Wake the streams following these jobs (one NOTIFY each, delivered at commit)."""
    if len(job_ids) == 1:
        await conn.execute("SELECT pg_notify($1, $2)", ACTIVITY_CHANNEL, job_ids[0])
    elif job_ids:
        await conn.execute(
            "SELECT pg_notify($1, j) FROM unnest($2::text[]) AS j", ACTIVITY_CHANNEL, list(job_ids)
        )


@dataclass(frozen=True)
class Change:
    id: int
    kind: str
    key: str


async def pending_changes(conn: Connection, limit: int) -> list[Change]:
    rows = await conn.fetch("SELECT id, kind, key FROM capacity_changes ORDER BY id LIMIT $1", limit)
    return [Change(r["id"], r["kind"], r["key"]) for r in rows]


async def delete_changes(conn: Connection, ids: Sequence[int]) -> None:
    await conn.execute("DELETE FROM capacity_changes WHERE id = ANY($1::bigint[])", list(ids))


async def clear_changes(conn: Connection) -> None:
    await conn.execute("DELETE FROM capacity_changes")
