"""The idempotent Kafka producer (acks=all) and topic creation."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from rlark_contracts import TOPICS, TopicNames

from rlark_platform.messaging.access import KafkaAccess


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
    access: KafkaAccess, names: TopicNames, partitions: int = 3, *, owner: str | None = None
) -> list[str]:
    """Create every registered topic and its DLQ when missing (compacted ones with cleanup.policy=compact);
    with ``owner``, only the topics that service produces (what its principal may create).

    Idempotent: existing topics are left alone. Returns the physical names created now.
    """
    wanted: list[NewTopic] = []
    for topic in TOPICS.values():
        if owner is not None and topic.producer != owner:
            continue
        if not topic.per_cluster:  # those come with each cluster (``ensure_cluster_topics``)
            config = {"cleanup.policy": "compact"} if topic.compacted else {}
            wanted.append(NewTopic(names.physical(topic.name), partitions, 1, topic_configs=config))
        if owner is None:  # a DLQ is its consumers' (they may create it), provisioned with the rest
            wanted.append(NewTopic(names.physical(topic.dlq), 1, 1))
    return await _create_missing(access, wanted)


async def ensure_cluster_topics(
    access: KafkaAccess, names: TopicNames, cluster: str, partitions: int = 3
) -> list[str]:
    """Create ``cluster``'s own topic of every per-cluster family when missing (ADR 0004)."""
    wanted = [
        NewTopic(names.for_cluster(t.name, cluster), partitions, 1) for t in TOPICS.values() if t.per_cluster
    ]
    return await _create_missing(access, wanted)


async def _create_missing(access: KafkaAccess, wanted: list[NewTopic]) -> list[str]:
    admin = AIOKafkaAdminClient(**access.client_options(), client_id="rlark-topics")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                logging.getLogger(__name__).info("topics created concurrently")
        # Metadata for new topics propagates asynchronously; wait until they are listed.
        for _ in range(50):
            if {t.name for t in missing} <= set(await admin.list_topics()):
                break
            await asyncio.sleep(0.1)
        return [t.name for t in missing]
    finally:
        await admin.close()
