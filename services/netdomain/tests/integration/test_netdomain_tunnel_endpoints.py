"""Agents' tunnel endpoint announcements are verified and republished in the domain's topology (ADR 0003):
only an announcement on the announcing cluster's own topic, from its agent, counts; repeats publish nothing;
a cluster leaving the topology loses its endpoint."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from netdomain_it_support import TopicFollower, event, publish
from rlark_contracts import Envelope, TopicNames, encode
from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested, AddressRequest
from rlark_devinfra.testing import RunningService, read_records
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration

TOPOLOGY = "netdomain.tunnels.topology_changed.v1"
# Two Ed25519 public keys made with ssh-keygen (public halves only).
KEY_ALPHA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP3yiTxNw3fHlFGX2r5jRchK8C9qY+atZh/2jsvtDFdE"
KEY_BETA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILMAtVRgMPrDGMAMklbEohgTJzb9mg8RyNS7m+Xyr6jF"
T0 = datetime.now(UTC) - timedelta(minutes=5)


def announcement(cluster: str, port: int, key: str, host: str = "127.0.0.1", at: int = 0) -> Envelope:
    data = TunnelEndpointAnnounced(
        cluster=cluster,
        domain="mesh",
        host=host,
        port=port,
        public_key=key,
        announced_at=T0 + timedelta(seconds=at),
    )
    return event(data, cluster, source=f"agent/{cluster}")


async def report(producer: AIOKafkaProducer, names: TopicNames, envelope: Envelope, on: str) -> None:
    """Publish ``envelope`` on ``on``'s own reports topic, which only that cluster's agent may write."""
    await producer.send_and_wait(
        names.for_cluster("agent.reports", on), value=encode(envelope), key=on.encode()
    )


def endpoints(topology: Envelope) -> dict[str, tuple[str, int, str]]:
    return {e["cluster"]: (e["host"], e["port"], e["public_key"]) for e in topology.data["endpoints"]}


async def start_job(producer: AIOKafkaProducer, names: TopicNames, job_id: str, clusters: list[str]) -> None:
    workers = [AddressRequest(worker_id=f"{job_id}-w{i}", cluster=c) for i, c in enumerate(clusters)]
    data = AddressesRequested(job_id=job_id, domain="mesh", workers=workers)
    await publish(producer, names, event(data, job_id, source="scheduler"))


async def test_verified_endpoints_are_republished_once_and_forged_ones_never(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames, kafka_admin: KafkaAccess
) -> None:
    async with service.client("root", role="admin") as admin:
        created = await admin.post("/api/v1/domains", json={"name": "mesh", "cidr": "10.70.0.0/24"})
        assert created.status_code == 201, created.text
    async with TopicFollower(kafka_admin, names, "netdomain.tunnels") as out:

        def topologies(_: Any = None) -> list[Envelope]:
            return out.of_type(TOPOLOGY, domain="mesh")

        await start_job(producer, names, "job-1", ["alpha", "beta"])
        await out.wait_for(lambda _: len(topologies()) == 2, what="topology with alpha and beta")
        assert topologies()[-1].data["clusters"] == ["alpha", "beta"]
        assert topologies()[-1].data["endpoints"] == []

        valid = announcement("alpha", 4001, KEY_ALPHA + " agent@alpha")
        await report(producer, names, valid, on="alpha")
        await out.wait_for(lambda _: len(topologies()) == 3, what="topology with alpha's endpoint")
        republished = topologies()[-1]
        assert endpoints(republished) == {"alpha": ("127.0.0.1", 4001, KEY_ALPHA)}  # comment dropped
        assert republished.data["links"] == [{"a": "alpha", "b": "beta", "via": None}]
        assert republished.causation_id == valid.id

        # On alpha's topic: beta's announcement as beta's agent, and as alpha's; a malformed key and
        # port on beta's own topic; the same announcement redelivered and re-announced with a heartbeat.
        await report(producer, names, announcement("beta", 6666, KEY_ALPHA, at=1), on="alpha")
        forged = announcement("beta", 6667, KEY_ALPHA, at=1).model_copy(update={"source": "agent/alpha"})
        await report(producer, names, forged, on="alpha")
        await report(producer, names, announcement("beta", 4002, "ssh-ed25519 AAAA", at=2), "beta")
        await report(producer, names, announcement("beta", 0, KEY_BETA, at=2), "beta")
        await report(producer, names, valid, on="alpha")
        await report(producer, names, announcement("alpha", 4001, KEY_ALPHA, at=30), on="alpha")
        # A later genuine announcement from beta shows the consumer carried on past the refused ones.
        await report(producer, names, announcement("beta", 4002, KEY_BETA, host="beta.local", at=3), "beta")
        await out.wait_for(lambda _: len(topologies()) == 4, what="topology with beta's endpoint")
        await out.settle(1.5)
        assert len(topologies()) == 4, [endpoints(t) for t in topologies()]
        assert endpoints(topologies()[-1]) == {
            "alpha": ("127.0.0.1", 4001, KEY_ALPHA),
            "beta": ("beta.local", 4002, KEY_BETA),
        }

        dead = await read_records(kafka_admin, names.physical("agent.reports.dlq"), expect=4)
        assert len(dead) == 4
        refused = {
            json.loads(value)["data"]["port"]: headers["rlark-error"].decode() for _, value, headers in dead
        }
        assert "'agent/beta' is not the producer of agent.reports.alpha" in refused[6666]
        assert "data.cluster 'beta' is not 'alpha'" in refused[6667]
        assert refused[4002].startswith("PoisonMessage: tunnel endpoint refused: public_key:")
        assert refused[0].startswith("PoisonMessage: tunnel endpoint refused: port:")
        assert not any("AAAAC3" in error for error in refused.values())  # no key material in errors

        # beta's job ends: beta leaves the topology and its endpoint goes with it; its agent's
        # heartbeat re-announcement while it is out changes nothing.
        release = AddressesReleaseRequested(job_id="job-1", domain="mesh")
        await start_job(producer, names, "job-2", ["alpha"])
        await publish(producer, names, event(release, "job-1", source="scheduler"))
        await out.wait_for(lambda _: topologies()[-1].data["clusters"] == ["alpha"], what="beta leaving")
        assert endpoints(topologies()[-1]) == {"alpha": ("127.0.0.1", 4001, KEY_ALPHA)}
        seen = len(topologies())
        while_out = announcement("beta", 4002, KEY_BETA, host="beta.local", at=40)
        await report(producer, names, while_out, "beta")
        await service.consumed(while_out.id)  # agent reports and scheduler events ride different topics

        # beta comes back: no endpoint until its agent announces again.
        await start_job(producer, names, "job-3", ["beta"])
        await out.wait_for(lambda _: len(topologies()) == seen + 1, what="beta rejoining")
        assert topologies()[-1].data["clusters"] == ["alpha", "beta"]
        assert endpoints(topologies()[-1]) == {"alpha": ("127.0.0.1", 4001, KEY_ALPHA)}
        await report(producer, names, announcement("beta", 4003, KEY_BETA, at=50), "beta")
        await out.wait_for(lambda _: len(topologies()) == seen + 2, what="beta's new endpoint")
        assert endpoints(topologies()[-1])["beta"] == ("127.0.0.1", 4003, KEY_BETA)
