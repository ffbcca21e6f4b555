"""The networks agents observe count like declared ones (issue 15.6): a cluster that declared no CIDRs still
keeps domains off its real pod and service networks, reported by its agent on ``agent.nodes.observed.v1``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from netdomain_it_support import TopicFollower, event, publish, report_as_agent
from rlark_contracts import TopicNames
from rlark_contracts.events.agent import NodeObservation, NodesObserved
from rlark_contracts.events.inventory import ClusterRegistered
from rlark_devinfra.testing import RunningService
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration


def observed(cluster: str, pods: list[list[str]], services: list[str], at: datetime) -> NodesObserved:
    nodes = [NodeObservation(name=f"{cluster}-n{i}", pod_cidrs=cidrs) for i, cidrs in enumerate(pods)]
    return NodesObserved(cluster=cluster, nodes=nodes, service_cidrs=services, observed_at=at)


async def eventually_check(client: httpx.AsyncClient, cidr: str, *, ok: bool) -> Any:
    """``POST /domains:check`` until its verdict is ``ok`` (reports are applied asynchronously)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        body = (await client.post("/api/v1/domains:check", json={"cidr": cidr})).json()
        if body["ok"] is ok or asyncio.get_running_loop().time() > deadline:
            return body
        await asyncio.sleep(0.1)


async def test_a_domain_overlapping_networks_an_agent_observed_is_refused_naming_the_cluster(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    now = datetime.now(UTC)
    # The agent's report comes before inventory's state of its cluster, which declares no CIDRs.
    report = observed("obs-a", [["10.244.1.0/24"], ["10.244.2.0/24", "fd00:44::/64"]], ["10.96.0.0/16"], now)
    await report_as_agent(producer, names, report, "obs-a")
    await publish(producer, names, event(ClusterRegistered(name="obs-a"), "obs-a", source="inventory"))

    async with service.client("root", role="admin") as admin:
        check = await eventually_check(admin, "10.244.0.0/16", ok=False)
        assert [(c["name"], c["kind"], c["cidr"], c["observed"]) for c in check["conflicts"]] == [
            ("obs-a", "cluster_pod_cidr", "10.244.1.0/24", True),
            ("obs-a", "cluster_pod_cidr", "10.244.2.0/24", True),
        ]
        assert check["conflicts"][0]["message_key"] == "cidr_overlaps.cluster_pod_cidr.observed"

        refused = await admin.post("/api/v1/domains", json={"name": "pods", "cidr": "10.96.0.0/12"})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "cidr_overlaps"
        assert error["message"] == (
            '10.96.0.0/12 overlaps service CIDR 10.96.0.0/16 observed by the agent of cluster "obs-a".'
        )

        # A newer snapshot without the pods' second network frees it.
        newer = observed("obs-a", [["10.244.1.0/24"]], ["10.96.0.0/16"], now + timedelta(seconds=1))
        await report_as_agent(producer, names, newer, "obs-a")
        assert (await eventually_check(admin, "10.244.2.0/24", ok=True))["ok"] is True
        assert (await eventually_check(admin, "10.96.0.0/12", ok=False))["ok"] is False
        created = await admin.post("/api/v1/domains", json={"name": "free", "cidr": "10.244.2.0/24"})
        assert created.status_code == 201, created.text


async def test_an_agent_observing_a_network_an_existing_domain_uses_flags_the_domain(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    await publish(producer, names, event(ClusterRegistered(name="obs-b"), "obs-b", source="inventory"))
    async with service.client("root", role="admin") as admin:
        created = await admin.post("/api/v1/domains", json={"name": "seen", "cidr": "10.77.0.0/16"})
        assert created.status_code == 201, created.text

        async with TopicFollower(kafka_admin, names, "netdomain.domains") as domains:
            now = datetime.now(UTC)
            await report_as_agent(producer, names, observed("obs-b", [["10.77.3.0/24"]], [], now), "obs-b")
            await domains.wait_for(
                lambda _: domains.of_type("netdomain.domain.overlap_detected.v1"), what="overlap_detected"
            )
            (flagged,) = domains.of_type("netdomain.domain.overlap_detected.v1")
            assert (flagged.data["name"], flagged.data["cluster"], flagged.data["cluster_cidr"]) == (
                "seen",
                "obs-b",
                "10.77.3.0/24",
            )
            assert flagged.data["message"] == (
                'network domain "seen" (10.77.0.0/16) overlaps pod CIDR 10.77.3.0/24 observed by the agent '
                'of cluster "obs-b"'
            )
            shown = (await admin.get("/api/v1/domains/seen")).json()
            assert shown["warnings"] == [flagged.data["message"]]
            assert shown["overlaps"][0]["kind"] == "cluster_pod_cidr"

            # The same snapshot again flags nothing new; one without the network lifts the warning.
            again = observed("obs-b", [["10.77.3.0/24"]], [], now + timedelta(seconds=1))
            await report_as_agent(producer, names, again, "obs-b")
            moved = observed("obs-b", [["10.78.0.0/24"]], [], now + timedelta(seconds=2))
            await report_as_agent(producer, names, moved, "obs-b")
            for _ in range(300):
                if not (await admin.get("/api/v1/domains/seen")).json()["warnings"]:
                    break
                await asyncio.sleep(0.1)
            assert (await admin.get("/api/v1/domains/seen")).json()["overlaps"] == []

            # A snapshot older than the one stored is ignored: it flags nothing. (The newer one after it,
            # with a second network, shows when both were handled.)
            stale = observed("obs-b", [["10.77.3.0/24"]], [], now - timedelta(minutes=5))
            await report_as_agent(producer, names, stale, "obs-b")
            later = observed("obs-b", [["10.78.0.0/24"], ["10.79.0.0/24"]], [], now + timedelta(seconds=3))
            await report_as_agent(producer, names, later, "obs-b")
            assert (await eventually_check(admin, "10.79.0.0/16", ok=False))["ok"] is False
            assert (await admin.get("/api/v1/domains/seen")).json()["overlaps"] == []
            await domains.settle(0.5)
            assert len(domains.of_type("netdomain.domain.overlap_detected.v1")) == 1
