"""A consumer whose aiokafka client breaks after it started is replaced, not the service stopped (ADR 0004:
the broker closes every connection at the end of its login lifetime, and aiokafka 0.14's group
coordinator can fail an assertion when that happens mid-rebalance)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from rlark_contracts import TopicNames, encode
from rlark_platform.messaging import KafkaAccess
from rlark_platform.messaging import consumer as consumer_module

from .helpers import sample_event
from .test_consumer_inbox import make_consumer, run_until

pytestmark = pytest.mark.integration


class BreaksOnce(AIOKafkaConsumer):  # type: ignore[misc]
    """The real consumer, whose first ``getmany`` fails as aiokafka's broken coordinator makes it fail."""

    started = 0

    async def start(self) -> None:
        type(self).started += 1
        await super().start()

    async def getmany(self, *partitions: Any, **kwargs: Any) -> Any:
        if type(self).started == 1:
            raise KafkaError("Unexpected error during coordination AssertionError()")
        return await super().getmany(*partitions, **kwargs)


async def test_a_broken_kafka_consumer_is_replaced_and_the_events_still_apply_once(
    pool: asyncpg.Pool,
    producer: Any,
    names: TopicNames,
    kafka_admin: KafkaAccess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_module, "AIOKafkaConsumer", BreaksOnce)
    events = [sample_event(f"k{i}") for i in range(5)]
    for e in events:
        await producer.send_and_wait(names.physical("keys.keys"), encode(e), key=e.subject.encode())
    await run_until(pool, make_consumer(pool, producer, names, kafka_admin), records=5)
    assert BreaksOnce.started == 2  # the broken one, then its replacement
    rows = await pool.fetch("SELECT event_id, count(*) AS n FROM effects GROUP BY event_id")
    assert {r["event_id"] for r in rows} == {e.id for e in events}
    assert all(r["n"] == 1 for r in rows)
