"""The envelopes of the events this service writes: source ``scheduler``, and the ids of what caused them."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from pydantic import BaseModel
from rlark_contracts import Envelope, new_envelope

SOURCE = "scheduler"


@dataclass(frozen=True, slots=True)
class Meta:
    """Ids of what caused an event (the consumed event, or the API request) for tracing."""

    causation_id: str | None = None
    correlation_id: str | None = None

    @classmethod
    def of(cls, envelope: Envelope) -> Meta:
        return cls(causation_id=envelope.id, correlation_id=envelope.correlation_id or envelope.subject)

    @classmethod
    def from_request(cls) -> Meta:
        request_id = structlog.contextvars.get_contextvars().get("request_id")
        return cls(correlation_id=request_id)


def envelope(data: BaseModel, subject: str, meta: Meta) -> Envelope:
    return new_envelope(
        data,
        source=SOURCE,
        subject=subject,
        causation_id=meta.causation_id,
        correlation_id=meta.correlation_id,
    )
