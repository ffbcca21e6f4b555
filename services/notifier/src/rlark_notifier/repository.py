"""All SQL of the notifier. Every function takes the connection first and returns models.

``jsonb`` goes in and comes out as Python objects (the platform pool's codec).

The caller owns the transaction. ``enqueue`` runs inside the consumer's inbox transaction, so a
notification is queued once per (endpoint, event) however often Kafka delivers the event.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
from rlark_platform.db.pool import Connection

from rlark_notifier.domain import Notification

NOTIFY_CHANNEL = "notifier_deliveries"
"""``pg_notify`` channel the dispatcher listens on: a delivery was queued."""


@dataclass(frozen=True, slots=True)
class StoredEndpoint:
    id: uuid.UUID
    owner: str
    name: str
    kind: str
    url: str
    scope: str
    states: list[str]
    job_ids: list[str]
    language: str
    created_at: datetime
    secret_sealed: bytes | None = field(default=None, repr=False)

    @property
    def has_secret(self) -> bool:
        return self.secret_sealed is not None


@dataclass(frozen=True, slots=True)
class NewEndpoint:
    id: uuid.UUID
    owner: str
    name: str
    kind: str
    url: str
    scope: str
    states: list[str]
    job_ids: list[str]
    language: str
    secret_sealed: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    at: datetime
    status_code: int | None
    error: str
    duration_ms: int


@dataclass(frozen=True, slots=True)
class Delivery:
    id: int
    endpoint_id: uuid.UUID
    event_id: str
    job_id: str
    to_status: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str
    created_at: datetime
    finished_at: datetime | None
    log: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """The head of one endpoint's queue, with what sending it needs."""

    id: int
    endpoint_id: uuid.UUID
    attempts: int
    notification: Notification
    event_at: datetime
    kind: str
    url: str
    language: str
    secret_sealed: bytes | None = field(default=None, repr=False)


class DuplicateName(Exception):
    """``(owner, name)`` is taken."""


def _endpoint(row: asyncpg.Record) -> StoredEndpoint:
    return StoredEndpoint(
        id=row["id"],
        owner=row["owner"],
        name=row["name"],
        kind=row["kind"],
        url=row["url"],
        scope=row["scope"],
        states=list(row["states"]),
        job_ids=list(row["job_ids"]),
        language=row["language"],
        created_at=row["created_at"],
        secret_sealed=bytes(row["secret_sealed"]) if row["secret_sealed"] is not None else None,
    )


async def insert_endpoint(conn: Connection, new: NewEndpoint) -> StoredEndpoint:
    try:
        row = await conn.fetchrow(
            """INSERT INTO endpoints (id, owner, name, kind, url, secret_sealed, scope, states, job_ids, language)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *""",
            new.id,
            new.owner,
            new.name,
            new.kind,
            new.url,
            new.secret_sealed,
            new.scope,
            new.states,
            new.job_ids,
            new.language,
        )
    except asyncpg.UniqueViolationError:
        raise DuplicateName() from None
    assert row is not None
    return _endpoint(row)


async def get_endpoint(conn: Connection, endpoint_id: uuid.UUID) -> StoredEndpoint | None:
    row = await conn.fetchrow("SELECT * FROM endpoints WHERE id = $1", endpoint_id)
    return _endpoint(row) if row else None


async def list_endpoints(
    conn: Connection, *, owner: str | None, limit: int, offset: int
) -> tuple[list[StoredEndpoint], int]:
    """One page of endpoints by owner then name (one owner's, or everyone's when ``owner`` is None)."""
    rows = await conn.fetch(
        """SELECT * FROM endpoints WHERE $1::text IS NULL OR owner = $1
           ORDER BY owner, name, id LIMIT $2 OFFSET $3""",
        owner,
        limit,
        offset,
    )
    total = await conn.fetchval("SELECT count(*) FROM endpoints WHERE $1::text IS NULL OR owner = $1", owner)
    return [_endpoint(r) for r in rows], int(total)


