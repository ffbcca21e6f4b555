"""Agent reports on ``agent.reports.<cluster>`` through the real consumer: provenance checked by topic,
node observations folded into the nodes table, heartbeats driving online/offline, cordon commands
settling when the agent reports them — and events on the compacted topics only for real changes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from inventory_it_support import (
    AGENT_TIMEOUT_S,
    Agent,
    beat_until_online,
    eventually,
    node,
    read_events,
    read_raw,
)
from rlark_contracts import TopicNames, encode
from rlark_contracts.events.agent import HeartbeatSent, NodesObserved
from rlark_devinfra.testing import RunningService
from rlark_platform.identity import Role
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration


async def register(svc: RunningService, name: str, **fields: Any) -> None:
    body = {"name": name, "runtime": "kubernetes", "category": "cloud", **fields}
    async with svc.client("root", Role.ADMIN) as admin:
        response = await admin.post("/api/v1/clusters", json=body)
    assert response.status_code == 201, response.text


async def nodes(svc: RunningService, query: str = "") -> dict[str, Any]:
    async with svc.client() as user:
        response = await user.get(f"/api/v1/nodes{query}")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def cluster(svc: RunningService, name: str) -> dict[str, Any]:
    async with svc.client() as user:
        found: dict[str, Any] = (await user.get(f"/api/v1/clusters/{name}")).json()
    return found


async def test_observed_nodes_appear_with_labels_gpus_and_resources(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    await register(inventory, "gpu-a")
    agent = Agent(producer, names, "gpu-a")
    await agent.observe(
        [
            node(
                "a100-1",
                gpu_allocated=3,
                gpu_allocated_foreign=2,
                cpu_allocated_millis=1500,
                memory_allocated_bytes=8 << 30,
                labels={"rlark.io/gpu-model": "A100", "rlark.io/node-category": "cloud"},
                addresses=["192.168.1.10", "a100-1.internal"],
            ),
            node("h100-1", gpu_model="H100", labels={"rlark.io/gpu-model": "H100"}, ready=False),
        ]
    )
    found = await eventually(lambda: nodes(inventory), lambda r: r["total"] == 2)
    by_name = {n["name"]: n for n in found["items"]}
    a100 = by_name["a100-1"]
    assert a100["labels"] == {"rlark.io/gpu-model": "A100", "rlark.io/node-category": "cloud"}
    assert (a100["gpu_count"], a100["gpu_model"], a100["gpu_free"]) == (8, "A100", 5)
    assert (a100["gpu_allocatable"], a100["gpu_allocated"], a100["gpu_allocated_foreign"]) == (8, 3, 2)
    assert (a100["cpu_allocated_millis"], a100["memory_allocated_bytes"]) == (1500, 8 << 30)
    assert a100["addresses"] == ["192.168.1.10", "a100-1.internal"]
    assert a100["status"] == "ready"
    assert a100["category"] == "cloud"
    assert by_name["h100-1"]["status"] == "not_ready"

    async with inventory.client() as user:
        detail = (await user.get("/api/v1/clusters/gpu-a/nodes/a100-1")).json()
        missing = await user.get("/api/v1/clusters/gpu-a/nodes/nope")
        no_cluster = await user.get("/api/v1/clusters/nope/nodes/a100-1")
    assert detail["gpu_allocated"] == 3
    assert detail["workers"] == []
    assert missing.json()["error"]["code"] == "node_not_found"
    assert no_cluster.json()["error"]["code"] == "cluster_not_found"

    events = await read_events(
        kafka_admin, names.physical("inventory.nodes"), until=lambda found: len(found) >= 2
    )
    assert sorted(e.subject for e in events) == ["gpu-a/a100-1", "gpu-a/h100-1"]
    assert {e.type for e in events} == {"inventory.node.updated.v1"}
    a100_state = next(e.data for e in events if e.subject == "gpu-a/a100-1")
    assert (a100_state["gpu_allocated"], a100_state["gpu_allocated_foreign"]) == (3, 2)


async def test_reports_naming_another_cluster_than_their_topics_go_to_the_dlq_and_change_nothing(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    """Only gpu-b's agent may write gpu-b's topic (the broker's ACLs); what it writes there about gpu-a,
    or as gpu-a's agent, is refused by the consumer (ADR 0004)."""
    await register(inventory, "gpu-a")
    await register(inventory, "gpu-b")
    mallory = Agent(producer, names, "gpu-b")
    stolen = [node("stolen-1")]
    await mallory.send(NodesObserved(cluster="gpu-a", nodes=stolen, observed_at=datetime.now(UTC)))
    await mallory.send(HeartbeatSent(cluster="gpu-a", sent_at=datetime.now(UTC)))
    await mallory.send(
        NodesObserved(cluster="gpu-a", nodes=stolen, observed_at=datetime.now(UTC)), source="agent/gpu-a"
    )
    await mallory.send(
        NodesObserved(cluster="gpu-b", nodes=stolen, observed_at=datetime.now(UTC)), source="agent/gpu-a"
    )
    # A valid report afterwards is applied: the consumer carried on past the refused ones.
    await mallory.observe([node("b-1")])

    found = await eventually(lambda: nodes(inventory), lambda r: r["total"] >= 1)
    assert [(n["cluster"], n["name"]) for n in found["items"]] == [("gpu-b", "b-1")]
    assert (await cluster(inventory, "gpu-a"))["online"] is False
    dead = await read_raw(kafka_admin, names.physical("agent.reports.dlq"), expect=4)
    kinds = sorted(h["rlark-error-kind"] for _, h in dead)
    assert kinds == [b"cluster_mismatch", b"cluster_mismatch", b"source_mismatch", b"source_mismatch"]
    assert {h["rlark-original-topic"] for _, h in dead} == {b"agent.reports.gpu-b"}


async def test_heartbeats_bring_a_cluster_online_and_silence_takes_it_offline(
    inventory: RunningService,
    producer: AIOKafkaProducer,
    names: TopicNames,
    kafka_admin: KafkaAccess,
) -> None:
    await register(inventory, "gpu-a")
    agent = Agent(producer, names, "gpu-a")
    online = await beat_until_online(agent, inventory)
    assert online["last_seen"] is not None
    assert online["agent_version"] == "test"

    offline = await eventually(
        lambda: cluster(inventory, "gpu-a"), lambda c: not c["online"], timeout_s=AGENT_TIMEOUT_S * 6
    )
    assert offline["last_seen"] == online["last_seen"] or offline["last_seen"] > online["last_seen"]

    await agent.heartbeat()  # the agent restarts
    await eventually(lambda: cluster(inventory, "gpu-a"), lambda c: c["online"])

    events = await read_events(
        kafka_admin, names.physical("inventory.clusters"), until=lambda found: len(found) >= 4
    )
    assert [e.type for e in events] == [
        "inventory.cluster.registered.v1",
        "inventory.cluster.went_online.v1",
        "inventory.cluster.went_offline.v1",
        "inventory.cluster.went_online.v1",
    ]
    assert events[2].data["online"] is False
    # Heartbeats alone publish nothing: after the registration every event is a transition, online and offline
    # alternating (a loaded machine may see the silent agent go offline once more while this reads).
    again = await read_events(
        kafka_admin,
        names.physical("inventory.clusters"),
        until=lambda found: len(found) >= 4,
        settle_s=1.0,
    )
    flags = [e.data["online"] for e in again[1:]]
    assert flags[:3] == [True, False, True]
    assert all(a != b for a, b in itertools.pairwise(flags)), [e.type for e in again]


async def test_what_an_agent_cannot_enforce_is_shown_from_its_latest_heartbeat(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await register(inventory, "gpu-a")
    assert (await cluster(inventory, "gpu-a"))["not_enforced"] == []
    agent = Agent(producer, names, "gpu-a")
    gap = "CPU and memory limits are not enforced: no cgroup v2 hierarchy is mounted on this machine"
    await agent.heartbeat(not_enforced=[gap])
    await eventually(lambda: cluster(inventory, "gpu-a"), lambda c: c["not_enforced"] == [gap])
    await agent.heartbeat()  # the machine was fixed and the agent restarted
    await eventually(lambda: cluster(inventory, "gpu-a"), lambda c: c["not_enforced"] == [])


async def test_mount_types_an_agent_is_not_set_up_for_are_shown_and_published_when_they_change(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    await register(inventory, "gpu-a")
    agent = Agent(producer, names, "gpu-a")
    await agent.heartbeat(unmountable=["objectStorage"])  # a Kubernetes agent naming no CSI driver
    await eventually(lambda: cluster(inventory, "gpu-a"), lambda c: c["unmountable"] == ["objectStorage"])
    await agent.heartbeat(unmountable=["objectStorage"])  # unchanged: nothing more to publish
    await agent.heartbeat()  # its administrator named a driver and restarted it
    await eventually(lambda: cluster(inventory, "gpu-a"), lambda c: c["unmountable"] == [])

    def mine(found: list[Any]) -> list[Any]:
        return [e for e in found if e.subject == "gpu-a" and e.type == "inventory.cluster.updated.v1"]

    updates = mine(
        await read_events(
            kafka_admin,
            names.physical("inventory.clusters"),
            until=lambda found: len(mine(found)) >= 2,
            settle_s=1.0,
        )
    )
    assert [e.data["unmountable"] for e in updates] == [["objectStorage"], []]


async def test_complete_observations_mark_missing_nodes_gone_and_repeats_publish_nothing(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    await register(inventory, "gpu-a")
    agent = Agent(producer, names, "gpu-a")
    await agent.observe([node("n1"), node("n2"), node("n3")])
    await eventually(lambda: nodes(inventory), lambda r: r["total"] == 3)

    await agent.observe([node("n1"), node("n2"), node("n3")])  # nothing new
    await agent.observe([node("n1", gpu_allocated=2)], complete=False)  # one change, partial list
    await eventually(
        lambda: nodes(inventory, "?q=n1"), lambda r: r["items"] and r["items"][0]["gpu_allocated"] == 2
    )
    await agent.observe([node("n1", gpu_allocated=2), node("n2")])  # n3 left the cluster
    gone = await eventually(lambda: nodes(inventory, "?status=gone"), lambda r: r["total"] == 1)
    assert gone["items"][0]["name"] == "n3"
    assert gone["items"][0]["gone"] is True
    assert (await nodes(inventory, "?status=ready"))["total"] == 2

    await agent.observe([node("n1", gpu_allocated=2), node("n2"), node("n3")])  # n3 is back
    await eventually(lambda: nodes(inventory, "?status=gone"), lambda r: r["total"] == 0)
    events = await read_events(
        kafka_admin, names.physical("inventory.nodes"), until=lambda found: len(found) >= 6, settle_s=1.0
    )
    # 3 new nodes, n1's allocation, n3 gone, n3 back: the repeated snapshot published nothing.
    # (Order holds per node only: the topic is partitioned by node.)
    assert sorted((e.subject, e.type.split(".")[2], e.data["gpu_allocated"]) for e in events) == [
        ("gpu-a/n1", "updated", 0),
        ("gpu-a/n1", "updated", 2),
        ("gpu-a/n2", "updated", 0),
        ("gpu-a/n3", "gone", 0),
        ("gpu-a/n3", "updated", 0),
        ("gpu-a/n3", "updated", 0),
    ]
    n3 = [e for e in events if e.subject == "gpu-a/n3"]
    assert [e.data["gone"] for e in n3] == [False, True, False]


async def test_cordon_sends_a_command_and_the_node_changes_when_the_agent_reports_it(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    await register(inventory, "gpu-a")
    agent = Agent(producer, names, "gpu-a")
    await agent.observe([node("n1")])
    await eventually(lambda: nodes(inventory), lambda r: r["total"] == 1)

    async with inventory.client("bob", Role.USER) as user:
        assert (await user.post("/api/v1/clusters/gpu-a/nodes/n1/cordon")).status_code == 403
    async with inventory.client("root", Role.ADMIN) as admin:
        asked = await admin.post("/api/v1/clusters/gpu-a/nodes/n1/cordon")
        assert (await admin.post("/api/v1/clusters/gpu-a/nodes/nope/cordon")).status_code == 404
    assert asked.status_code == 202
    assert asked.json()["schedulable"] is True  # not until the agent says so
    assert asked.json()["cordon_requested"] is True

    commands = await read_events(
        kafka_admin, names.physical("inventory.commands"), until=lambda found: len(found) >= 1
    )
    assert commands[0].type == "inventory.node.cordon_requested.v1"
    assert commands[0].subject == "gpu-a"
    assert commands[0].data == {"cluster": "gpu-a", "node": "n1", "cordoned": True, "requested_by": "root"}

    await agent.observe([node("n1", schedulable=False)])  # the agent cordoned it
    cordoned = await eventually(lambda: nodes(inventory, "?status=cordoned"), lambda r: r["total"] == 1)
    assert cordoned["items"][0]["schedulable"] is False
    assert cordoned["items"][0]["cordon_requested"] is None

    async with inventory.client("root", Role.ADMIN) as admin:
        undo = await admin.post("/api/v1/clusters/gpu-a/nodes/n1/uncordon")
    assert undo.json()["cordon_requested"] is False
    await agent.observe([node("n1", schedulable=True)])
    ready = await eventually(lambda: nodes(inventory, "?status=ready"), lambda r: r["total"] == 1)
    assert ready["items"][0]["cordon_requested"] is None


async def test_a_redelivered_report_is_not_applied_again(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await register(inventory, "gpu-a")
    agent = Agent(producer, names, "gpu-a")
    first = await agent.observe([node("n1", gpu_allocated=0)], complete=False)
    await agent.observe([node("n1", gpu_allocated=5)], complete=False)
    await eventually(
        lambda: nodes(inventory), lambda r: r["total"] == 1 and r["items"][0]["gpu_allocated"] == 5
    )
    # Kafka may deliver the first report again (same event id): applied twice, it would roll n1 back.
    await producer.send_and_wait(
        names.for_cluster("agent.reports", "gpu-a"), value=encode(first), key=b"gpu-a"
    )
    await agent.observe([node("n2")], complete=False)  # a marker: the consumer has passed the duplicate
    found = await eventually(lambda: nodes(inventory, "?sort=name"), lambda r: r["total"] == 2)
    assert [(n["name"], n["gpu_allocated"]) for n in found["items"]] == [("n1", 5), ("n2", 0)]
