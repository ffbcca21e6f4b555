"""Test helpers: read a topic from the beginning, make sample events."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaProducer
from rlark_contracts import Envelope, decode, new_envelope
from rlark_contracts.events.keys import KeyAdded
from rlark_devinfra.testing import read_records
from rlark_platform.messaging import KafkaAccess, create_producer


def sample_event(subject: str = "k1", event_id: str | None = None) -> Envelope:
    data = KeyAdded(
        key_id=subject,
        owner="alice",
        name="laptop",
        key_type="ssh-ed25519",
        fingerprint="SHA256:x",
        public_key="ssh-ed25519 AAAA",
    )
    return new_envelope(data, source="keys", subject=subject, event_id=event_id)


async def read_topic(access: KafkaAccess, topic: str, *, expect: int, timeout_s: float = 30.0) -> list[tuple]:  # type: ignore[type-arg]
    """All records of ``topic`` from the start, waiting until at least ``expect`` arrived or timeout, then
    briefly more for duplicates or extras beyond what was expected."""
    return await read_records(access, topic, expect=expect, timeout_s=timeout_s, settle_s=0.5)


def event_ids(records: list[tuple]) -> list[str]:  # type: ignore[type-arg]
    return [decode(value).id for _, value, _ in records]


def opener(access: KafkaAccess) -> Callable[[], Awaitable[AIOKafkaProducer]]:
    """What a relay opens its producers with: the broker's super user standing in for a service."""
    return functools.partial(create_producer, access, "relay-under-test")