async def delete_endpoint(conn: Connection, endpoint_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM endpoints WHERE id = $1", endpoint_id)


async def remember_job(conn: Connection, job_id: str, owner: str, name: str | None) -> None:
    """Record (or refresh) who owns ``job_id``; ``name`` None keeps the name already known."""
    await conn.execute(
        """INSERT INTO jobs (job_id, owner, name) VALUES ($1, $2, coalesce($3, ''))
           ON CONFLICT (job_id) DO UPDATE
           SET owner = EXCLUDED.owner, name = coalesce($3, jobs.name), seen_at = now()""",
        job_id,
        owner,
        name,
    )


async def job_owners(conn: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    rows = await conn.fetch("SELECT job_id, owner FROM jobs WHERE job_id = ANY($1::text[])", list(job_ids))
    return {row["job_id"]: row["owner"] for row in rows}


async def queue_change(conn: Connection, notification: Notification, event_at: datetime) -> int:
    """One job change, in one statement: remember whose the job is, queue the change (with the job's
    name, when known) for every endpoint that wants it — the owner's own, or any ``all`` endpoint, whose
    state and job filters let it through — once per endpoint, and wake the dispatcher. Returns how many
    deliveries were queued. One round trip: the consumer applies a hundred of these a second."""
    row = await conn.fetchrow(
        """WITH job AS (
               INSERT INTO jobs (job_id, owner) VALUES ($2, $3)
               ON CONFLICT (job_id) DO UPDATE SET owner = EXCLUDED.owner, seen_at = now()
               RETURNING name),
           targets AS (
               SELECT id FROM endpoints
               WHERE (owner = $3 OR scope = 'all')
                 AND (cardinality(states) = 0 OR $4 = ANY(states))
                 AND (cardinality(job_ids) = 0 OR $2 = ANY(job_ids))),
           queued AS (
               INSERT INTO deliveries (endpoint_id, event_id, job_id, to_status, notification, event_at)
               SELECT t.id, $1, $2, $4,
                      jsonb_set($5::jsonb, '{job_name}', to_jsonb((SELECT name FROM job))), $6
               FROM targets t
               ON CONFLICT (endpoint_id, event_id) DO NOTHING RETURNING id)
           SELECT (SELECT count(*) FROM queued) AS queued,
                  (SELECT 1 FROM (SELECT pg_notify($7, '')) AS sent WHERE EXISTS (SELECT 1 FROM queued))
                  AS woke""",
        notification.event_id,
        notification.job_id,
        notification.owner,
        notification.to_status,
        notification.to_json(),
        event_at,
        NOTIFY_CHANNEL,
    )
    assert row is not None
    return int(row["queued"])


async def enqueue(
    conn: Connection, endpoint_ids: Sequence[uuid.UUID], notification: Notification, event_at: datetime
) -> int:
    """Queue ``notification`` for each endpoint (once per endpoint and event) and wake the dispatcher."""
    if not endpoint_ids:
        return 0
    rows = await conn.fetch(
        """INSERT INTO deliveries (endpoint_id, event_id, job_id, to_status, notification, event_at)
           SELECT e, $2, $3, $4, $5::jsonb, $6 FROM unnest($1::uuid[]) AS e
           ON CONFLICT (endpoint_id, event_id) DO NOTHING RETURNING id""",
        list(endpoint_ids),
        notification.event_id,
        notification.job_id,
        notification.to_status,
        notification.to_json(),
        event_at,
    )
    if rows:
        await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
    return len(rows)


_HEAD_COLUMNS = """h.id, h.endpoint_id, h.attempts, h.notification, h.event_at,
                  e.kind, e.url, e.language, e.secret_sealed"""


def _due(row: asyncpg.Record) -> DueDelivery:
    return DueDelivery(
        id=row["id"],
        endpoint_id=row["endpoint_id"],
        attempts=row["attempts"],
        notification=Notification.from_json(row["notification"]),
        event_at=row["event_at"],
        kind=row["kind"],
        url=row["url"],
        language=row["language"],
        secret_sealed=bytes(row["secret_sealed"]) if row["secret_sealed"] is not None else None,
    )


async def due_heads(conn: Connection, limit: int, busy: Sequence[uuid.UUID]) -> list[DueDelivery]:
    """The oldest pending delivery of each endpoint not in ``busy``, when it is due, oldest due first."""
    rows = await conn.fetch(
        f"""SELECT {_HEAD_COLUMNS}
            FROM (SELECT DISTINCT ON (endpoint_id) id, endpoint_id, attempts, notification, event_at,
                         next_attempt_at
                  FROM deliveries WHERE status = 'pending' AND NOT (endpoint_id = ANY($2::uuid[]))
                  ORDER BY endpoint_id, id) AS h
            JOIN endpoints e ON e.id = h.endpoint_id
            WHERE h.next_attempt_at <= now()
            ORDER BY h.next_attempt_at, h.id LIMIT $1""",  # noqa: S608 - a constant column list
        limit,
        list(busy),
    )
    return [_due(row) for row in rows]


async def due_head_of(conn: Connection, endpoint_id: uuid.UUID) -> DueDelivery | None:
    """The oldest pending delivery of one endpoint, when it is due."""
    row = await conn.fetchrow(
        f"""SELECT {_HEAD_COLUMNS}
            FROM (SELECT id, endpoint_id, attempts, notification, event_at, next_attempt_at
                  FROM deliveries WHERE status = 'pending' AND endpoint_id = $1
                  ORDER BY id LIMIT 1) AS h
            JOIN endpoints e ON e.id = h.endpoint_id
            WHERE h.next_attempt_at <= now()""",  # noqa: S608 - a constant column list
        endpoint_id,
    )
    return _due(row) if row else None


async def seconds_to_next_due(conn: Connection) -> float | None:
    """Seconds until the earliest endpoint *head* is due (0 when one is), None when none is pending.

    Heads only, as ``due_heads``: an endpoint's later deliveries wait behind its oldest pending one, so a
    later one already due while the head waits for a retry is not work now (counting it made the
    dispatcher poll every 5 ms until the head's retry, a busy loop of a core's tenth)."""
    # Clamped here, not with SQL's greatest(): greatest ignores NULLs, so the min of no rows read 0 ("due
    # now") and an idle dispatcher polled every 5 ms.
    value = await conn.fetchval(
        """SELECT extract(epoch FROM min(h.next_attempt_at) - now())::float8
           FROM (SELECT DISTINCT ON (endpoint_id) next_attempt_at
                 FROM deliveries WHERE status = 'pending'
                 ORDER BY endpoint_id, id) AS h"""
    )
    return None if value is None else max(float(value), 0.0)


async def pending_count(conn: Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM deliveries WHERE status = 'pending'"))


async def record_attempt(
    conn: Connection,
    delivery_id: int,
    attempt: int,
    *,
    status_code: int | None,
    error: str,
    duration_ms: int,
    status: str,
    retry_in_s: float = 0.0,
) -> bool:
    """Log attempt ``attempt`` and move the delivery on (``pending`` again after ``retry_in_s``,
    ``delivered`` or ``failed``). False when the delivery is gone or this attempt was recorded already
    (its endpoint was deleted meanwhile, or another dispatcher got there first)."""
    # One statement: the attempt is logged only when the guarded update took place.
    recorded = await conn.fetchval(
        """WITH moved AS (
               UPDATE deliveries
               SET attempts = $2, status = $3, last_status_code = $4, last_error = $5,
                   next_attempt_at = now() + make_interval(secs => $6),
                   finished_at = CASE WHEN $3 = 'pending' THEN NULL ELSE now() END
               WHERE id = $1 AND attempts = $2 - 1 AND status = 'pending' RETURNING id)
           INSERT INTO delivery_attempts (delivery_id, attempt, status_code, error, duration_ms)
           SELECT id, $2, $4, $5, $7 FROM moved RETURNING delivery_id""",
        delivery_id,
        attempt,
        status,
        status_code,
        error,
        retry_in_s,
        duration_ms,
    )
    return recorded is not None


def _delivery(row: asyncpg.Record, log: list[Attempt]) -> Delivery:
    return Delivery(
        id=row["id"],
        endpoint_id=row["endpoint_id"],
        event_id=row["event_id"],
        job_id=row["job_id"],
        to_status=row["to_status"],
        status=row["status"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_status_code=row["last_status_code"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        log=log,
    )


async def list_deliveries(
    conn: Connection, endpoint_id: uuid.UUID, *, limit: int, offset: int
) -> tuple[list[Delivery], int]:
    """One page of an endpoint's deliveries, newest first, each with its attempts."""
    rows = await conn.fetch(
        "SELECT * FROM deliveries WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3",
        endpoint_id,
        limit,
        offset,
    )
    total = await conn.fetchval("SELECT count(*) FROM deliveries WHERE endpoint_id = $1", endpoint_id)
    attempts = await conn.fetch(
        """SELECT * FROM delivery_attempts WHERE delivery_id = ANY($1::bigint[])
           ORDER BY delivery_id, attempt""",
        [row["id"] for row in rows],
    )
    by_delivery: dict[int, list[Attempt]] = {}
    for a in attempts:
        by_delivery.setdefault(a["delivery_id"], []).append(
            Attempt(a["attempt"], a["at"], a["status_code"], a["error"], a["duration_ms"])
        )
    return [_delivery(row, by_delivery.get(row["id"], [])) for row in rows], int(total)
