"""True GPU accounting through inventory and the scheduler (real PostgreSQL and Kafka, both services).

An agent reports a node whose GPUs a pod RLark did not create holds: the inventory shows them as
allocated, the scheduler places elsewhere, then makes the next job wait with a reason naming who uses
the GPUs, and places it once the other pod is gone. RLark's own worker, which the agent also reports
as allocated, is never counted twice.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from rlark_contracts import TopicNames
from rlark_contracts.events.agent import HeartbeatSent, NodeObservation, NodesObserved
from rlark_devinfra.testing import RunningService, TopicReader, running_service, settings_for
from rlark_inventory.main import DEFINITION as INVENTORY
from rlark_platform.identity import Role
from rlark_platform.messaging import KafkaAccess
from scheduler_it_support import World, eventually, get_job, job_doc, placed_count, role, submitted

pytestmark = pytest.mark.integration


@pytest.fixture
async def inventory(
    postgres_server_url: str, kafka_bootstrap: str, topic_prefix: str, scheduler: RunningService
) -> AsyncIterator[RunningService]:
    """The real inventory service on its own database, on the scheduler's topics."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = postgres_server_url.rsplit("/", 1)[0] + f"/{name}"
    settings = settings_for(
        INVENTORY, database_url=url, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix
    )
    async with running_service(INVENTORY, settings) as running:
        yield running
    admin = await asyncpg.connect(postgres_server_url)
    try:
        with contextlib.suppress(Exception):
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def gpu_node(name: str, *, allocated: int = 0, foreign: int = 0) -> NodeObservation:
    return NodeObservation(
        name=name,
        gpu_count=8,
        gpu_model="A100",
        gpu_allocatable=8,
        gpu_allocated=allocated,
        gpu_allocated_foreign=foreign,
        labels={"rlark.io/gpu-model": "A100"},
        addresses=[f"192.168.9.{len(name)}"],
    )


async def observe(world: World, cluster: str, nodes: list[NodeObservation]) -> None:
    await world.report(NodesObserved(cluster=cluster, nodes=nodes, observed_at=datetime.now(UTC)), cluster)


async def inventory_node(inventory: RunningService, node: str) -> dict[str, Any]:
    """The node as the inventory API shows it ({} while it is not known yet)."""
    async with inventory.client() as client:
        response = await client.get(f"/api/v1/clusters/gpu-a/nodes/{node}")
    if response.status_code == 404:
        return {}
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def cluster_summary(inventory: RunningService) -> dict[str, Any]:
    async with inventory.client() as client:
        response = await client.get("/api/v1/clusters")
    assert response.status_code == 200, response.text
    listing: dict[str, Any] = response.json()
    return {"summary": listing["items"][0]["summary"], "totals": listing["totals"]}


async def test_gpus_held_by_a_pod_rlark_did_not_create_send_jobs_elsewhere_then_make_them_wait_with_the_reason(
    inventory: RunningService, scheduler: RunningService, producer: AIOKafkaProducer, names: TopicNames,
    kafka_admin: KafkaAccess,
) -> None:  # fmt: skip
    world = World(producer, names)
    async with inventory.client("root", Role.ADMIN) as admin:
        body = {"name": "gpu-a", "runtime": "kubernetes", "category": "cloud"}
        assert (await admin.post("/api/v1/clusters", json=body)).status_code == 201
    await world.report(
        HeartbeatSent(cluster="gpu-a", sent_at=datetime.now(UTC), runtime="kubernetes"), "gpu-a"
    )
    # n1: another team's pod holds all 8 GPUs; n2 is empty.
    await observe(world, "gpu-a", [gpu_node("n1", allocated=8, foreign=8), gpu_node("n2")])
    n1 = await eventually(lambda: inventory_node(inventory, "n1"), lambda n: n.get("gpu_allocated") == 8)
    assert (n1["gpu_allocatable"], n1["gpu_allocated_foreign"], n1["gpu_free"]) == (8, 8, 0)

    async with TopicReader(kafka_admin, names.physical("scheduler.placements")) as placements:
        first = await submitted(scheduler, job_doc(role("train", "gpu-a", gpusPerWorker=8), name="first"))
        await placements.until(placed_count(first["id"], 1))
        (placed,) = placements.of("scheduler.worker.placed.v1", first["id"])
        assert placed["node"] == "n2"  # n1's GPUs are in use by a pod RLark did not create

        # The worker exists; the agent's next snapshot counts its GPUs on n2 (allocated, not foreign).
        await world.worker(placed, "Created")
        await observe(world, "gpu-a", [gpu_node("n1", allocated=8, foreign=8), gpu_node("n2", allocated=8)])
        both = await eventually(
            lambda: cluster_summary(inventory), lambda s: s["summary"]["gpus_allocated"] == 16
        )
        assert (both["summary"]["gpus_free"], both["summary"]["gpus_allocated_foreign"]) == (0, 8)
        assert (both["totals"]["gpus_allocatable"], both["totals"]["gpus_free"]) == (16, 0)

        second = await submitted(scheduler, job_doc(role("train", "gpu-a", gpusPerWorker=8), name="second"))
        waiting = await eventually(
            lambda: get_job(scheduler, second["id"]),
            lambda j: "GPUs in use" in (j["reason"] or "") and "16 of 16" in j["reason"],
        )
        assert waiting["status"] == "Pending"
        assert waiting["reason"] == (
            'role "train" needs 1 node with ≥ 8 free GPUs in cluster gpu-a: 2 match, 2 ready, '
            "2 schedulable, 0 with enough free GPUs; GPUs in use on those 2 schedulable nodes: 16 of 16 "
            "(8 by workloads RLark did not place, 8 by RLark jobs)"
        )
        (train,) = waiting["pending"]["roles"]
        assert (train["gpus_allocatable"], train["gpus_used_external"], train["gpus_held"]) == (16, 8, 8)

        # The other team's pod ends: the waiting job gets n1.
        await observe(world, "gpu-a", [gpu_node("n1"), gpu_node("n2", allocated=8)])
        await placements.until(placed_count(second["id"], 1))
        (again,) = placements.of("scheduler.worker.placed.v1", second["id"])
        assert again["node"] == "n1"
