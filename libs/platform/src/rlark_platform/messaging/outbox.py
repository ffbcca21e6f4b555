"""Writing events to the outbox inside the caller's transaction. Handlers never call the producer."""

from __future__ import annotations

from collections.abc import Iterable

from rlark_contracts import Envelope, encode, topic_of

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
    rows = [(e.id, topic_of(e.type), e.subject, encode(e), headers or None) for e in envelopes]
    if not rows:
        return
    await conn.executemany(
        """INSERT INTO outbox (event_id, topic, key, payload, headers)
           VALUES ($1, $2, $3, $4, $5) ON CONFLICT (event_id) DO NOTHING""",
        rows,
    )
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)


async def add_event(conn: Connection, envelope: Envelope, headers: dict[str, str] | None = None) -> None:
    await add_events(conn, [envelope], headers)
