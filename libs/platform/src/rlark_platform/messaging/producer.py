"""The idempotent Kafka producer (acks=all) and topic creation."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer, errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from rlark_contracts import TOPICS, TopicNames

from rlark_platform.messaging.access import KafkaAccess
from rlark_platform.messaging.layout import TopicLayout


async def create_producer(access: KafkaAccess, client_id: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        **access.client_options(),
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        linger_ms=2,
        max_batch_size=1 << 20,
        request_timeout_ms=30000,
    )
    await producer.start()
    return producer


def _raise_refusals(response: Any) -> None:
    """The broker answers a topic it refused with an error code per topic, not an exception: raise one
    naming the topic (one created meanwhile by another process is fine)."""
    refused = []
    for topic, code, *message in getattr(response, "topic_errors", []):
        if code in (0, TopicAlreadyExistsError.errno):
            continue
        error = errors.for_code(code)
        detail = (message[0] if message and message[0] else "") or error.description
        if error is errors.InvalidReplicationFactorError:
            detail += " (RLARK_TOPIC_REPLICATION_FACTOR is more than the brokers this cluster has)"
        refused.append(f"{topic}: {error.__name__}: {detail}")
    if refused:
        raise RuntimeError("the broker refused to create topics: " + "; ".join(refused))


async def delete_topics_with_prefix(access: KafkaAccess, prefix: str) -> int:
    """Delete every topic whose name starts with ``prefix`` (test isolation prefixes only)."""
    if not prefix:
        raise ValueError("refusing to delete topics without a prefix")
    admin = AIOKafkaAdminClient(**access.client_options(), client_id="rlark-topics")
    await admin.start()
    try:
        doomed = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if doomed:
            await admin.delete_topics(doomed)
        return len(doomed)
    finally:
        await admin.close()


async def ensure_topics(
    access: KafkaAccess, names: TopicNames, layout: TopicLayout | None = None, *, owner: str | None = None
) -> list[str]:
    """Create every registered topic and its DLQ when missing (compacted ones with cleanup.policy=compact),
    laid out by ``layout``; with ``owner``, only the topics that service produces (what its principal may
    create).

    Idempotent: existing topics are left alone. Returns the physical names created now.
    """
    layout = layout or TopicLayout()
    wanted: list[NewTopic] = []
    for topic in TOPICS.values():
        if owner is not None and topic.producer != owner:
            continue
        if not topic.per_cluster:  # those come with each cluster (``ensure_cluster_topics``)
            wanted.append(layout.topic(names.physical(topic.name), topic.name, compacted=topic.compacted))
        if owner is None:  # a DLQ is its consumers' (they may create it), provisioned with the rest
            wanted.append(layout.dead_letters(names.physical(topic.dlq)))
    return await _create_missing(access, wanted)


async def ensure_cluster_topics(
    access: KafkaAccess, names: TopicNames, cluster: str, layout: TopicLayout | None = None
) -> list[str]:
    """Create ``cluster``'s own topic of every per-cluster family when missing (ADR 0004)."""
    layout = layout or TopicLayout()
    wanted = [
        layout.topic(names.for_cluster(t.name, cluster), t.name) for t in TOPICS.values() if t.per_cluster
    ]
    return await _create_missing(access, wanted)


async def _create_missing(access: KafkaAccess, wanted: list[NewTopic]) -> list[str]:
    admin = AIOKafkaAdminClient(**access.client_options(), client_id="rlark-topics")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            response = await admin.create_topics(missing)
            _raise_refusals(response)
        # Metadata for new topics propagates asynchronously; wait until they are listed.
        for _ in range(50):
            if {t.name for t in missing} <= set(await admin.list_topics()):
                break
            await asyncio.sleep(0.1)
        return [t.name for t in missing]
    finally:
        await admin.close()
