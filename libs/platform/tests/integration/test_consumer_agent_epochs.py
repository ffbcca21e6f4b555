"""Reports of a deposed agent are refused by the consumer loop itself (ADR 0018), against the real broker
and database: a consumer that handles only worker statuses still learns the cluster's new lease epoch from a
heartbeat it does not handle (no inbox row for it), refuses a later status of the older epoch, and applies
statuses of the current epoch and of agents that send none."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY
from pydantic import BaseModel
from rlark_contracts import Envelope, TopicNames, encode, new_envelope
from rlark_contracts.events.agent import HeartbeatSent, WorkerStatusChanged
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import Consumer, KafkaAccess

pytestmark = pytest.mark.integration

NAME = "epoch-consumer"
CLUSTER = "lab"


async def record_status(conn: Connection, envelope: Envelope, payload: WorkerStatusChanged) -> None:
    await conn.execute(
        "INSERT INTO effects (event_id, subject) VALUES ($1, $2)", envelope.id, payload.worker_id
    )


def counted(result: str) -> float:
    return REGISTRY.get_sample_value("rlark_events_consumed_total", {"consumer": NAME, "result": result}) or 0


def report(data: BaseModel) -> bytes:
    return encode(new_envelope(data, source=f"agent/{CLUSTER}", subject=CLUSTER))


def status(worker: str, epoch: int | None) -> bytes:
    return report(
        WorkerStatusChanged(
            cluster=CLUSTER,
            job_id="j1",
            worker_id=worker,
            phase="Running",
            at=datetime.now(UTC),
            lease_epoch=epoch,
        )
    )


async def test_a_heartbeat_of_a_newer_epoch_makes_the_consumer_refuse_the_older_epochs_statuses(
    pool: asyncpg.Pool, producer: Any, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    topic = names.for_cluster("agent.reports", CLUSTER)
    sent = [
        status("w1", 1),  # the first holder
        report(HeartbeatSent(cluster=CLUSTER, sent_at=datetime.now(UTC), lease_epoch=2)),  # the new holder
        status("w2", 1),  # the deposed holder, still talking
        status("w3", None),  # an agent from before leases
        status("w4", 2),
    ]
    for raw in sent:
        await producer.send_and_wait(topic, raw, key=CLUSTER.encode())
    before = {r: counted(r) for r in ("applied", "skipped", "stale", "duplicate")}
    consumer = Consumer(
        name=NAME,
        topics=["agent.reports"],
        handlers={WorkerStatusChanged: record_status},
        pool=pool,
        kafka=kafka_admin,
        names=names,
        dlq_producer=producer,
    )
    task = asyncio.create_task(consumer.run())
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while sum(counted(r) - before[r] for r in before) < len(sent):
            assert not task.done(), "the consumer ended"
            assert asyncio.get_running_loop().time() < deadline, "records not all handled"
            await asyncio.sleep(0.05)
    finally:
        consumer.stop()
        await task

    assert {r: counted(r) - before[r] for r in before} == {
        "applied": 3,
        "skipped": 1,
        "stale": 1,
        "duplicate": 0,
    }
    async with pool.acquire() as conn:
        applied = {row["subject"] for row in await conn.fetch("SELECT subject FROM effects")}
        mark = await conn.fetchval(
            "SELECT epoch FROM agent_epochs WHERE consumer = $1 AND cluster = $2", NAME, CLUSTER
        )
        inbox = await conn.fetchval("SELECT count(*) FROM inbox WHERE consumer = $1", NAME)
    assert applied == {"w1", "w3", "w4"}
    assert mark == 2
    assert (
        inbox == 4
    )  # every status is claimed (the stale one too: a replay stays refused); the heartbeat is not
