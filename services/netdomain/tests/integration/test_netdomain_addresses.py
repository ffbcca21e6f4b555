"""Virtual IP allocation through Kafka and PostgreSQL: one stable address per worker, idempotent
under redelivery, freed on release, all or nothing with a reason when the domain is exhausted; the
tunnel topology follows the clusters that host the domain's workers."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from netdomain_it_support import TopicFollower, event, publish
from rlark_contracts import Envelope, TopicNames
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested, AddressRequest
from rlark_devinfra.testing import RunningService
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration

ALLOCATED = "netdomain.addresses.allocated.v1"
FAILED = "netdomain.addresses.allocation_failed.v1"
RELEASED = "netdomain.addresses.released.v1"
TOPOLOGY = "netdomain.tunnels.topology_changed.v1"


def request(job_id: str, domain: str, workers: list[tuple[str, str]]) -> Envelope:
    data = AddressesRequested(
        job_id=job_id,
        domain=domain,
        workers=[AddressRequest(worker_id=w, cluster=c) for w, c in workers],
    )
    return event(data, job_id, source="scheduler")


def release(job_id: str, domain: str) -> Envelope:
    return event(AddressesReleaseRequested(job_id=job_id, domain=domain), job_id, source="scheduler")


def addresses(envelope: Envelope) -> dict[str, str]:
    return {a["worker_id"]: a["address"] for a in envelope.data["addresses"]}


async def test_allocation_is_stable_idempotent_and_released_with_the_tunnel_topology(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    async with service.client("root", role="admin") as admin:
        assert (
            await admin.post("/api/v1/domains", json={"name": "alloc", "cidr": "10.60.0.0/24"})
        ).status_code == 201
        workers = [("job-1-header-0", "gpu-a"), ("job-1-actor-0", "gpu-b"), ("job-1-actor-1", "gpu-b")]
        first = request("job-1", "alloc", workers)

        async with TopicFollower(kafka_admin, names, "netdomain.allocations", "netdomain.tunnels") as out:
            await publish(producer, names, first)
            await publish(producer, names, first)  # the same event delivered twice
            await out.wait_for(lambda _: out.of_type(ALLOCATED), what="allocated")
            await publish(producer, names, request("job-1", "alloc", workers))  # the scheduler asks again
            await out.wait_for(lambda _: len(out.of_type(ALLOCATED)) == 2, what="second allocated")
            await out.settle(1.0)

            given = out.of_type(ALLOCATED, job_id="job-1")
            assert len(given) == 2  # the duplicate delivery produced nothing
            assert addresses(given[0]) == {
                "job-1-header-0": "10.60.0.1",
                "job-1-actor-0": "10.60.0.2",
                "job-1-actor-1": "10.60.0.3",
            }
            assert addresses(given[1]) == addresses(given[0])
            assert given[0].data["cidr"] == "10.60.0.0/24"
            assert given[0].causation_id == first.id
            assert [a["cluster"] for a in given[0].data["addresses"]] == ["gpu-a", "gpu-b", "gpu-b"]

            shown = (await admin.get("/api/v1/domains/alloc")).json()
            assert (shown["allocated"], shown["free"]) == (3, 251)
            assert shown["clusters"] == [
                {"cluster": "gpu-a", "allocated": 1},
                {"cluster": "gpu-b", "allocated": 2},
            ]
            assert shown["tunnels"] == {
                "clusters": ["gpu-a", "gpu-b"],
                "links": [{"a": "gpu-a", "b": "gpu-b", "via": None}],
            }
            await out.wait_for(lambda _: len(out.of_type(TOPOLOGY, domain="alloc")) == 2, what="topology")
            topologies = out.of_type(TOPOLOGY, domain="alloc")
            assert [t.data["clusters"] for t in topologies] == [[], ["gpu-a", "gpu-b"]]
            assert topologies[1].data["links"] == [{"a": "gpu-a", "b": "gpu-b", "via": None}]

            in_use = await admin.delete("/api/v1/domains/alloc")
            assert in_use.status_code == 409
            assert in_use.json()["error"]["code"] == "domain_in_use"
            assert "job-1" in in_use.json()["error"]["message"]

            await publish(producer, names, release("job-1", "alloc"))
            await out.wait_for(lambda _: out.of_type(RELEASED, job_id="job-1"), what="released")
            await out.wait_for(lambda _: len(out.of_type(TOPOLOGY, domain="alloc")) == 3, what="topology")
            assert out.of_type(TOPOLOGY, domain="alloc")[-1].data["clusters"] == []
            assert (await admin.get("/api/v1/domains/alloc")).json()["allocated"] == 0

            # Freed addresses are given again, lowest first.
            await publish(
                producer, names, request("job-2", "alloc", [("job-2-w0", "gpu-c"), ("job-2-w1", "gpu-c")])
            )
            await out.wait_for(lambda _: out.of_type(ALLOCATED, job_id="job-2"), what="job-2 allocated")
            assert addresses(out.of_type(ALLOCATED, job_id="job-2")[0]) == {
                "job-2-w0": "10.60.0.1",
                "job-2-w1": "10.60.0.2",
            }
            # The last freed address first, then the next never used one.
            await publish(
                producer, names, request("job-3", "alloc", [("job-3-w0", "gpu-c"), ("job-3-w1", "gpu-c")])
            )
            await out.wait_for(lambda _: out.of_type(ALLOCATED, job_id="job-3"), what="job-3 allocated")
            assert addresses(out.of_type(ALLOCATED, job_id="job-3")[0]) == {
                "job-3-w0": "10.60.0.3",
                "job-3-w1": "10.60.0.4",
            }
            await publish(producer, names, release("job-3", "alloc"))
            await publish(producer, names, release("job-2", "alloc"))
            await publish(producer, names, release("job-2", "alloc"))  # releasing twice is harmless
            await out.wait_for(
                lambda _: len(out.of_type(RELEASED, job_id="job-2")) == 2, what="job-2 released"
            )
            await out.wait_for(lambda _: out.of_type(RELEASED, job_id="job-3"), what="job-3 released")

        assert (await admin.delete("/api/v1/domains/alloc")).status_code == 204


async def test_exhausted_or_unknown_domain_fails_the_allocation_with_a_reason(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    async with service.client("root", role="admin") as admin:
        assert (
            await admin.post("/api/v1/domains", json={"name": "tiny", "cidr": "10.70.0.0/28"})
        ).status_code == 201
        assert (
            await admin.post("/api/v1/domains", json={"name": "wide", "cidr": "10.80.0.0/23"})
        ).status_code == 201

        async with TopicFollower(kafka_admin, names, "netdomain.allocations") as out:
            # Different jobs may land on different partitions: wait for each answer in turn.
            await publish(producer, names, request("big", "tiny", [(f"big-{i}", "gpu-a") for i in range(15)]))
            await out.wait_for(lambda _: out.of_type(FAILED, job_id="big"), what="big refused")
            await publish(
                producer, names, request("fits", "tiny", [(f"fits-{i}", "gpu-a") for i in range(14)])
            )
            await out.wait_for(lambda _: out.of_type(ALLOCATED, job_id="fits"), what="fits allocated")
            await publish(producer, names, request("one", "tiny", [("one-0", "gpu-a")]))
            await publish(producer, names, request("lost", "nope", [("lost-0", "gpu-a")]))
            await publish(
                producer, names, request("many", "wide", [(f"many-{i}", "gpu-a") for i in range(300)])
            )
            await out.wait_for(lambda e: len(e) >= 5, what="five answers")

            (big,) = out.of_type(FAILED, job_id="big")
            assert big.data["code"] == "address_pool_exhausted"
            assert '"tiny"' in big.data["reason"]
            assert "cannot provide 15 addresses" in big.data["reason"]
            assert "14 usable" in big.data["reason"]
            assert len(addresses(out.of_type(ALLOCATED, job_id="fits")[0])) == 14
            (one,) = out.of_type(FAILED, job_id="one")
            assert one.data["code"] == "address_pool_exhausted"
            assert "no free address" in one.data["reason"]
            (lost,) = out.of_type(FAILED, job_id="lost")
            assert (lost.data["code"], lost.data["domain"]) == ("domain_not_found", "nope")
            assert '"nope" does not exist' in lost.data["reason"]

            wide = list(addresses(out.of_type(ALLOCATED, job_id="many")[0]).values())
            assert len(set(wide)) == 300
            assert not [a for a in wide if a.endswith((".0", ".255"))]
            assert "10.80.0.254" in wide
            assert "10.80.1.1" in wide

            shown = (await admin.get("/api/v1/domains/tiny")).json()
            assert (shown["allocated"], shown["free"]) == (14, 0)

            # Once addresses are released, the job that waited gets one.
            await publish(producer, names, release("fits", "tiny"))
            await out.wait_for(lambda _: out.of_type(RELEASED, job_id="fits"), what="released")
            await publish(producer, names, request("one", "tiny", [("one-0", "gpu-a")]))
            await out.wait_for(lambda _: out.of_type(ALLOCATED, job_id="one"), what="one allocated")
            assert addresses(out.of_type(ALLOCATED, job_id="one")[0]) == {"one-0": "10.70.0.1"}
