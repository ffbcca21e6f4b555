"""Public events from Kafka for one SSE connection: a consumer of its own, no group, from the end.

Each connection gets its own ``AIOKafkaConsumer`` without a consumer group (nothing to rebalance, no
offsets stored), assigned every partition of the public topics and positioned at their ends *before* the
stream reports ``ready`` — so a client that saw ``ready`` misses nothing produced afterwards. Records are
decoded as envelopes and filtered by ``domain.events.visible``; undecodable ones, and events whose
``source`` is not their topic's producer, are skipped (the owning services' DLQs deal with them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import structlog
from aiokafka import AIOKafkaConsumer
from pydantic import ValidationError
from rlark_contracts import Envelope, TopicNames, decode
from rlark_platform.identity import Caller
from rlark_platform.messaging import KafkaAccess

from rlark_gateway.domain.events import PUBLIC_TOPICS, visible

log = structlog.get_logger(__name__)

ASSIGN_TIMEOUT_S = 10.0


def public_event(envelope: Envelope, topic: str) -> dict[str, Any]:
    """What a subscriber sees of an envelope."""
    return {
        "id": envelope.id,
        "type": envelope.type,
        "topic": topic,
        "subject": envelope.subject,
        "time": envelope.time.isoformat(),
        "data": envelope.data,
    }


async def open_consumer(access: KafkaAccess, names: TopicNames) -> AIOKafkaConsumer:
    """A started consumer positioned at the end of every partition of the public topics."""
    consumer = AIOKafkaConsumer(
        **access.client_options(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="latest",
        client_id="rlark-gateway-events",
    )
    await consumer.start()
    try:
        # Without a group, subscribing assigns every partition of these topics once metadata arrives.
        consumer.subscribe([names.physical(topic) for topic in PUBLIC_TOPICS])
        async with asyncio.timeout(ASSIGN_TIMEOUT_S):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=50)  # drives the metadata update; fetches nothing yet
        partitions = sorted(consumer.assignment())
        await consumer.seek_to_end(*partitions)
        for partition in partitions:
            await consumer.position(partition)  # resolve now, not on the first fetch
    except BaseException:
        await close_consumer(consumer)
        raise
    return consumer


async def visible_events(
    consumer: AIOKafkaConsumer,
    names: TopicNames,
    caller: Caller,
    *,
    job_id: str | None,
    closing: asyncio.Event,
) -> AsyncIterator[dict[str, Any]]:
    """Events ``caller`` may see, as they arrive, until ``closing`` is set."""
    while not closing.is_set():
        batches = await consumer.getmany(timeout_ms=500, max_records=500)
        for partition, records in batches.items():
            topic = names.logical(partition.topic)
            for record in records:
                if record.value is None:
                    continue
                try:
                    envelope = decode(record.value)
                except ValidationError:
                    continue
                if names.foreign_source(partition.topic, envelope.source):
                    continue  # not from the topic's producer (ADR 0004): never shown
                if visible(topic, envelope.type, envelope.data, caller, job_id):
                    yield public_event(envelope, topic)


async def close_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop ``consumer`` even while the surrounding task is being cancelled (client went away)."""
    with anyio.CancelScope(shield=True):
        await consumer.stop()
