"""The consumer loop against the real broker and database: exactly-once effects, DLQ, carry on."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY
from rlark_contracts import Envelope, TopicNames, encode
from rlark_contracts.events.keys import KeyAdded
from rlark_platform.messaging import Consumer, KafkaAccess, PoisonMessage

from .helpers import read_topic, sample_event

pytestmark = pytest.mark.integration


async def record_effect(conn: asyncpg.Connection, envelope: Envelope, payload: KeyAdded) -> None:
    if payload.name == "poison":
        raise PoisonMessage("this key can never be applied")
    await conn.execute(
        "INSERT INTO effects (event_id, subject) VALUES ($1, $2)", envelope.id, envelope.subject
    )


def make_consumer(pool: asyncpg.Pool, producer: Any, names: TopicNames, access: KafkaAccess) -> Consumer:
    return Consumer(
        name="test-consumer",
        topics=["keys.keys"],
        handlers={KeyAdded: record_effect},
        pool=pool,
        kafka=access,
        names=names,
        dlq_producer=producer,
    )


RESULTS = ("applied", "duplicate", "skipped", "dead_lettered")


def handled(result: str | None = None) -> float:
    """Records the test consumer has handled so far (every result, or one): the counter only grows."""
    return sum(
        REGISTRY.get_sample_value("rlark_events_consumed_total", {"consumer": "test-consumer", "result": r})
        or 0
        for r in RESULTS
        if result in (None, r)
    )


async def run_until(pool: asyncpg.Pool, consumer: Consumer, records: int, timeout_s: float = 60) -> None:
    """Run `consumer` until it has handled `records` more records — applied, duplicate, skipped or dead
    letter — so a test checks what a consumer did with every record it was given, never after a guess."""
    target = handled() + records
    task = asyncio.create_task(consumer.run())
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while handled() < target:
            if task.done() or asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"the consumer handled {handled() - target + records:g} of {records} records"
                )
            await asyncio.sleep(0.05)
    finally:
        consumer.stop()
        await task


async def test_each_event_applies_once_even_when_delivered_twice(
    pool: asyncpg.Pool, producer: Any, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    events = [sample_event(f"k{i}") for i in range(30)]
    topic = names.physical("keys.keys")
    for e in events:
        await producer.send_and_wait(topic, encode(e), key=e.subject.encode())
    for e in events[:10]:  # Kafka delivers these a second time
        await producer.send_and_wait(topic, encode(e), key=e.subject.encode())
    duplicates = handled("duplicate")
    await run_until(pool, make_consumer(pool, producer, names, kafka_admin), records=40)
    assert handled("duplicate") == duplicates + 10  # the second deliveries were read, and not applied
    rows = await pool.fetch("SELECT event_id, count(*) AS n FROM effects GROUP BY event_id")
    assert {r["event_id"] for r in rows} == {e.id for e in events}
    assert all(r["n"] == 1 for r in rows)
    # Everything read: no record behind the topic's high watermark.
    lag = {"consumer": "test-consumer", "topic": "keys.keys"}
    assert REGISTRY.get_sample_value("rlark_consumer_lag", lag) == 0


async def test_replay_after_a_crash_before_the_offset_commit_changes_nothing(
    pool: asyncpg.Pool, producer: Any, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    events = [sample_event(f"k{i}") for i in range(10)]
    for e in events:
        await producer.send_and_wait(names.physical("keys.keys"), encode(e), key=e.subject.encode())
    await run_until(pool, make_consumer(pool, producer, names, kafka_admin), records=10)
    # A fresh consumer group has no committed offsets, as after a crash between the database commit and
    # the offset commit: the same consumer (same inbox name) replays the whole topic.
    again = Consumer(
        name="test-consumer",
        topics=["keys.keys"],
        handlers={KeyAdded: record_effect},
        pool=pool,
        kafka=kafka_admin,
        names=names,
        dlq_producer=producer,
        group_id=names.prefix + "replay",
    )
    duplicates = handled("duplicate")
    await run_until(pool, again, records=10)
    assert handled("duplicate") == duplicates + 10  # all ten replayed records were read again
    assert await pool.fetchval("SELECT count(*) FROM effects") == 10
    assert await pool.fetchval("SELECT count(*) FROM inbox WHERE consumer = 'test-consumer'") == 10


async def test_poison_message_goes_to_the_dlq_with_its_error_and_the_consumer_goes_on(
    pool: asyncpg.Pool, producer: Any, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    topic = names.physical("keys.keys")
    good_before, good_after = sample_event("before"), sample_event("after")
    poison = sample_event("p").model_copy(update={"data": {**sample_event("p").data, "name": "poison"}})
    await producer.send_and_wait(topic, encode(good_before), key=b"before")
    await producer.send_and_wait(topic, b"{not json at all", key=b"garbage")
    await producer.send_and_wait(topic, encode(poison), key=b"p")
    await producer.send_and_wait(topic, encode(good_after), key=b"after")
    counted = {"consumer": "test-consumer", "topic": "keys.keys"}
    dead_before = REGISTRY.get_sample_value("rlark_events_dead_lettered_total", counted) or 0
    await run_until(pool, make_consumer(pool, producer, names, kafka_admin), records=4)
    applied = {r["subject"] for r in await pool.fetch("SELECT subject FROM effects")}
    assert applied == {"before", "after"}
    dead = await read_topic(kafka_admin, names.physical("keys.keys.dlq"), expect=2)
    assert len(dead) == 2
    assert REGISTRY.get_sample_value("rlark_events_dead_lettered_total", counted) == dead_before + 2
    by_key = {key: headers for key, _, headers in dead}
    assert by_key[b"garbage"][b"rlark-error-kind".decode()] == b"malformed_envelope"
    assert b"never be applied" in by_key[b"p"]["rlark-error"]
    assert by_key[b"p"]["rlark-original-topic"] == b"keys.keys"
    # The poison event was not claimed in the inbox: a fix and a replay can still apply it.
    assert await pool.fetchval("SELECT count(*) FROM inbox WHERE event_id = $1", poison.id) == 0


async def test_transient_errors_are_retried_not_dead_lettered(
    pool: asyncpg.Pool, producer: Any, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    failures = {"left": 2}

    async def flaky(conn: asyncpg.Connection, envelope: Envelope, payload: KeyAdded) -> None:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise ConnectionResetError("database went away")
        await record_effect(conn, envelope, payload)

    event = sample_event("flaky")
    await producer.send_and_wait(names.physical("keys.keys"), encode(event), key=b"flaky")
    consumer = Consumer(
        name="test-consumer",
        topics=["keys.keys"],
        handlers={KeyAdded: flaky},
        pool=pool,
        kafka=kafka_admin,
        names=names,
        dlq_producer=producer,
        retry_initial_s=0.01,
    )
    await run_until(pool, consumer, records=1)
    assert failures["left"] == 0
    assert await pool.fetchval("SELECT count(*) FROM effects") == 1
    assert await read_topic(kafka_admin, names.physical("keys.keys.dlq"), expect=0, timeout_s=1) == []


async def test_an_event_whose_source_is_not_the_topics_producer_goes_to_the_dlq_and_changes_nothing(
    pool: asyncpg.Pool, producer: Any, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    topic = names.physical("keys.keys")
    forged = sample_event("forged").model_copy(update={"source": "scheduler"})
    after = sample_event("after")
    await producer.send_and_wait(topic, encode(forged), key=b"forged")
    await producer.send_and_wait(topic, encode(after), key=b"after")
    await run_until(pool, make_consumer(pool, producer, names, kafka_admin), records=2)
    assert {r["subject"] for r in await pool.fetch("SELECT subject FROM effects")} == {"after"}
    dead = await read_topic(kafka_admin, names.physical("keys.keys.dlq"), expect=1)
    assert [(key, headers["rlark-error-kind"]) for key, _, headers in dead] == [
        (b"forged", b"source_mismatch")
    ]
    assert b"'scheduler' is not the producer of keys.keys" in dead[0][2]["rlark-error"]
    assert await pool.fetchval("SELECT count(*) FROM inbox WHERE event_id = $1", forged.id) == 0
