"""Writing events to the outbox inside the caller's transaction. Handlers never call the producer."""

from __future__ import annotations

from collections.abc import Iterable

from rlark_contracts import Envelope, encode, topic_for

from rlark_platform.db.pool import Connection

NOTIFY_CHANNEL = "rlark_outbox"


async def add_events(
    conn: Connection, envelopes: Iterable[Envelope], headers: dict[str, str] | None = None
) -> None:
    """Insert events into the outbox on ``conn`` (which must be inside a transaction).

    The relay is woken by NOTIFY, which Postgres delivers only when the transaction commits, so a rolled
    back change never wakes it and never publishes. Re-adding an event id is a no-op (idempotent).
    """
    if not conn.is_in_transaction():
        raise RuntimeError("outbox writes must share the transaction of the state change")
    batch = list(envelopes)
    if not batch:
        return
    # One statement for the whole batch (arrays unnested server-side): far cheaper than a row per statement.
    await conn.execute(
        """WITH inserted AS (
               INSERT INTO outbox (event_id, topic, key, payload, headers)
               SELECT e.id, e.topic, e.key, e.payload, $5::jsonb
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) AS e(id, topic, key, payload)
               ON CONFLICT (event_id) DO NOTHING)
           SELECT pg_notify($6, '')""",
        [e.id for e in batch],
        [topic_for(e) for e in batch],
        [e.subject for e in batch],
        [encode(e) for e in batch],
        headers or None,
        NOTIFY_CHANNEL,
    )


async def add_event(conn: Connection, envelope: Envelope, headers: dict[str, str] | None = None) -> None:
    await add_events(conn, [envelope], headers)
