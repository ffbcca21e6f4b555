"""Helpers for the netdomain integration tests: publish events as other services would, and
follow the topics netdomain publishes on."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import BaseModel
from rlark_contracts import Envelope, TopicNames, decode, encode, new_envelope, topic_of
from rlark_platform.messaging import KafkaAccess


async def publish(producer: AIOKafkaProducer, names: TopicNames, envelope: Envelope) -> None:
    """Send an envelope to its registered topic, keyed by subject, as a relay would."""
    topic = names.physical(topic_of(envelope.type))
    await producer.send_and_wait(topic, value=encode(envelope), key=envelope.subject.encode())


def event(data: BaseModel, subject: str, source: str = "test") -> Envelope:
    return new_envelope(data, source=source, subject=subject)


async def report_as_agent(
    producer: AIOKafkaProducer, names: TopicNames, data: BaseModel, cluster: str
) -> None:
    """Publish ``data`` as ``cluster``'s agent would: on its own topic, from ``agent/<cluster>``, keyed by it."""
    await producer.send_and_wait(
        names.for_cluster("agent.reports", cluster),
        value=encode(event(data, cluster, source=f"agent/{cluster}")),
        key=cluster.encode(),
    )


class TopicFollower:
    """Every event of some topics from their beginning, kept in arrival order (a throw-away
    consumer group; nothing is committed)."""

    def __init__(self, access: KafkaAccess, names: TopicNames, *topics: str) -> None:
        self._access = access
        self._topics = [names.physical(t) for t in topics]
        self._consumer: AIOKafkaConsumer | None = None
        self.events: list[Envelope] = []

    async def __aenter__(self) -> TopicFollower:
        self._consumer = AIOKafkaConsumer(
            *self._topics,
            **self._access.client_options(),
            group_id=f"follower-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await self._consumer.start()
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while not self._consumer.assignment():
                assert asyncio.get_running_loop().time() < deadline, "no partitions assigned"
                for records in (await self._consumer.getmany(timeout_ms=100)).values():
                    self.events += [decode(r.value) for r in records]
        except BaseException:
            await self._consumer.stop()
            raise
        return self

    async def __aexit__(self, *_: Any) -> None:
        assert self._consumer is not None
        await self._consumer.stop()

    async def wait_for(
        self, predicate: Callable[[list[Envelope]], Any], timeout_s: float = 30.0, what: str = "events"
    ) -> list[Envelope]:
        """Poll until ``predicate(events)`` is truthy; fail with what arrived after ``timeout_s``."""
        assert self._consumer is not None
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not predicate(self.events):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; got {[e.type for e in self.events]}")
            for records in (await self._consumer.getmany(timeout_ms=200)).values():
                self.events += [decode(r.value) for r in records]
        return self.events

    def of_type(self, type_name: str, **data: Any) -> list[Envelope]:
        return [
            e for e in self.events if e.type == type_name and all(e.data.get(k) == v for k, v in data.items())
        ]

    async def settle(self, seconds: float = 1.0) -> None:
        """Keep reading for ``seconds`` (to see that nothing more arrives)."""
        assert self._consumer is not None
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            for records in (await self._consumer.getmany(timeout_ms=200)).values():
                self.events += [decode(r.value) for r in records]
