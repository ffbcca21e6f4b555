"""Benchmark: outbox → relay → Kafka → consumer (inbox + effect) against raw aiokafka produce → consume.

Both paths move the same encoded envelopes through the same broker. Throughput is events per second from the
first write to the last effect; latency is per event, from the commit of its outbox row (or its send) to its
effect committed (or its receipt). A second run paces writes at 1,000 events/s to read latency under load
rather than at saturation.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer
from rlark_contracts import Envelope, TopicNames, decode, encode, new_envelope
from rlark_contracts.events.keys import KeyAdded
from rlark_platform.db import apply_migrations, create_pool
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import (
    PLATFORM_MIGRATIONS_TABLE,
    Consumer,
    KafkaAccess,
    OutboxRelay,
    add_events,
    create_producer,
    ensure_topics,
    platform_migrations,
)
from rlark_platform.messaging.producer import delete_topics_with_prefix


def _event(i: int) -> Envelope:
    data = KeyAdded(
        key_id=f"k{i}",
        owner="bench",
        name=f"key-{i}",
        key_type="ssh-ed25519",
        fingerprint="SHA256:bench",
        public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA bench",
    )
    return new_envelope(data, source="keys", subject=f"k{i % 64}")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def raw_aiokafka(access: KafkaAccess, count: int, rate: float | None = None) -> dict[str, float]:
    names = TopicNames(f"bench{uuid.uuid4().hex[:6]}.")
    await ensure_topics(access, names)
    topic = names.physical("keys.keys")
    producer = await create_producer(access, "bench-raw")
    consumer = AIOKafkaConsumer(
        topic,
        **access.client_options(),
        auto_offset_reset="earliest",
        group_id=f"bench-{uuid.uuid4().hex[:6]}",
        enable_auto_commit=False,
    )
    await consumer.start()
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    events = [_event(i) for i in range(count)]

    async def receive() -> None:
        while len(latencies) < count:
            batches = await consumer.getmany(timeout_ms=200, max_records=500)
            now = time.perf_counter()
            for records in batches.values():
                for record in records:
                    envelope = decode(record.value)
                    latencies.append(now - sent_at[envelope.id])
            if batches:
                await consumer.commit()

    receiver = asyncio.create_task(receive())
    started = time.perf_counter()
    futures = []
    for i, envelope in enumerate(events):
        if rate:
            await _pace(started, i, rate)
        sent_at[envelope.id] = time.perf_counter()
        futures.append(await producer.send(topic, encode(envelope), key=envelope.subject.encode()))
    await asyncio.gather(*futures)
    await receiver
    elapsed = time.perf_counter() - started
    await consumer.stop()
    await producer.stop()
    # Each run's topics (every registered topic under its own prefix) would otherwise pile up on the
    # broker and slow every later run and test.
    await delete_topics_with_prefix(access, names.prefix)
    return _summary(count, elapsed, latencies)


async def _pace(started: float, i: int, rate: float) -> None:
    due = started + i / rate
    delay = due - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def _summary(count: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    return {
        "events": count,
        "events_per_s": count / elapsed,
        "p50_ms": _percentile(latencies, 0.50) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
    }


async def outbox_pipeline(
    database_url: str, access: KafkaAccess, count: int, rate: float | None = None, batch: int = 100
) -> dict[str, float]:
    """Writes in transactions of ``batch`` events (or one per tick when paced) through the whole path."""
    conn = await asyncpg.connect(database_url)
    await apply_migrations(conn, platform_migrations(), table=PLATFORM_MIGRATIONS_TABLE)
    await conn.execute("TRUNCATE inbox, outbox")
    await conn.close()
    pool = await create_pool(database_url, min_size=2, max_size=6)
    names = TopicNames(f"bench{uuid.uuid4().hex[:6]}.")
    await ensure_topics(access, names)
    dlq = await create_producer(access, "bench-dlq")
    committed_at: dict[str, float] = {}
    handled_at: dict[str, float] = {}

    async def effect(_conn: Connection, envelope: Envelope, payload: Any) -> None:
        # The effect under test is the platform's own: the inbox claim in the consumer's transaction. The
        # raw baseline does no work per event either. (Latency counts to the handler call; the commit
        # follows within the same batch.) Only the arrival is noted here: on a loaded machine an event
        # can reach the handler before the writer's coroutine has resumed to note its commit time.
        handled_at.setdefault(envelope.id, time.perf_counter())

    relay = OutboxRelay(
        pool,
        functools.partial(create_producer, access, "bench-relay"),
        names,
        service="bench",
        poll_interval_s=0.05,
    )
    consumer = Consumer(
        name="bench",
        topics=["keys.keys"],
        handlers={KeyAdded: effect},
        pool=pool,
        kafka=access,
        names=names,
        dlq_producer=dlq,
        max_records=500,
    )
    tasks = [asyncio.create_task(relay.run()), asyncio.create_task(consumer.run())]
    await asyncio.wait_for(consumer.ready.wait(), 30)
    events = [_event(i) for i in range(count)]
    step = 1 if rate else batch
    started = time.perf_counter()
    for i in range(0, count, step):
        if rate:
            await _pace(started, i, rate)
        chunk = events[i : i + step]
        async with pool.acquire() as writer:
            async with writer.transaction():
                await add_events(writer, chunk)
            now = time.perf_counter()  # committed (before the connection's reset on release)
        for envelope in chunk:
            committed_at[envelope.id] = now
    deadline = time.perf_counter() + 120
    while len(handled_at) < count and time.perf_counter() < deadline:  # noqa: ASYNC110 (polls a counter)
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    relay.stop()
    consumer.stop()
    await asyncio.gather(*tasks)
    await dlq.stop()
    await pool.close()
    await delete_topics_with_prefix(access, names.prefix)
    if len(handled_at) < count:
        raise RuntimeError(f"only {len(handled_at)}/{count} events reached the consumer")
    # An event handled before its writer noted the commit counts as 0 ms rather than as lost.
    latencies = [max(handled_at[key] - committed_at[key], 0.0) for key in handled_at]
    return _summary(count, elapsed, latencies)


async def run(database_url: str, access: KafkaAccess, count: int = 20000) -> dict[str, dict[str, float]]:
    return {
        "raw_aiokafka": await raw_aiokafka(access, count),
        "outbox_pipeline": await outbox_pipeline(database_url, access, count),
        "raw_aiokafka_at_1000_per_s": await raw_aiokafka(access, 5000, rate=1000),
        "outbox_pipeline_at_1000_per_s": await outbox_pipeline(database_url, access, 5000, rate=1000),
    }
