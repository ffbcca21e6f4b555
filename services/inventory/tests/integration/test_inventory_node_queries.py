"""Node queries on real data the consumer ingested: filters (cluster, status, category, label selector,
free text), sorting and pagination, the label catalog, placement match counts and cluster summaries."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from inventory_it_support import Agent, eventually, node
from rlark_contracts import TopicNames
from rlark_devinfra.testing import RunningService
from rlark_platform.identity import Role

pytestmark = pytest.mark.integration

A100 = {"rlark.io/gpu-model": "A100", "rlark.io/node-category": "cloud"}
H100 = {"rlark.io/gpu-model": "H100", "rlark.io/node-category": "cloud"}


async def seed(svc: RunningService, producer: AIOKafkaProducer, names: TopicNames) -> None:
    """gpu-a (cloud): a1 ready 8 free, a2 ready 2 free, a3 not ready, a4 cordoned, h1 H100 ready 4 free,
    gone-1 gone; edge-b (edge): e1 ready (T4), e2 ready (A100, 1 free). Both agents alive."""
    async with svc.client("root", Role.ADMIN) as admin:
        for name, category in (("gpu-a", "cloud"), ("edge-b", "edge")):
            body = {"name": name, "category": category, "runtime": "local"}
            assert (await admin.post("/api/v1/clusters", json=body)).status_code == 201
    a = Agent(producer, names, "gpu-a")
    b = Agent(producer, names, "edge-b")
    await a.observe(
        [
            node("a1", labels={**A100, "zone": "z1"}, addresses=["10.0.0.1"]),
            node("a2", labels={**A100, "zone": "z2"}, gpu_allocated=6, addresses=["10.0.0.2"]),
            node("a3", labels={**A100, "zone": "z1"}, ready=False, addresses=["10.0.0.3"]),
            node("a4", labels={**A100, "zone": "z2"}, schedulable=False, addresses=["10.0.0.4"]),
            node("h1", labels=H100, gpu_model="H100", gpu_count=4, gpu_allocatable=4, addresses=["10.0.1.1"]),
            node("gone-1", labels=A100),
        ]
    )
    await a.observe(
        [
            node("a1", labels={**A100, "zone": "z1"}, addresses=["10.0.0.1"]),
            node("a2", labels={**A100, "zone": "z2"}, gpu_allocated=6, addresses=["10.0.0.2"]),
            node("a3", labels={**A100, "zone": "z1"}, ready=False, addresses=["10.0.0.3"]),
            node("a4", labels={**A100, "zone": "z2"}, schedulable=False, addresses=["10.0.0.4"]),
            node("h1", labels=H100, gpu_model="H100", gpu_count=4, gpu_allocatable=4, addresses=["10.0.1.1"]),
        ]
    )
    await b.observe(
        [
            node("e1", labels={"rlark.io/gpu-model": "T4"}, gpu_model="T4", gpu_count=1, gpu_allocatable=1),
            node(
                "e2", labels={"rlark.io/gpu-model": "A100"}, gpu_count=2, gpu_allocatable=2, gpu_allocated=1
            ),
        ]
    )
    await a.worker("job-1-header-0", "a1", "Running", job_id="job-1")
    await a.worker("job-1-actor-0", "a2", "Running", job_id="job-1")
    await a.worker("job-2-header-0", "h1", "Running", job_id="job-2")
    async with svc.client() as user:

        async def beat_and_look() -> Any:
            # Beat as running agents do: the consumer finds new clusters' topics on its next metadata
            # refresh, and a beat older than the short agent timeout by then brings nothing online.
            await a.heartbeat()
            await b.heartbeat()
            return await user.get("/api/v1/clusters?sort=name")

        await eventually(
            beat_and_look,
            lambda r: (
                [c["online"] for c in r.json()["items"]] == [True, True]
                and r.json()["items"][1]["summary"]["running_workers"] == 3
                and r.json()["items"][1]["summary"]["nodes_total"] == 5
            ),
        )


async def get(svc: RunningService, path: str) -> Any:
    async with svc.client() as user:
        response = await user.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def names_of(listing: dict[str, Any]) -> list[str]:
    return [n["name"] for n in listing["items"]]


async def test_node_filters_combine_cluster_status_category_selector_and_text(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await seed(inventory, producer, names)
    assert (await get(inventory, "/api/v1/nodes"))["total"] == 8
    assert names_of(await get(inventory, "/api/v1/nodes?cluster=edge-b")) == ["e1", "e2"]
    assert names_of(await get(inventory, "/api/v1/nodes?status=ready&sort=name")) == [
        "a1",
        "a2",
        "e1",
        "e2",
        "h1",
    ]
    assert names_of(await get(inventory, "/api/v1/nodes?status=not_ready")) == ["a3"]
    assert names_of(await get(inventory, "/api/v1/nodes?status=cordoned")) == ["a4"]
    assert names_of(await get(inventory, "/api/v1/nodes?status=gone")) == ["gone-1"]
    assert names_of(await get(inventory, "/api/v1/nodes?category=edge")) == ["e1", "e2"]
    selected = await get(inventory, "/api/v1/nodes?selector=rlark.io/gpu-model=A100,zone=z1")
    assert names_of(selected) == ["a1", "a3"]
    both = await get(inventory, "/api/v1/nodes?selector=rlark.io/gpu-model%3DA100&status=ready&sort=name")
    assert names_of(both) == ["a1", "a2", "e2"]
    assert names_of(await get(inventory, "/api/v1/nodes?q=10.0.1.1")) == ["h1"]  # an address
    assert names_of(await get(inventory, "/api/v1/nodes?q=H100")) == ["h1"]  # a label, any case
    assert names_of(await get(inventory, "/api/v1/nodes?q=zone%3Dz2")) == ["a2", "a4"]
    assert names_of(await get(inventory, "/api/v1/nodes?q=E1")) == ["e1"]  # the name
    assert (await get(inventory, "/api/v1/nodes?q=100%25"))["total"] == 0  # no LIKE wildcards


async def test_nodes_sort_and_paginate(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await seed(inventory, producer, names)
    first = await get(inventory, "/api/v1/nodes?sort=name&page_size=3")
    second = await get(inventory, "/api/v1/nodes?sort=name&page_size=3&page=2")
    third = await get(inventory, "/api/v1/nodes?sort=name&page_size=3&page=3")
    past = await get(inventory, "/api/v1/nodes?sort=name&page_size=3&page=9")
    assert names_of(first) + names_of(second) + names_of(third) == [
        "a1", "a2", "a3", "a4", "e1", "e2", "gone-1", "h1"
    ]  # fmt: skip
    assert (first["total"], first["page"], first["page_size"]) == (8, 1, 3)
    assert (past["total"], past["items"]) == (8, [])
    assert names_of(await get(inventory, "/api/v1/nodes?sort=-name&page_size=2")) == ["h1", "gone-1"]
    by_free = await get(inventory, "/api/v1/nodes?sort=-gpu_free&status=ready")
    assert [(n["name"], n["gpu_free"]) for n in by_free["items"]] == [
        ("a1", 8), ("h1", 4), ("a2", 2), ("e1", 1), ("e2", 1)
    ]  # fmt: skip
    async with inventory.client() as user:
        bad_sort = await user.get("/api/v1/nodes?sort=password")
        bad_status = await user.get("/api/v1/nodes?status=sleepy")
        bad_size = await user.get("/api/v1/nodes?page_size=501")
    assert (bad_sort.status_code, bad_sort.json()["error"]["field"]) == (422, "sort")
    assert (bad_status.status_code, bad_status.json()["error"]["field"]) == (422, "status")
    assert (bad_size.status_code, bad_size.json()["error"]["field"]) == (422, "page_size")


async def test_malformed_selectors_are_422_naming_selector(inventory: RunningService) -> None:
    async with inventory.client() as user:
        for selector in ("gpu", "a=b,,c=d", "a!=b", "bad key=x", "a=b=c", "a=1,a=2", "rlark.io/=x"):
            for path in ("/api/v1/nodes", "/api/v1/clusters/gpu-a/match"):
                response = await user.get(path, params={"selector": selector})
                assert response.status_code == 422, (path, selector, response.text)
                error = response.json()["error"]
                assert (error["code"], error["field"]) == ("invalid_selector", "selector"), selector


async def test_label_catalog_counts_nodes_per_value(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await seed(inventory, producer, names)
    catalog = {
        k["key"]: {v["value"]: v["nodes"] for v in k["values"]}
        for k in (await get(inventory, "/api/v1/labels"))["items"]
    }
    assert catalog == {
        "rlark.io/gpu-model": {"A100": 5, "H100": 1, "T4": 1},  # gone-1 is not counted
        "rlark.io/node-category": {"cloud": 5},
        "zone": {"z1": 2, "z2": 2},
    }
    edge = await get(inventory, "/api/v1/labels?cluster=edge-b")
    assert edge["items"] == [
        {"key": "rlark.io/gpu-model", "values": [{"value": "A100", "nodes": 1}, {"value": "T4", "nodes": 1}]}
    ]


async def test_match_counts_the_funnel_of_a_selector_on_one_cluster(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await seed(inventory, producer, names)
    match = await get(inventory, "/api/v1/clusters/gpu-a/match?selector=rlark.io/gpu-model=A100&gpus=4")
    assert {k: match[k] for k in ("total", "matching", "ready", "schedulable", "with_free_gpus")} == {
        "total": 5,
        "matching": 4,  # a1..a4; gone-1 is gone, h1 is H100, e2 is another cluster
        "ready": 3,  # a3 is not ready
        "schedulable": 2,  # a4 is cordoned
        "with_free_gpus": 1,  # a2 has only 2 free
    }
    assert [(n["name"], n["fits"]) for n in match["nodes"]] == [
        ("a1", True),
        ("a2", False),
        ("a3", False),
        ("a4", False),
    ]
    a2 = match["nodes"][1]
    assert (a2["gpu_allocatable"], a2["gpu_allocated"], a2["gpu_free"]) == (8, 6, 2)
    everything = await get(inventory, "/api/v1/clusters/gpu-a/match")
    assert (everything["matching"], everything["with_free_gpus"]) == (5, 3)  # a1, a2, h1
    async with inventory.client() as user:
        missing = await user.get("/api/v1/clusters/nope/match")
        negative = await user.get("/api/v1/clusters/gpu-a/match?gpus=-1")
    assert missing.status_code == 404
    assert (negative.status_code, negative.json()["error"]["field"]) == (422, "gpus")


async def test_cluster_list_summarises_nodes_gpus_and_running_jobs(
    inventory: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    await seed(inventory, producer, names)
    listing = await get(inventory, "/api/v1/clusters?sort=-nodes")
    assert [c["name"] for c in listing["items"]] == ["gpu-a", "edge-b"]
    summary = listing["items"][0]["summary"]
    assert summary == {
        "nodes_total": 5,
        "nodes_online": 4,  # a3 is not ready
        "nodes_offline": 1,
        "online_rate": 0.8,
        "gpus_total": 8 * 4 + 4,
        "gpus_allocatable": 8 * 4 + 4,
        "gpus_allocated": 6,
        "gpus_allocated_foreign": 0,
        "gpus_free": 8 + 2 + 4,  # ready and schedulable nodes only
        "running_jobs": 2,
        "running_workers": 3,
    }
    # The overview: every cluster together, whatever the page shows.
    assert listing["totals"] == {
        "clusters": 2,
        "clusters_online": 2,
        "nodes_total": 7,
        "nodes_online": 6,
        "nodes_offline": 1,
        "online_rate": round(6 / 7, 4),
        "gpus_total": 36 + 3,
        "gpus_allocatable": 36 + 3,
        "gpus_allocated": 6 + 1,
        "gpus_allocated_foreign": 0,
        "gpus_free": 14 + 2,
        "running_jobs": 2,
        "running_workers": 3,
    }
    first_page = await get(inventory, "/api/v1/clusters?page_size=1")
    assert first_page["totals"] == listing["totals"]
    edge = await get(inventory, "/api/v1/clusters/edge-b")
    assert (edge["summary"]["gpus_total"], edge["summary"]["gpus_free"], edge["summary"]["running_jobs"]) == (
        3,
        2,
        0,
    )
    detail = await get(inventory, "/api/v1/clusters/gpu-a/nodes/a1")
    assert [(w["job_id"], w["phase"]) for w in detail["workers"]] == [("job-1", "Running")]
