"""DomainTunnels' desired state: peers only once netdomain republished their verified endpoint, one
dialing side, remote addresses by cluster; the agent's tunnel consumer ignores raw announcements."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from ipaddress import IPv4Address
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlark_contracts import encode, new_envelope
from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_contracts.events.netdomain import (
    AddressesAllocated,
    AddressesReleased,
    TunnelEndpoint,
    TunnelTopologyChanged,
    WorkerAddress,
)
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.tunnels import DomainTunnels, TunnelOptions
from rlark_tunnel_agent.tunnel import LinkState, PeerSpec, PeerState, TunnelState, TunnelSupervisor


async def _ignore(_: TunnelEndpointAnnounced) -> None:
    return None


def endpoint(cluster: str, port: int, host: str = "127.0.0.1") -> TunnelEndpoint:
    return TunnelEndpoint(cluster=cluster, host=host, port=port, public_key=f"ssh-ed25519 KEY{cluster}")


def topology(clusters: list[str], *endpoints: TunnelEndpoint) -> TunnelTopologyChanged:
    return TunnelTopologyChanged(
        domain="d1", cidr="10.200.0.0/16", clusters=clusters, links=[], endpoints=list(endpoints)
    )


def announced(cluster: str, port: int) -> TunnelEndpointAnnounced:
    return TunnelEndpointAnnounced(
        cluster=cluster,
        domain="d1",
        host="127.0.0.1",
        port=port,
        public_key=f"ssh-ed25519 KEY{cluster}",
        announced_at=datetime.now(UTC),
    )


class _Recorder(TunnelSupervisor):
    """A supervisor that records the peers each topology update asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[list[PeerSpec]] = []

    async def update_topology(self, domain: str, peers: Any, remote: Any) -> None:
        self.updates.append(list(peers))


async def test_a_peer_is_linked_once_its_verified_endpoint_arrives_and_the_smaller_name_dials(
    tmp_path: Path,
) -> None:
    beta = DomainTunnels("beta", tmp_path, _ignore)
    await beta.on_topology(topology(["alpha", "beta", "gamma"]))
    assert beta.peers("d1") == []
    # Its own endpoint, and one of a cluster outside the topology, are not peers.
    await beta.on_topology(
        topology(
            ["alpha", "beta", "gamma"],
            endpoint("alpha", 4001),
            endpoint("beta", 4002),
            endpoint("gamma", 4003),
            endpoint("delta", 4004),
        )
    )
    peers = {p.cluster: p for p in beta.peers("d1")}
    assert set(peers) == {"alpha", "gamma"}
    assert peers["alpha"].endpoint is None  # alpha dials beta
    assert peers["gamma"].endpoint == ("127.0.0.1", 4003)
    assert peers["gamma"].public_key == "ssh-ed25519 KEYgamma"


async def test_each_topology_replaces_the_endpoints_so_changed_and_dropped_ones_follow(
    tmp_path: Path,
) -> None:
    alpha = DomainTunnels("alpha", tmp_path, _ignore)
    await alpha.on_topology(
        topology(["alpha", "beta", "gamma"], endpoint("beta", 4002), endpoint("gamma", 1))
    )
    await alpha.on_topology(topology(["alpha", "beta", "gamma"], endpoint("beta", 5002, host="b.local")))
    assert [(p.cluster, p.endpoint) for p in alpha.peers("d1")] == [("beta", ("b.local", 5002))]
    await alpha.on_topology(topology(["alpha", "beta"]))  # an older netdomain's event: no endpoints
    assert alpha.peers("d1") == []


async def test_the_tunnel_consumer_links_peers_from_topologies_and_never_from_announcements(
    tmp_path: Path,
) -> None:
    """A forged announcement on agent.reports (or one that reached this topic any other way) is
    not acted on; the topology's verified endpoint is."""
    recorder = _Recorder()
    tunnels = DomainTunnels("alpha", tmp_path, _ignore, supervisor=recorder)
    agent = Agent(
        gateway_url="http://unused",
        credential="unused",
        make_driver=lambda *_: None,  # type: ignore[arg-type,return-value]
        runtime="local",
        state_dir=tmp_path,
    )
    agent.tunnels = tunnels
    records = [
        SimpleNamespace(
            topic="netdomain.tunnels", value=encode(new_envelope(data, source="netdomain", subject="d1"))
        )
        for data in (
            topology(["alpha", "beta"]),
            announced("beta", 6666),
            topology(["alpha", "beta"], endpoint("beta", 4002)),
        )
    ]

    class _Consumer:
        def __init__(self) -> None:
            self.batches: list[dict[str, list[Any]]] = [{"tp": records}]
            self.commits = 0

        async def getmany(self, **_: Any) -> dict[str, list[Any]]:
            if not self.batches:
                agent.stop()
                await asyncio.sleep(0)
                return {}
            return self.batches.pop(0)

        async def commit(self) -> None:
            self.commits += 1

    consumer = _Consumer()
    await asyncio.wait_for(agent._consume_tunnels(consumer), 5)
    assert consumer.commits == 0  # no consumer group: every start reads the topics from the beginning
    assert [[(p.cluster, p.endpoint) for p in update] for update in recorder.updates] == [
        [],
        [("beta", ("127.0.0.1", 4002))],
    ]


