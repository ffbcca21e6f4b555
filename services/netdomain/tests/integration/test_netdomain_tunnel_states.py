"""Tunnel link states reported by the agents are shown with their domain (GET /api/v1/domains/{name})."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from netdomain_it_support import event
from rlark_contracts import TopicNames, encode
from rlark_contracts.events.agent import TunnelStateChanged
from rlark_devinfra.testing import RunningService

pytestmark = pytest.mark.integration


async def report(
    producer: AIOKafkaProducer, names: TopicNames, data: TunnelStateChanged, on: str = ""
) -> None:
    """Publish as the agent of ``on`` (by default the data's cluster) would: on its own topic, keyed by
    its cluster."""
    on = on or data.cluster
    await producer.send_and_wait(
        names.for_cluster("agent.reports", on),
        value=encode(event(data, data.cluster, source=f"agent/{on}")),
        key=on.encode(),
    )


def link(
    cluster: str, peer: str, state: str, at: datetime, error: str = "", **fields: Any
) -> TunnelStateChanged:
    return TunnelStateChanged(
        cluster=cluster, domain="dom-a", peer=peer, state=state, last_error=error, at=at, **fields
    )


async def shown_states(service: RunningService, count: int) -> list[dict[str, Any]]:
    async with service.client("alice") as alice:
        for _ in range(200):
            states: list[dict[str, Any]] = (await alice.get("/api/v1/domains/dom-a")).json()["tunnel_states"]
            if len(states) >= count:
                return states
            await asyncio.sleep(0.1)
    raise AssertionError(f"expected {count} tunnel states, got {states}")


async def test_each_agents_last_report_per_link_is_shown_with_the_domain(
    service: RunningService, producer: AIOKafkaProducer, names: TopicNames
) -> None:
    async with service.client("root", role="admin") as admin:
        response = await admin.post("/api/v1/domains", json={"name": "dom-a", "cidr": "10.100.0.0/16"})
        assert response.status_code == 201, response.text
        assert response.json()["tunnel_states"] == []
    t0 = datetime.now(UTC) - timedelta(seconds=30)
    await report(
        producer, names, link("alpha", "beta", "up", t0, rtt_ms=0.4, bytes_sent=10, bytes_received=20)
    )
    await report(producer, names, link("beta", "alpha", "down", t0 + timedelta(seconds=5), "reset by peer"))
    await report(producer, names, link("beta", "alpha", "down", t0 + timedelta(seconds=9), "refused"))
    # A report about another cluster from alpha's agent, and one on an unknown domain, change nothing.
    await report(producer, names, link("gamma", "alpha", "down", t0, "x"), on="alpha")
    await report(
        producer,
        names,
        TunnelStateChanged(cluster="alpha", domain="nope", peer="beta", state="down", at=t0),
    )
    await report(producer, names, link("alpha", "gamma", "up", t0 + timedelta(seconds=10)))

    states = {(s["cluster"], s["peer"]): s for s in await shown_states(service, 3)}
    assert set(states) == {("alpha", "beta"), ("beta", "alpha"), ("alpha", "gamma")}
    up = states[("alpha", "beta")]
    assert (up["state"], up["rtt_ms"], up["bytes_sent"], up["bytes_received"]) == ("up", 0.4, 10, 20)
    down = states[("beta", "alpha")]
    assert (down["state"], down["last_error"]) == ("down", "refused")
    assert datetime.fromisoformat(down["since"]) == t0 + timedelta(seconds=5)  # down since the first
    assert datetime.fromisoformat(down["reported_at"]) == t0 + timedelta(seconds=9)

    # alpha's side of alpha-gamma closes (no workers of the domain left there): the row goes; an
    # older "closed" than the stored report changes nothing.
    await report(producer, names, link("alpha", "beta", "closed", t0 - timedelta(seconds=1)))
    await report(producer, names, link("alpha", "gamma", "closed", t0 + timedelta(seconds=11)))
    async with service.client("alice") as alice:
        for _ in range(200):
            shown = (await alice.get("/api/v1/domains/dom-a")).json()["tunnel_states"]
            if ("alpha", "gamma") not in {(s["cluster"], s["peer"]) for s in shown}:
                break
            await asyncio.sleep(0.1)
    assert {(s["cluster"], s["peer"]) for s in shown} == {("alpha", "beta"), ("beta", "alpha")}
