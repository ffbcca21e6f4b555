"""Helpers for the inventory integration tests: a simulated agent that publishes reports on its cluster's
topic of the real broker, a topic reader, and polling until the service shows what a test waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from pydantic import BaseModel
from rlark_contracts import Envelope, TopicNames, encode, new_envelope
from rlark_contracts.events.agent import (
    HeartbeatSent,
    NodeObservation,
    NodesObserved,
    WorkerStatusChanged,
)
from rlark_devinfra.testing import RunningService, read_records
from rlark_devinfra.testing import read_events as read_events  # re-exported for the tests
from rlark_platform.messaging import KafkaAccess

AGENT_TIMEOUT_S = 1.5
"""The inventory's liveness timeout in these tests (short, so offline detection is quick)."""

T = TypeVar("T")


def node(name: str, **fields: Any) -> NodeObservation:
    defaults: dict[str, Any] = {
        "gpu_count": 8,
        "gpu_model": "A100",
        "gpu_allocatable": 8,
        "cpu_millis": 64000,
        "cpu_allocatable_millis": 62000,
        "memory_bytes": 512 << 30,
        "memory_allocatable_bytes": 500 << 30,
        "addresses": ["192.168.1.10"],
        "labels": {"rlark.io/gpu-model": "A100"},
    }
    return NodeObservation(name=name, **{**defaults, **fields})


class Agent:
    """Publishes reports for ``cluster`` on its own topic ``agent.reports.<cluster>``, like a tunnel-agent
    (the tests' producer, the broker's admin, stands in for the agent's principal; the broker creates the
    topic on first use, after the consumer subscribed by pattern)."""

    def __init__(self, producer: AIOKafkaProducer, names: TopicNames, cluster: str):
        self.producer = producer
        self.names = names
        self.cluster = cluster

    async def send(self, data: BaseModel, *, source: str | None = None) -> Envelope:
        """Publish ``data`` on this cluster's topic (as ``source``: by default this cluster's agent)."""
        envelope = new_envelope(data, source=source or f"agent/{self.cluster}", subject=self.cluster)
        await self.producer.send_and_wait(
            self.names.for_cluster("agent.reports", self.cluster),
            value=encode(envelope),
            key=self.cluster.encode(),
        )
        return envelope

    async def heartbeat(self, **kwargs: Any) -> Envelope:
        return await self.send(
            HeartbeatSent(cluster=self.cluster, sent_at=datetime.now(UTC), agent_version="test", **kwargs)
        )

    async def observe(self, nodes: list[NodeObservation], *, complete: bool = True) -> Envelope:
        return await self.send(
            NodesObserved(cluster=self.cluster, nodes=nodes, complete=complete, observed_at=datetime.now(UTC))
        )

    async def worker(self, worker_id: str, node_name: str, phase: str, **kwargs: Any) -> Envelope:
        return await self.send(
            WorkerStatusChanged(
                cluster=self.cluster,
                job_id=kwargs.pop("job_id", "job-1"),
                worker_id=worker_id,
                node=node_name,
                phase=phase,
                at=datetime.now(UTC),
                **kwargs,
            )
        )


async def eventually(
    probe: Callable[[], Awaitable[T]], until: Callable[[T], bool], *, timeout_s: float = 20.0
) -> T:
    """Call ``probe`` until ``until(result)`` holds; fail with the last result after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = await probe()
        if until(result):
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s; last result: {result!r}")
        await asyncio.sleep(0.1)


async def read_raw(access: KafkaAccess, topic: str, *, expect: int, timeout_s: float = 20.0) -> list[Any]:
    """Raw records (value, headers) of a physical topic, once ``expect`` arrived (or the timeout)."""
    records = await read_records(access, topic, expect=expect, timeout_s=timeout_s, settle_s=0)
    return [(value, headers) for _, value, headers in records]


async def beat_until_online(agent: Agent, svc: RunningService) -> dict[str, Any]:
    """Heartbeat as a running agent does until inventory shows its cluster online; returns the cluster.

    One beat is not enough: the consumer finds a new cluster's topic on its next metadata refresh (about
    two seconds), and a beat older than the tests' short ``AGENT_TIMEOUT_S`` by then brings nothing online.
    """

    async def beat() -> dict[str, Any]:
        await agent.heartbeat()
        async with svc.client() as user:
            found: dict[str, Any] = (await user.get(f"/api/v1/clusters/{agent.cluster}")).json()
        return found

    return await eventually(beat, lambda c: bool(c.get("online")))
