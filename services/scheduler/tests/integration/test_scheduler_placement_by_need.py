"""Placement by need through the real service (ADR 0026): jobs whose roles name no cluster are placed on
the one cluster that fits, or across the clusters a network domain joins, with the choice previewed,
recorded in the timeline and explained while they wait; the clusters' labels and the links' round trips
reach the placer from inventory's and the agents' events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from rlark_contracts.events.agent import TunnelStateChanged
from rlark_devinfra.testing import RunningService, TopicReader
from scheduler_it_support import (
    World,
    eventually,
    get_job,
    has_event,
    job_doc,
    job_status,
    nodes_synced,
    placed_count,
    submitted,
    synced,
)

pytestmark = pytest.mark.integration

IMAGE = "registry.example.com/rlinf/rlinf:v0.3.0"


def free(name: str, **fields: Any) -> dict[str, Any]:
    """A role naming no cluster."""
    return {"name": name, "image": IMAGE, "gpusPerWorker": 8, **fields}


async def fleet(world: World, database_url: str, sizes: dict[str, int], **clusters: dict[str, Any]) -> None:
    for cluster, size in sizes.items():
        await world.cluster(cluster, **clusters.get(cluster, {}))
        for i in range(size):
            await world.node(cluster, f"{cluster}-{i}")
    for cluster, size in sizes.items():
        await nodes_synced(database_url, cluster, size)


async def test_a_job_naming_no_cluster_lands_on_the_one_cluster_that_fits_and_joins_no_domain(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await fleet(world, database_url, {"north": 2, "south": 3})
    await world.domain("lab", "10.120.0.0/16")
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=1)
    doc = job_doc(free("actor"), free("rollout", replicas=2), header="actor")
    async with scheduler.client("alice") as client:
        preview = (await client.post("/api/v1/jobs:preview", json=doc)).json()
    assert preview["errors"] == []
    assert preview["layout"]["message"] == "fits on south alone"
    assert preview["layout"]["parts"] == [{"message_key": "layout.one", "params": {"cluster": "south"}}]
    assert [(p["cluster"], p["roles"]) for p in preview["plan"]] == [("south", ["actor", "rollout"])]
    assert "networkDomain" not in preview["yaml"]

    job = await submitted(scheduler, doc)
    await placements.until(placed_count(job["id"], 3))
    placed = placements.of("scheduler.worker.placed.v1", job["id"])
    assert {p["cluster"] for p in placed} == {"south"}
    assert {(p["domain"], p["virtual_ip"], p["header_address"]) for p in placed} == {(None, None, "")}
    started = await job_status(scheduler, job["id"], "Starting")
    assert started["network_domain"] is None
    scheduled = next(e for e in started["timeline"] if e["to_status"] == "Scheduled")
    assert scheduled["reason"] == "placed 3 worker(s) on south: it fits there alone"
    assert scheduled["details"]["layout"]["kind"] == "one"


async def test_a_job_no_cluster_fits_spans_two_clusters_of_its_domain_through_the_best_link(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    job_topic: TopicReader,
    database_url: str,
) -> None:
    await fleet(world, database_url, {"north": 1, "south": 2, "west": 2})
    await world.domain("lab", "10.121.0.0/16", clusters=["north", "south", "west"])
    await world.domain("aaa", "10.122.0.0/16", clusters=["east"])  # first by name, joins none of them
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=2)
    # The agents' tunnel probes measured north–west faster than north–south (kept after the link closes).
    for peer, rtt in (("south", 12.0), ("west", 2.5)):
        await world.report(
            TunnelStateChanged(
                cluster="north", domain="old", peer=peer, state="up", rtt_ms=rtt, at=datetime.now(UTC)
            ),
            "north",
        )
    await synced(database_url, "SELECT count(*) FROM cluster_links", expect=2)

    doc = job_doc(free("actor"), free("rollout", replicas=2), header="actor")
    async with scheduler.client("alice") as client:
        preview = (await client.post("/api/v1/jobs:preview", json=doc)).json()
    assert preview["layout"]["message"] == (
        "no single cluster fits its 3 workers (24 GPUs) now: actor → north, rollout → west, 2.5 ms apart, "
        "through network domain lab"
    )
    job = await submitted(scheduler, doc)
    await job_topic.until(has_event("scheduler.job.addresses_requested.v1", job["id"]))
    request = job_topic.envelopes("scheduler.job.addresses_requested.v1", job["id"])[0]
    assert request.data["domain"] == "lab"
    assert sorted(w["cluster"] for w in request.data["workers"]) == ["north", "west", "west"]
    await world.allocate(request, "10.121.0.0/16")
    await placements.until(placed_count(job["id"], 3))
    placed = placements.of("scheduler.worker.placed.v1", job["id"])
    assert {(p["cluster"], p["domain"]) for p in placed} == {("north", "lab"), ("west", "lab")}
    assert all(p["virtual_ip"] for p in placed)
    started = await job_status(scheduler, job["id"], "Starting")
    assert started["network_domain"] == "lab"
    scheduled = next(e for e in started["timeline"] if e["to_status"] == "Scheduled")
    assert scheduled["reason"] == (
        "placed 3 worker(s) across north, west through network domain lab, as no single cluster fits them now: "
        "actor → north, rollout → west, 2.5 ms apart"
    )


async def test_with_span_clusters_never_the_job_waits_and_the_queue_says_what_spanning_would_change(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await fleet(world, database_url, {"north": 1, "south": 2})
    await world.node("south", "south-busy", gpu_allocated=8)  # south could hold it alone some day
    await nodes_synced(database_url, "south", 3)
    await world.domain("lab", "10.123.0.0/16")
    await synced(database_url, "SELECT count(*) FROM network_domains", expect=1)
    doc = job_doc(
        free("actor"), free("rollout", replicas=2), header="actor", placement={"spanClusters": "never"}
    )
    job = await submitted(scheduler, doc)
    waiting = await eventually(lambda: get_job(scheduler, job["id"]), lambda j: j.get("pending") is not None)
    assert waiting["status"] == "Pending"
    pending = waiting["pending"]
    assert pending["code"] == "no_cluster_fits"
    assert pending["span"] == {
        "code": "span_refused",
        "clusters": ["north", "south"],
        "domain": "lab",
        "parts": [
            {"message_key": "pending.span_refused", "params": {"clusters": "north, south", "domain": "lab"}}
        ],
    }
    assert waiting["reason"].endswith(
        "spanning north, south through network domain lab would place it now (spec.placement.spanClusters is never)"
    )
    async with scheduler.client("alice") as client:
        listed = (await client.get("/api/v1/queue")).json()["items"]
        detail = (await client.get(f"/api/v1/queue/{job['id']}")).json()
    assert [(i["clusters"], i["any_cluster"]) for i in listed] == [([], True)]
    assert [(h["kind"], h["message"]) for h in detail["hints"]][:1] == [
        (
            "span",
            "with spec.placement.spanClusters: whenNeeded it would run now across north, south through network domain lab",
        )
    ]
    await placements.settle(0.5)
    assert placements.of("scheduler.worker.placed.v1", job["id"]) == []


async def test_a_cluster_selector_chooses_by_the_labels_and_region_inventory_publishes(
    scheduler: RunningService, world: World, placements: TopicReader, database_url: str
) -> None:
    await fleet(
        world,
        database_url,
        {"north": 3, "south": 3},
        north={"region": "cn-north"},
        south={"region": "cn-south", "labels": {"tier": "gold"}},
    )
    await synced(database_url, "SELECT count(*) FROM clusters WHERE region <> ''", expect=2)
    by_region = await submitted(
        scheduler, job_doc(free("actor", clusterSelector={"rlark.io/region": "cn-north"}), header="actor")
    )
    by_label = await submitted(
        scheduler, job_doc(free("actor", clusterSelector={"tier": "gold"}), header="actor")
    )
    for job, cluster in ((by_region, "north"), (by_label, "south")):
        await placements.until(placed_count(job["id"], 1))
        assert placements.of("scheduler.worker.placed.v1", job["id"])[0]["cluster"] == cluster
    async with scheduler.client("alice") as client:
        refused = await client.post(
            "/api/v1/jobs", json=job_doc(free("actor", clusterSelector={"tier": "silver"}), header="actor")
        )
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "cluster_choice_empty"
