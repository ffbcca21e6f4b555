"""Test helpers: read a topic from the beginning, make sample events."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaConsumer
from rlark_contracts import Envelope, decode, new_envelope
from rlark_contracts.events.keys import KeyAdded


def sample_event(subject: str = "k1", event_id: str | None = None) -> Envelope:
    data = KeyAdded(
        key_id=subject,
        owner="alice",
        name="laptop",
        key_type="ssh-ed25519",
        fingerprint="SHA256:x",
        public_key="ssh-ed25519 AAAA",
    )
    return new_envelope(data, source="test", subject=subject, event_id=event_id)


async def read_topic(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 30.0) -> list[tuple]:  # type: ignore[type-arg]
    """All records of ``topic`` from the start, waiting until at least ``expect`` arrived or timeout."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=f"reader-{uuid.uuid4().hex[:8]}",
    )
    await consumer.start()
    out: list[tuple] = []  # type: ignore[type-arg]
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(out) < expect and asyncio.get_running_loop().time() < deadline:
            batches = await consumer.getmany(timeout_ms=300)
            for records in batches.values():
                out.extend((r.key, r.value, dict(r.headers or ())) for r in records)
        # Drain briefly for duplicates or extras beyond what was expected.
        batches = await consumer.getmany(timeout_ms=500)
        for records in batches.values():
            out.extend((r.key, r.value, dict(r.headers or ())) for r in records)
    finally:
        await consumer.stop()
    return out


def event_ids(records: list[tuple]) -> list[str]:  # type: ignore[type-arg]
    return [decode(value).id for _, value, _ in records]
