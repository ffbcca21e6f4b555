"""The event envelope, with CloudEvents field names, and its JSON encoding on the wire.

``id`` is the dedupe key consumers claim in their inbox; ``subject`` is the aggregate id and the Kafka key,
so one aggregate's events stay ordered.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlark_contracts.registry import EVENT_TYPES, UnknownEventType, data_model, topic_of, type_of
from rlark_contracts.topics import TOPICS


class Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    specversion: str = "1.0"
    id: str = Field(min_length=1, max_length=64)
    type: str = Field(min_length=1, max_length=128)
    source: str = Field(min_length=1, max_length=256)
    subject: str = Field(min_length=1, max_length=512)
    time: datetime
    correlation_id: str | None = None
    causation_id: str | None = None
    datacontenttype: str = "application/json"
    data: dict[str, Any]

    def payload(self) -> BaseModel:
        """The typed data; raises ``UnknownEventType`` or a pydantic ``ValidationError``."""
        return data_model(self.type).model_validate(self.data)

    @property
    def known(self) -> bool:
        return self.type in EVENT_TYPES


def new_envelope(
    data: BaseModel,
    *,
    source: str,
    subject: str,
    correlation_id: str | None = None,
    causation_id: str | None = None,
    event_id: str | None = None,
    time: datetime | None = None,
) -> Envelope:
    """Wrap a registered data model; ids are random UUIDs unless given (deterministic ids dedupe)."""
    return Envelope(
        id=event_id or str(uuid.uuid4()),
        type=type_of(data),
        source=source,
        subject=subject,
        time=time or datetime.now(UTC),
        correlation_id=correlation_id,
        causation_id=causation_id,
        data=data.model_dump(mode="json", by_alias=False),
    )


def encode(envelope: Envelope) -> bytes:
    return envelope.model_dump_json().encode()


def decode(raw: bytes) -> Envelope:
    """Parse an envelope (not its data); raises ``pydantic.ValidationError`` on malformed input."""
    return Envelope.model_validate_json(raw)


__all__ = ["Envelope", "UnknownEventType", "decode", "encode", "new_envelope"]


def topic_for(envelope: Envelope) -> str:
    """The logical topic ``envelope`` is published on: its type's topic, or for a per-cluster topic
    ``<topic>.<cluster>`` with the cluster its data names (ADR 0004)."""
    name = topic_of(envelope.type)
    if not TOPICS[name].per_cluster:
        return name
    cluster = envelope.data.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        raise ValueError(f"{envelope.type}: data.cluster is required on the per-cluster topic {name}")
    return f"{name}.{cluster}"
