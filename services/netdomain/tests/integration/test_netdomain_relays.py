"""A domain's direct link reported down is relayed through a third cluster, and back (ADR 0003, "Relays").

Real Kafka and PostgreSQL: the agents' link reports go in on each cluster's ``agent.reports.<cluster>``, the
domain's ``netdomain.tunnels.topology_changed.v1`` comes out with ``links[].via``. Short timings: relayed
after 1 s down, checked every 0.2 s.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from netdomain_it_support import TopicFollower, event, publish
from rlark_contracts import Envelope, TopicNames, encode
from rlark_contracts.events.agent import TunnelStateChanged
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested, AddressRequest
from rlark_devinfra.testing import RunningService, running_service, settings_for
from rlark_netdomain.main import DEFINITION
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration

TOPOLOGY = "netdomain.tunnels.topology_changed.v1"
DOMAIN = "relayed"


@contextlib.asynccontextmanager
async def netdomain(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, retry_s: float
) -> AsyncIterator[RunningService]:
    settings = settings_for(
        DEFINITION,
        database_url=database_url,
        kafka_bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix,
        netdomain_relay_after_s=1.0,
        netdomain_relay_retry_s=retry_s,
        netdomain_relay_check_s=0.2,
    )
    async with running_service(DEFINITION, settings) as running:
        async with running.client("root", role="admin") as admin:
            created = await admin.post("/api/v1/domains", json={"name": DOMAIN, "cidr": "10.71.0.0/24"})
            assert created.status_code == 201, created.text
        yield running


async def link(
    producer: AIOKafkaProducer, names: TopicNames, cluster: str, peer: str, state: str, error: str = ""
) -> None:
    """Report one link as ``cluster``'s agent would (on its own topic, keyed by its cluster)."""
    data = TunnelStateChanged(
        cluster=cluster, domain=DOMAIN, peer=peer, state=state, last_error=error, at=datetime.now(UTC)
    )
    await producer.send_and_wait(
        names.for_cluster("agent.reports", cluster),
        value=encode(event(data, cluster, source=f"agent/{cluster}")),
        key=cluster.encode(),
    )


async def legs_up(producer: AIOKafkaProducer, names: TopicNames, relay: str, *ends: str) -> None:
    for end in ends:
        await link(producer, names, end, relay, "up")
        await link(producer, names, relay, end, "up")


async def start_job(producer: AIOKafkaProducer, names: TopicNames, job_id: str, clusters: list[str]) -> None:
    workers = [AddressRequest(worker_id=f"{job_id}-w{i}", cluster=c) for i, c in enumerate(clusters)]
    data = AddressesRequested(job_id=job_id, domain=DOMAIN, workers=workers)
    await publish(producer, names, event(data, job_id, source="scheduler"))


async def end_job(producer: AIOKafkaProducer, names: TopicNames, job_id: str) -> None:
    data = AddressesReleaseRequested(job_id=job_id, domain=DOMAIN)
    await publish(producer, names, event(data, job_id, source="scheduler"))


def vias(topology: Envelope) -> dict[tuple[str, str], str | None]:
    return {(x["a"], x["b"]): x["via"] for x in topology.data["links"]}


class Topologies:
    def __init__(self, follower: TopicFollower) -> None:
        self.follower = follower

    @property
    def all(self) -> list[Envelope]:
        return self.follower.of_type(TOPOLOGY, domain=DOMAIN)

    async def wait(self, what: str, check: Any, timeout_s: float = 30.0) -> Envelope:
        """Wait for a new topology event satisfying ``check`` (only events after those seen so far)."""
        seen = len(self.all)
        await self.follower.wait_for(
            lambda _: any(check(t) for t in self.all[seen:]), timeout_s=timeout_s, what=what
        )
        return next(t for t in self.all[seen:] if check(t))


async def shown_links(service: RunningService) -> dict[tuple[str, str], str | None]:
    async with service.client("alice") as alice:
        detail = (await alice.get(f"/api/v1/domains/{DOMAIN}")).json()
    return {(x["a"], x["b"]): x["via"] for x in detail["tunnels"]["links"]}


