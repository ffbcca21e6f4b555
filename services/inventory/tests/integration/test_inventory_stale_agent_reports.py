"""Reports of a deposed agent (ADR 0018) through the real consumer, PostgreSQL and Kafka: once a report of a
newer lease epoch was read for a cluster, the platform's consumer refuses reports of older epochs; reports
without an epoch (agents before leases) are applied as before."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaProducer
from inventory_it_support import Agent, eventually, node
from rlark_contracts import TopicNames
from rlark_contracts.events.agent import NodesObserved
from rlark_devinfra.testing import RunningService
from rlark_platform.identity import Role

pytestmark = pytest.mark.integration


async def register(svc: RunningService, name: str) -> None:
    async with svc.client("root", Role.ADMIN) as admin:
        created = await admin.post(
            "/api/v1/clusters", json={"name": name, "runtime": "local", "category": "cloud"}
        )
    assert created.status_code == 201, created.text


async def test_reports_of_a_deposed_epoch_are_refused_and_newer_ones_applied(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await register(inventory, "solo")
    agent = Agent(producer, names, "solo")
    await agent.observe([node("old-1")], complete=False)  # an agent before leases: no epoch, applied
    await agent.heartbeat(lease_epoch=2)  # the new holder (epoch 2) has spoken
    # The deposed holder (epoch 1) still reports a node, then the new one reports another.
    await agent.send(agent_nodes("ghost", epoch=1))
    await agent.send(agent_nodes("fresh", epoch=2))

    async def listed() -> set[str]:
        async with inventory.client() as user:
            found = (await user.get("/api/v1/nodes", params={"cluster": "solo"})).json()
        return {n["name"] for n in found["items"]}

    # The fresh report comes after the stale one on the cluster's single partition: once it shows, the
    # stale one was read — and refused.
    seen = await eventually(listed, lambda names: "fresh" in names)
    assert "old-1" in seen
    assert "ghost" not in seen


def agent_nodes(name: str, *, epoch: int) -> NodesObserved:
    return NodesObserved(
        cluster="solo", nodes=[node(name)], complete=False, observed_at=datetime.now(UTC), lease_epoch=epoch
    )
