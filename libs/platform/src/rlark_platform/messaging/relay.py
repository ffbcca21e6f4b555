"""The outbox relay: publishes committed outbox rows to Kafka, one active relay per service database.

Concurrency model: one asyncio task. Leadership is the fenced lease ``outbox.relay`` (``db.leader``);
a relay that does not hold it stands by and retries, so several replicas of a service can run and one
publishes. A deposed relay that resumes may publish a batch again (consumers dedupe on the event id), but
its delete is fenced by the lease's epoch and refused. The relay wakes on NOTIFY (sent at commit by
``add_events``) and polls as a fallback. Each round publishes the oldest unpublished rows in ``seq`` order,
waits for the broker's acks (acks=all, idempotent producer), then deletes exactly those rows. A crash
between the ack and the mark republishes them: consumers dedupe on the event id.

The relay owns its producer: opened (``open_producer``) when it first publishes as leader, closed when it steps
down, and replaced after a batch the broker did not take. aiokafka's idempotent producer keeps counting its
sequence numbers past a failed batch (a partition's leader moved, say), and the broker then refuses every later
batch of that producer as out of order, for good (aio-libs/aiokafka#1017): a fresh producer gets a new
producer id and starts its sequences again. The events of the failed batch are still in the outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg
import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from prometheus_client import Counter, Gauge
from rlark_contracts import TopicNames

from rlark_platform.db.leader import DEFAULT_LEASE_TTL_S, LeaderLoop
from rlark_platform.db.pool import Connection, transaction
from rlark_platform.messaging.outbox import NOTIFY_CHANNEL

log = structlog.get_logger(__name__)

LEASE_NAME = "outbox.relay"

PUBLISHED = Counter("rlark_outbox_published_total", "Outbox events published to Kafka", ["service"])
PENDING = Gauge("rlark_outbox_pending", "Unpublished outbox rows seen by the last relay round", ["service"])


class OutboxRelay(LeaderLoop):
    def __init__(
        self,
        pool: asyncpg.Pool,
        open_producer: Callable[[], Awaitable[AIOKafkaProducer]],
        names: TopicNames,
        *,
        service: str,
        batch_size: int = 1000,
        poll_interval_s: float = 1.0,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
    ) -> None:
        super().__init__(
            pool, lease_name=LEASE_NAME, channel=NOTIFY_CHANNEL, name=f"{service} outbox relay",
            poll_interval_s=poll_interval_s, lease_ttl_s=lease_ttl_s,
        )  # fmt: skip
        self._open_producer = open_producer
        self._producer: AIOKafkaProducer | None = None
        self._names = names
        self._service = service
        self._batch_size = batch_size

    async def _lead(self, conn: Connection) -> None:
        while not self._stopping.is_set():
            # The LISTEN lives on ``conn``'s session: a dead one ends leading (and the loop starts again).
            await conn.fetchval("SELECT 1")
            published = await self.publish_once()
            if published < self._batch_size:
                await self._sleep(self._poll_interval_s)

    async def publish_once(self) -> int:
        """Publish one batch of unpublished rows; return how many were published. Only the lease's holder
        deletes what it published (``LeaseLost`` otherwise)."""
        rows = await self._pool.fetch(
            "SELECT seq, topic, key, payload, headers FROM outbox ORDER BY seq LIMIT $1",
            self._batch_size,
        )
        PENDING.labels(self._service).set(len(rows))
        if not rows:
            return 0
        if self._producer is None:
            self._producer = await self._open_producer()
        futures = []
        physical = self._names.physical
        send = self._producer.send
        try:
            for row in rows:
                raw_headers = row["headers"]
                headers = [(k, str(v).encode()) for k, v in raw_headers.items()] if raw_headers else None
                futures.append(
                    await send(
                        physical(row["topic"]), value=row["payload"], key=row["key"].encode(), headers=headers
                    )
                )
            # Waits for every ack; an exception leaves the rows unpublished, to be retried next round.
            await asyncio.gather(*futures)
        except KafkaError as exc:
            log.warning("batch not taken; a fresh producer for the next", loop=self._name, error=repr(exc))
            await self.close()
            raise
        async with transaction(self._pool) as conn:
            await self.lease.fence(conn)
            await conn.execute("DELETE FROM outbox WHERE seq = ANY($1::bigint[])", [r["seq"] for r in rows])
        PUBLISHED.labels(self._service).inc(len(rows))
        return len(rows)

    async def close(self) -> None:
        """Close the relay's producer (a new one opens when it publishes again)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()

    async def _stepped_down(self) -> None:
        await self.close()
