"""How a use case publishes: an event into the outbox, in the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from pydantic import BaseModel
from rlark_contracts import new_envelope
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import add_event

SOURCE = "netdomain"


@dataclass(frozen=True, slots=True)
class EventMeta:
    """Where an event handler's output comes from: the input event's ids, for tracing."""

    causation_id: str | None = None
    correlation_id: str | None = None


async def publish(conn: Connection, data: BaseModel, subject: str, meta: EventMeta | None = None) -> None:
    """Add ``data`` as an event of this service to the outbox; without ``meta`` (an HTTP use case) the
    request id is its correlation id."""
    if meta is None:
        request_id = structlog.contextvars.get_contextvars().get("request_id")
        meta = EventMeta(correlation_id=request_id)
    envelope = new_envelope(
        data,
        source=SOURCE,
        subject=subject,
        causation_id=meta.causation_id,
        correlation_id=meta.correlation_id,
    )
    await add_event(conn, envelope)
