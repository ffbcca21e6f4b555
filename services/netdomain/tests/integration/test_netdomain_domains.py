"""Network domains against real PostgreSQL and Kafka: creation is refused when the CIDR overlaps a
cluster (known from inventory's events) or another domain, naming it; clusters that later come to
overlap a domain are flagged; domains are listed by name, checked for forms and deleted."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from netdomain_it_support import TopicFollower, event, publish
from rlark_contracts import TopicNames
from rlark_contracts.events.inventory import ClusterDeleted, ClusterRegistered, ClusterUpdated
from rlark_devinfra.testing import RunningService
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration


async def eventually_check(client: httpx.AsyncClient, cidr: str, *, ok: bool, timeout_s: float = 30.0) -> Any:
    """``POST /domains:check`` until its verdict is ``ok`` (cluster events are applied asynchronously)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        body = (await client.post("/api/v1/domains:check", json={"cidr": cidr})).json()
        if body["ok"] is ok or asyncio.get_running_loop().time() > deadline:
            return body
        await asyncio.sleep(0.1)


async def test_domain_overlapping_a_clusters_pod_cidr_is_refused_naming_the_cluster(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    registered = ClusterRegistered(
        name="gpu-a", pod_cidrs=["10.244.0.0/16"], service_cidrs=["10.96.0.0/12", "fd00:96::/108"]
    )
    await publish(producer, names, event(registered, "gpu-a", source="inventory"))

    async with service.client("root", role="admin") as admin:
        check = await eventually_check(admin, "10.244.128.0/17", ok=False)
        assert check["conflicts"] == [
            {
                "kind": "cluster_pod_cidr",
                "name": "gpu-a",
                "cidr": "10.244.0.0/16",
                "observed": False,
                "message": 'overlaps declared pod CIDR 10.244.0.0/16 of cluster "gpu-a"',
                "message_key": "cidr_overlaps.cluster_pod_cidr",
                "params": {"cidr": "10.244.0.0/16", "name": "gpu-a"},
            }
        ]

        refused = await admin.post("/api/v1/domains", json={"name": "train", "cidr": "10.244.128.0/17"})
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("cidr_overlaps", "cidr")
        assert '"gpu-a"' in error["message"]
        assert "10.244.0.0/16" in error["message"]
        assert error["details"]["conflicts"][0]["name"] == "gpu-a"

        service_overlap = await admin.post("/api/v1/domains", json={"name": "train", "cidr": "10.100.0.0/16"})
        assert service_overlap.status_code == 422
        assert "service CIDR 10.96.0.0/12" in service_overlap.json()["error"]["message"]

        created = await admin.post("/api/v1/domains", json={"name": "train", "cidr": "10.200.0.0/16"})
        assert created.status_code == 201, created.text
        assert (await admin.get("/api/v1/domains")).json()["total"] == 1


async def test_domain_overlapping_another_domain_is_refused_naming_it(service: RunningService) -> None:
    async with service.client("root", role="admin") as admin:
        first = await admin.post(
            "/api/v1/domains", json={"name": "train", "cidr": "10.200.0.0/16", "description": "RL runs"}
        )
        assert first.status_code == 201

        inside = await admin.post("/api/v1/domains", json={"name": "eval", "cidr": "10.200.128.0/17"})
        around = await admin.post("/api/v1/domains", json={"name": "eval", "cidr": "10.0.0.0/8"})
        for refused in (inside, around):
            assert refused.status_code == 422
            error = refused.json()["error"]
            assert error["code"] == "cidr_overlaps"
            assert 'network domain "train"' in error["message"]
            assert "10.200.0.0/16" in error["message"]

        check = (await admin.post("/api/v1/domains:check", json={"cidr": "10.200.7.0/24"})).json()
        assert check["ok"] is False
        assert [(c["kind"], c["name"]) for c in check["conflicts"]] == [("domain", "train")]
        # Said in the user's language from key and params (ADR 0011).
        assert (check["conflicts"][0]["message_key"], check["conflicts"][0]["params"]) == (
            "cidr_overlaps.domain",
            {"cidr": "10.200.0.0/16", "name": "train"},
        )
        assert (await admin.get("/api/v1/domains")).json()["total"] == 1


async def test_domains_are_validated_listed_by_name_shown_and_deleted(service: RunningService) -> None:
    async with service.client("root", role="admin") as admin, service.client("alice") as alice:
        for name, cidr in (("zeta", "192.168.10.0/24"), ("alpha", "172.16.0.0/16"), ("mid", "10.100.0.0/16")):
            assert (await admin.post("/api/v1/domains", json={"name": name, "cidr": cidr})).status_code == 201

        listed = (await alice.get("/api/v1/domains")).json()
        assert [d["name"] for d in listed["items"]] == ["alpha", "mid", "zeta"]
        assert listed["items"][1]["capacity"] == 256 * 254
        assert listed["items"][1]["allocated"] == 0
        assert (await alice.get("/api/v1/domains", params={"page_size": 1, "page": 2})).json()["items"][0][
            "name"
        ] == "mid"

        shown = (await alice.get("/api/v1/domains/zeta")).json()
        assert (shown["cidr"], shown["capacity"], shown["free"], shown["created_by"]) == (
            "192.168.10.0/24",
            254,
            254,
            "root",
        )
        assert shown["clusters"] == []
        assert shown["tunnels"] == {"clusters": [], "links": []}

        refusals = [
            ({"name": "alpha", "cidr": "10.1.0.0/16"}, 409, "domain_exists", "name"),
            ({"name": "Bad_Name", "cidr": "10.1.0.0/16"}, 422, "invalid_domain_name", "name"),
            ({"name": "pub", "cidr": "8.8.8.0/24"}, 422, "cidr_not_private", "cidr"),
            ({"name": "pub", "cidr": "10.1.0.1/16"}, 422, "cidr_host_bits_set", "cidr"),
            ({"name": "pub", "cidr": "10.1.0.0/30"}, 422, "cidr_prefix_out_of_range", "cidr"),
            ({"name": "pub", "cidr": "not a cidr"}, 422, "invalid_cidr", "cidr"),
            ({"name": "pub"}, 422, "invalid_request", "cidr"),
        ]
        for body, status, code, field in refusals:
            response = await admin.post("/api/v1/domains", json=body)
            assert response.status_code == status, (body, response.text)
            assert (response.json()["error"]["code"], response.json()["error"]["field"]) == (code, field)

        forbidden = await alice.post("/api/v1/domains", json={"name": "mine", "cidr": "10.2.0.0/16"})
        assert forbidden.status_code == 403
        assert (await alice.delete("/api/v1/domains/zeta")).status_code == 403

        check = (await alice.post("/api/v1/domains:check", json={"cidr": "10.3.0.0/16"})).json()
        assert (check["ok"], check["cidr"], check["capacity"], check["error"]) == (
            True,
            "10.3.0.0/16",
            65024,
            None,
        )
        bad = (await alice.post("/api/v1/domains:check", json={"cidr": "1.2.3.0/24"})).json()
        assert bad["ok"] is False
        assert bad["error"]["code"] == "cidr_not_private"
        assert bad["error"]["message_key"] == "cidr_not_private"
        assert bad["error"]["params"]["network"] == "1.2.3.0/24"

        assert (await admin.delete("/api/v1/domains/zeta")).status_code == 204
        assert (await alice.get("/api/v1/domains/zeta")).status_code == 404
        assert (await admin.delete("/api/v1/domains/zeta")).status_code == 404
        assert [d["name"] for d in (await alice.get("/api/v1/domains")).json()["items"]] == ["alpha", "mid"]


async def test_cluster_whose_cidrs_come_to_overlap_a_domain_is_flagged_until_they_no_longer_do(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    async with service.client("root", role="admin") as admin:
        assert (
            await admin.post("/api/v1/domains", json={"name": "late", "cidr": "10.50.0.0/16"})
        ).status_code == 201

        async with TopicFollower(kafka_admin, names, "netdomain.domains") as domains:
            state = ClusterUpdated(name="gpu-b", pod_cidrs=["10.50.16.0/20"], service_cidrs=["172.20.0.0/16"])
            await publish(producer, names, event(state, "gpu-b", source="inventory"))
            await domains.wait_for(
                lambda _: domains.of_type("netdomain.domain.overlap_detected.v1"), what="overlap_detected"
            )
            (flagged,) = domains.of_type("netdomain.domain.overlap_detected.v1")
            assert flagged.data["name"] == "late"
            assert (flagged.data["cluster"], flagged.data["cluster_cidr"]) == ("gpu-b", "10.50.16.0/20")
            assert "gpu-b" in flagged.data["message"]
            assert domains.of_type("netdomain.domain.created.v1", name="late", cidr="10.50.0.0/16")

            shown = (await admin.get("/api/v1/domains/late")).json()
            assert shown["warnings"] == [flagged.data["message"]]
            assert shown["overlaps"][0]["cluster"] == "gpu-b"
            assert shown["overlaps"][0]["kind"] == "cluster_pod_cidr"

            # The same state again (a new event) flags nothing new.
            await publish(producer, names, event(state, "gpu-b", source="inventory"))
            moved = ClusterUpdated(name="gpu-b", pod_cidrs=["10.60.0.0/16"], service_cidrs=["172.20.0.0/16"])
            await publish(producer, names, event(moved, "gpu-b", source="inventory"))
            for _ in range(100):
                if not (await admin.get("/api/v1/domains/late")).json()["warnings"]:
                    break
                await asyncio.sleep(0.1)
            assert (await admin.get("/api/v1/domains/late")).json()["overlaps"] == []
            await domains.settle(0.5)
            assert len(domains.of_type("netdomain.domain.overlap_detected.v1")) == 1

            # A deleted cluster's CIDRs no longer conflict.
            check = (await admin.post("/api/v1/domains:check", json={"cidr": "10.60.0.0/17"})).json()
            assert check["ok"] is False
            gone = ClusterDeleted(name="gpu-b", pod_cidrs=["10.60.0.0/16"])
            await publish(producer, names, event(gone, "gpu-b", source="inventory"))
            assert (await eventually_check(admin, "10.60.0.0/17", ok=True))["ok"] is True