async def test_remote_addresses_follow_allocations_and_releases(tmp_path: Path) -> None:
    alpha = DomainTunnels("alpha", tmp_path, _ignore)
    allocated = AddressesAllocated(
        job_id="j1",
        domain="d1",
        cidr="10.200.0.0/16",
        addresses=[
            WorkerAddress(worker_id="w0", cluster="alpha", address="10.200.0.1"),
            WorkerAddress(worker_id="w1", cluster="beta", address="10.200.0.2"),
            WorkerAddress(worker_id="w2", cluster="beta", address="10.200.0.3"),
        ],
    )
    await alpha.on_allocated(allocated)
    assert alpha._remote("d1") == {"beta": [IPv4Address("10.200.0.2"), IPv4Address("10.200.0.3")]}
    await alpha.on_topology(topology(["alpha", "beta"], endpoint("beta", 4002)))
    assert [p.cluster for p in alpha.peers("d1")] == ["beta"]
    await alpha.on_released(AddressesReleased(job_id="j1", domain="d1"))
    assert alpha._remote("d1") == {"beta": []}  # still in the topology: linked, no addresses


class _Links(TunnelSupervisor):
    """A supervisor whose forwarders' peer states the test sets."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[PeerState] = []

    def states(self) -> list[TunnelState]:
        if not self.peers:
            return []
        return [TunnelState("d1", "alpha", "10.200.0.0/16", 4001, peers=list(self.peers))]


def _peer(state: LinkState, error: str | None = None, sent: int = 0, received: int = 0) -> PeerState:
    return PeerState(
        cluster="beta",
        state=state,
        dials=True,
        rtt_ms=0.5 if state is LinkState.UP else None,
        last_error=error,
        connects=1,
        up_since=None,
        counters={"bytes_out": sent, "bytes_in": received},
    )


async def test_link_reports_follow_state_changes_only_and_refresh_when_asked(tmp_path: Path) -> None:
    links = _Links()
    no_bring_up_grace = TunnelOptions(dead_after_s=0.0)
    alpha = DomainTunnels("alpha", tmp_path, _ignore, no_bring_up_grace, supervisor=links)
    links.peers = [_peer(LinkState.CONNECTING)]
    assert alpha.link_reports() == []  # first connection attempt, no error: not an outage
    links.peers = [_peer(LinkState.UP, sent=10, received=20)]
    [up] = alpha.link_reports()
    assert (up.cluster, up.domain, up.peer, up.state) == ("alpha", "d1", "beta", "up")
    assert (up.rtt_ms, up.bytes_sent, up.bytes_received, up.last_error) == (0.5, 10, 20, "")
    links.peers = [_peer(LinkState.UP, sent=99, received=99)]
    assert alpha.link_reports() == []  # same state: nothing new
    assert alpha.link_reports(refresh_after_s=3600) == []
    assert [r.bytes_sent for r in alpha.link_reports(refresh_after_s=0)] == [99]
    links.peers = [_peer(LinkState.CONNECTING, error="Connection reset by peer")]
    [down] = alpha.link_reports()
    assert (down.state, down.last_error, down.rtt_ms) == ("down", "Connection reset by peer", None)
    links.peers = []
    [closed] = alpha.link_reports()  # the link is gone here: said once, then forgotten
    assert (closed.domain, closed.peer, closed.state, closed.bytes_sent) == ("d1", "beta", "closed", 0)
    assert alpha.link_reports() == []
    assert alpha.link_reports(refresh_after_s=0) == []
    links.peers = [_peer(LinkState.DOWN, error="refused")]
    assert [r.state for r in alpha.link_reports()] == ["down"]  # the domain came back: reported afresh


async def test_a_link_coming_up_is_not_reported_down_for_a_first_failed_dial_within_dead_after(
    tmp_path: Path,
) -> None:
    links = _Links()
    alpha = DomainTunnels("alpha", tmp_path, _ignore, TunnelOptions(dead_after_s=0.3), supervisor=links)
    links.peers = [_peer(LinkState.CONNECTING, error="Connection refused")]  # peer not listening yet
    assert alpha.link_reports() == []
    links.peers = [_peer(LinkState.UP)]
    assert [r.state for r in alpha.link_reports()] == ["up"]  # never an outage

    beta = DomainTunnels("beta", tmp_path, _ignore, TunnelOptions(dead_after_s=0.3), supervisor=links)
    links.peers = [_peer(LinkState.CONNECTING, error="Connection refused")]
    assert beta.link_reports() == []
    await asyncio.sleep(0.35)
    [down] = beta.link_reports()  # still failing after dead_after_s: an outage, with its error
    assert (down.state, down.last_error) == ("down", "Connection refused")