async def test_a_broken_direct_link_is_relayed_once_and_tries_direct_again_after_the_retry(
    database_url: str,
    kafka_bootstrap: str,
    kafka_admin: KafkaAccess,
    topic_prefix: str,
    producer: AIOKafkaProducer,
    names: TopicNames,
) -> None:
    async with (
        netdomain(database_url, kafka_bootstrap, topic_prefix, retry_s=5.0) as service,
        TopicFollower(kafka_admin, names, "netdomain.tunnels") as out,
    ):
        topologies = Topologies(out)
        await start_job(producer, names, "job-1", ["alpha", "gamma", "relay"])
        await topologies.wait("three clusters", lambda t: t.data["clusters"] == ["alpha", "gamma", "relay"])
        await legs_up(producer, names, "relay", "alpha", "gamma")
        await link(producer, names, "alpha", "gamma", "down", "connect timed out")

        relayed = await topologies.wait("alpha–gamma via relay", lambda t: vias(t).get(("alpha", "gamma")))
        assert vias(relayed) == {
            ("alpha", "gamma"): "relay",
            ("alpha", "relay"): None,
            ("gamma", "relay"): None,
        }
        assert await shown_links(service) == vias(relayed)
        # The agents now report the relayed path; redeliveries and repeats publish nothing more.
        await link(producer, names, "alpha", "gamma", "up")
        await link(producer, names, "gamma", "alpha", "up")
        await out.settle(2.0)
        assert [vias(t).get(("alpha", "gamma")) for t in topologies.all] == [None, None, "relay"]

        direct = await topologies.wait(
            "alpha–gamma direct again", lambda t: not vias(t).get(("alpha", "gamma"), "absent")
        )
        assert datetime.now(UTC) - relayed.time >= timedelta(seconds=4.5)
        assert direct.data["clusters"] == ["alpha", "gamma", "relay"]
        async with service.client("alice") as alice:
            states = (await alice.get(f"/api/v1/domains/{DOMAIN}")).json()["tunnel_states"]
        assert {(s["cluster"], s["peer"]) for s in states} == {
            ("alpha", "relay"),
            ("relay", "alpha"),
            ("gamma", "relay"),
            ("relay", "gamma"),
        }  # the relayed path's reports are forgotten; the direct link must report afresh
        # The direct link still fails: relayed again.
        await link(producer, names, "gamma", "alpha", "down", "no route to host")
        await topologies.wait(
            "alpha–gamma relayed again", lambda t: vias(t).get(("alpha", "gamma")) == "relay"
        )


async def test_a_relay_leaving_the_domain_is_replaced_at_once_and_without_one_the_pair_goes_direct(
    database_url: str,
    kafka_bootstrap: str,
    kafka_admin: KafkaAccess,
    topic_prefix: str,
    producer: AIOKafkaProducer,
    names: TopicNames,
) -> None:
    async with (
        netdomain(database_url, kafka_bootstrap, topic_prefix, retry_s=600.0),
        TopicFollower(kafka_admin, names, "netdomain.tunnels") as out,
    ):
        topologies = Topologies(out)
        await start_job(producer, names, "job-ends", ["alpha", "gamma"])
        await start_job(producer, names, "job-q", ["q-relay"])
        await start_job(producer, names, "job-r", ["r-relay"])
        await topologies.wait("four clusters", lambda t: len(t.data["clusters"]) == 4)
        await legs_up(producer, names, "q-relay", "alpha", "gamma")
        await legs_up(producer, names, "r-relay", "alpha", "gamma")
        await link(producer, names, "alpha", "gamma", "down", "connect timed out")

        first = await topologies.wait("a relay", lambda t: vias(t).get(("alpha", "gamma")))
        assert vias(first)[("alpha", "gamma")] == "q-relay"  # the smallest name of the two

        await end_job(producer, names, "job-q")
        replaced = await topologies.wait("q-relay gone", lambda t: "q-relay" not in t.data["clusters"])
        assert vias(replaced)[("alpha", "gamma")] == "r-relay"  # in the same event: never direct between

        await link(producer, names, "r-relay", "gamma", "down", "connection reset")
        gone = await topologies.wait(
            "r-relay's leg down", lambda t: not vias(t).get(("alpha", "gamma"), "absent")
        )
        assert gone.data["clusters"] == ["alpha", "gamma", "r-relay"]
