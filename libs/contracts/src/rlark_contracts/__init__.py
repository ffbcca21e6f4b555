"""RLark's event contracts: the envelope, the topic registry and every event type.

This is the only code services share. Pydantic only, no I/O. Read tolerantly (unknown fields in event
data are ignored), change additively with defaults, and give a breaking change a new ``.v2`` type.
"""

from rlark_contracts import events  # registers every event type
from rlark_contracts.envelope import Envelope, decode, encode, new_envelope, topic_for
from rlark_contracts.registry import (
    EVENT_TYPES,
    UnknownEventType,
    data_model,
    event,
    topic_of,
)
from rlark_contracts.topics import TOPICS, Topic, TopicNames

__all__ = [
    "EVENT_TYPES",
    "TOPICS",
    "Envelope",
    "Topic",
    "TopicNames",
    "UnknownEventType",
    "data_model",
    "decode",
    "encode",
    "event",
    "events",
    "new_envelope",
    "topic_for",
    "topic_of",
]
