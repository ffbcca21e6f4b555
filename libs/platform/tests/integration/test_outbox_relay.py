"""Outbox + relay against the real PostgreSQL and Kafka started by the project."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import NotLeaderForPartitionError
from rlark_contracts import TopicNames
from rlark_platform.db import LeaseLost
from rlark_platform.messaging import KafkaAccess, OutboxRelay, add_event, add_events

from .helpers import event_ids, opener, read_topic, sample_event

pytestmark = pytest.mark.integration


async def test_event_in_a_rolled_back_transaction_is_never_published(
    pool: asyncpg.Pool,
    names: TopicNames,
    kafka_admin: KafkaAccess,
) -> None:
    doomed, kept = sample_event("doomed"), sample_event("kept")
    with pytest.raises(RuntimeError, match="boom"):
        async with pool.acquire() as conn, conn.transaction():
            await add_event(conn, doomed)
            raise RuntimeError("boom")
    async with pool.acquire() as conn, conn.transaction():
        await add_event(conn, kept)
    relay = OutboxRelay(pool, opener(kafka_admin), names, service="test", poll_interval_s=0.1)
    async with pool.acquire() as conn:
        assert await relay.lease.acquire(conn)
    assert await relay.publish_once() == 1
    records = await read_topic(kafka_admin, names.physical("keys.keys"), expect=1)
    assert event_ids(records) == [kept.id]
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    await relay.close()


async def test_a_deposed_relay_cannot_delete_what_it_published(
    pool: asyncpg.Pool,
    names: TopicNames,
    kafka_admin: KafkaAccess,
) -> None:
    event = sample_event("deposed")
    async with pool.acquire() as conn, conn.transaction():
        await add_event(conn, event)
    old = OutboxRelay(pool, opener(kafka_admin), names, service="test", poll_interval_s=0.1, lease_ttl_s=30)
    new = OutboxRelay(pool, opener(kafka_admin), names, service="test", poll_interval_s=0.1, lease_ttl_s=30)
    async with pool.acquire() as conn:
        assert await old.lease.acquire(conn)
        # The old relay's lease ran out while it was paused (expired by the database's clock) ...
        await conn.execute("UPDATE leases SET expires_at = clock_timestamp() WHERE name = 'outbox.relay'")
        assert await new.lease.acquire(conn)
    assert new.lease.epoch == (old.lease.epoch or 0) + 1
    # ... and it resumes: it may publish again (consumers dedupe) but its delete is refused.
    with pytest.raises(LeaseLost):
        await old.publish_once()
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 1
    assert await new.publish_once() == 1
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    records = await read_topic(kafka_admin, names.physical("keys.keys"), expect=2)
    assert event_ids(records) == [event.id, event.id]
    await old.close()
    await new.close()


async def test_outbox_write_outside_a_transaction_is_refused(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(RuntimeError, match="share the transaction"):
            await add_event(conn, sample_event())


async def test_relay_is_woken_by_commit_and_keeps_key_order(
    pool: asyncpg.Pool,
    names: TopicNames,
    kafka_admin: KafkaAccess,
) -> None:
    relay = OutboxRelay(
        pool, opener(kafka_admin), names, service="test", poll_interval_s=30
    )  # no polling help
    task = asyncio.create_task(relay.run())
    try:
        for _ in range(50):
            if relay.is_leader:
                break
            await asyncio.sleep(0.05)
        events = [sample_event("same-key") for _ in range(20)]
        async with pool.acquire() as conn, conn.transaction():
            await add_events(conn, events)
        records = await read_topic(kafka_admin, names.physical("keys.keys"), expect=20, timeout_s=10)
        assert event_ids(records) == [e.id for e in events]
    finally:
        relay.stop()
        await task


async def test_only_one_relay_leads(pool: asyncpg.Pool, names: TopicNames, kafka_admin: KafkaAccess) -> None:
    first = OutboxRelay(pool, opener(kafka_admin), names, service="test", poll_interval_s=0.1)
    second = OutboxRelay(pool, opener(kafka_admin), names, service="test", poll_interval_s=0.1)
    tasks = [asyncio.create_task(first.run()), asyncio.create_task(second.run())]
    try:
        await asyncio.sleep(1.0)
        assert [first.is_leader, second.is_leader].count(True) == 1
    finally:
        first.stop()
        second.stop()
        await asyncio.gather(*tasks)


async def test_sigkill_of_the_relay_loses_no_committed_event(
    pool: asyncpg.Pool, names: TopicNames, kafka_admin: KafkaAccess, database_url: str
) -> None:
    """Kill -9 the relay while it publishes, then restart it: every committed event reaches Kafka."""
    script = Path(__file__).with_name("relay_process.py")
    env = {**os.environ, "PYTHONPATH": str(script.parent)}
    committed: list[str] = []

    def start_relay() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, str(script), database_url, kafka_admin.bootstrap, names.prefix, "50"],
            env=env,
            stdout=subprocess.PIPE,
        )

    # Events committed while no relay runs at all, then a relay killed in the middle of publishing.
    for batch in range(10):
        events = [sample_event(f"agg-{batch}-{i}") for i in range(100)]
        async with pool.acquire() as conn, conn.transaction():
            await add_events(conn, events)
        committed += [e.id for e in events]
    relay = start_relay()
    assert relay.stdout is not None
    assert relay.stdout.readline().strip() == b"relay-started"
    for _ in range(200):  # kill it once it has published some but not all
        if await pool.fetchval("SELECT count(*) FROM outbox") < len(committed):
            break
        await asyncio.sleep(0.02)
    relay.send_signal(signal.SIGKILL)
    relay.wait()
    remaining = await pool.fetchval("SELECT count(*) FROM outbox")
    assert remaining > 0, "the relay finished before it was killed; the test proved nothing"

    relay = start_relay()
    try:
        for _ in range(300):
            if await pool.fetchval("SELECT count(*) FROM outbox") == 0:
                break
            await asyncio.sleep(0.1)
        records = await read_topic(kafka_admin, names.physical("keys.keys"), expect=len(committed))
        seen = set(event_ids(records))
        assert set(committed) <= seen, f"{len(set(committed) - seen)} committed events never published"
    finally:
        relay.send_signal(signal.SIGKILL)
        relay.wait()


async def test_a_batch_the_broker_did_not_take_gets_a_fresh_producer_and_is_published_by_it(
    pool: asyncpg.Pool, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    """aiokafka's idempotent producer counts its sequence numbers past a failed batch, and the broker then
    refuses every later batch of it as out of order, for good (seen in `make bench scheduler`: a partition's
    leader moved once and the relay published nothing again)."""
    opened: list[AIOKafkaProducer] = []
    open_producer = opener(kafka_admin)

    async def opening() -> AIOKafkaProducer:
        made = await open_producer()
        if not opened:  # the first one's first send fails as a moved partition leader makes it fail

            async def refused(*_: object, **__: object) -> None:
                raise NotLeaderForPartitionError()

            made.send = refused  # type: ignore[method-assign]
        opened.append(made)
        return made

    event = sample_event("retried")
    async with pool.acquire() as conn, conn.transaction():
        await add_event(conn, event)
    relay = OutboxRelay(pool, opening, names, service="test", poll_interval_s=0.1)
    async with pool.acquire() as conn:
        assert await relay.lease.acquire(conn)
    with pytest.raises(NotLeaderForPartitionError):
        await relay.publish_once()
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 1  # still there, for the next round
    assert await relay.publish_once() == 1
    assert len(opened) == 2
    records = await read_topic(kafka_admin, names.physical("keys.keys"), expect=1)
    assert event_ids(records) == [event.id]
    await relay.close()
