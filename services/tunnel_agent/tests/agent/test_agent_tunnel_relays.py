"""DomainTunnels applies the relays netdomain decides (``TunnelLink.via``, ADR 0003 "Relays").

A link ``(alpha, gamma, via=relay)`` makes each end's peer spec ``via="relay"`` (no dialing, no link,
addresses routed through relay's link), the relay keeps direct links to both, and a later topology
without ``via`` brings the direct peer back. The last test runs three real forwarders over asyncssh
on loopback, configured only from what DomainTunnels derives, with socket pairs standing in for the
workers' TUN devices: packets cross alpha → relay → gamma and back, every hop's reverse-path filter
holding, and a forged source is still dropped. No root needed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest
from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_contracts.events.netdomain import (
    AddressesAllocated,
    TunnelEndpoint,
    TunnelLink,
    TunnelTopologyChanged,
    WorkerAddress,
)
from rlark_tunnel_agent.agent.tunnels import DomainTunnels, TunnelOptions
from rlark_tunnel_agent.tunnel import LinkState, PeerSpec, PeerState, TunnelState, TunnelSupervisor
from rlark_tunnel_agent.tunnel.forwarder import ForwarderConfig, TunnelForwarder
from rlark_tunnel_agent.tunnel.keys import public_line
from rlark_tunnel_agent.tunnel.probe import udp_datagram
from rlark_tunnel_agent.tunnel.routing import VNET_HDR_LEN
from rlark_tunnel_agent.tunnel.tun import TunDevice

CIDR = "10.200.0.0/16"
CLUSTERS = ["alpha", "gamma", "relay"]


async def _ignore(_: TunnelEndpointAnnounced) -> None:
    return None


def endpoint(cluster: str, port: int, key: str = "") -> TunnelEndpoint:
    return TunnelEndpoint(
        cluster=cluster, host="127.0.0.1", port=port, public_key=key or f"ssh-ed25519 KEY{cluster}"
    )


def topology(relayed: bool, *endpoints: TunnelEndpoint) -> TunnelTopologyChanged:
    return TunnelTopologyChanged(
        domain="d1",
        cidr=CIDR,
        clusters=CLUSTERS,
        links=[
            TunnelLink(a="alpha", b="gamma", via="relay" if relayed else None),
            TunnelLink(a="alpha", b="relay"),
            TunnelLink(a="gamma", b="relay"),
        ],
        endpoints=list(endpoints) or [endpoint(c, 4000 + i) for i, c in enumerate(CLUSTERS)],
    )


def by_cluster(specs: list[PeerSpec]) -> dict[str, tuple[tuple[str, int] | None, str | None]]:
    return {p.cluster: (p.endpoint, p.via) for p in specs}


async def test_a_relayed_peer_is_reached_through_its_relay_and_never_dialed(tmp_path: Path) -> None:
    alpha, gamma, relay = (DomainTunnels(c, tmp_path / c, _ignore) for c in CLUSTERS)
    for tunnels in (alpha, gamma, relay):
        await tunnels.on_topology(topology(relayed=True))

    assert by_cluster(alpha.peers("d1")) == {
        "gamma": (None, "relay"),
        "relay": (("127.0.0.1", 4002), None),  # alpha < relay: alpha dials
    }
    assert by_cluster(gamma.peers("d1")) == {"alpha": (None, "relay"), "relay": (("127.0.0.1", 4002), None)}
    # The relay itself keeps plain direct links to both ends (it accepts both: its name sorts last).
    assert by_cluster(relay.peers("d1")) == {"alpha": (None, None), "gamma": (None, None)}


async def test_a_relayed_peer_needs_no_endpoint_of_its_own_and_returns_to_direct_with_one(
    tmp_path: Path,
) -> None:
    alpha = DomainTunnels("alpha", tmp_path, _ignore)
    await alpha.on_topology(topology(True, endpoint("relay", 4002)))  # gamma not announced yet
    assert by_cluster(alpha.peers("d1")) == {"gamma": (None, "relay"), "relay": (("127.0.0.1", 4002), None)}

    await alpha.on_topology(topology(False, endpoint("relay", 4002), endpoint("gamma", 4001)))
    assert by_cluster(alpha.peers("d1")) == {
        "gamma": (("127.0.0.1", 4001), None),
        "relay": (("127.0.0.1", 4002), None),
    }


class _Links(TunnelSupervisor):
    """A supervisor whose forwarder's (alpha's) peer links the test sets."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[PeerState] = []

    def states(self) -> list[TunnelState]:
        return [TunnelState("d1", "alpha", CIDR, 4000, peers=list(self.peers))]


def link(cluster: str, state: LinkState, error: str | None = None) -> PeerState:
    return PeerState(
        cluster=cluster,
        state=state,
        dials=True,
        rtt_ms=0.5 if state is LinkState.UP else None,
        last_error=error,
        connects=1,
        up_since=None,
        counters={"bytes_out": 7, "bytes_in": 9},
    )


async def test_a_relayed_peer_is_reported_with_the_state_of_the_path_through_its_relay(
    tmp_path: Path,
) -> None:
    links = _Links()
    alpha = DomainTunnels("alpha", tmp_path, _ignore, TunnelOptions(dead_after_s=0.0), supervisor=links)
    await alpha.on_topology(topology(relayed=False))
    links.peers = [link("gamma", LinkState.DOWN, "connect timed out"), link("relay", LinkState.UP)]
    assert {(r.peer, r.state) for r in alpha.link_reports()} == {("gamma", "down"), ("relay", "up")}

    await alpha.on_topology(topology(relayed=True))
    links.peers = [link("relay", LinkState.UP)]  # the direct link to gamma is gone
    [path] = alpha.link_reports()
    assert (path.peer, path.state, path.last_error) == ("gamma", "up", "")
    assert (path.rtt_ms, path.bytes_sent, path.bytes_received) == (None, 0, 0)  # not gamma's own figures
    assert alpha.link_reports() == []

    links.peers = [link("relay", LinkState.CONNECTING, "Connection reset by peer")]
    reports = {r.peer: r for r in alpha.link_reports()}
    assert (reports["gamma"].state, reports["gamma"].last_error) == (
        "down",
        "via relay: Connection reset by peer",
    )
    assert reports["relay"].last_error == "Connection reset by peer"

    # Back to direct: the new direct link is reported afresh — not while it first connects.
    await alpha.on_topology(topology(relayed=False))
    links.peers = [link("gamma", LinkState.CONNECTING), link("relay", LinkState.UP)]
    assert [r.peer for r in alpha.link_reports()] == ["relay"]
    links.peers = [link("gamma", LinkState.UP), link("relay", LinkState.UP)]
    assert [(r.peer, r.state, r.rtt_ms) for r in alpha.link_reports()] == [("gamma", "up", 0.5)]


# --- three real forwarders ---------------------------------------------------------------------------

VIPS = {"alpha": "10.200.0.2", "gamma": "10.200.2.2", "relay": "10.200.1.2"}


def packet(src: str, dst: str, payload: bytes = b"hello") -> bytes:
    """A UDP/IPv4 packet as a TUN device hands it out: a zeroed virtio-net header first."""
    return bytes(VNET_HDR_LEN) + udp_datagram(src, dst, 9999, payload)


async def receive(sock: socket.socket, timeout_s: float = 5.0) -> bytes:
    async with asyncio.timeout(timeout_s):
        return await asyncio.get_running_loop().sock_recv(sock, 70000)


class Mesh:
    def __init__(self) -> None:
        self.tunnels: dict[str, DomainTunnels] = {}
        self.forwarders: dict[str, TunnelForwarder] = {}
        self.workers: dict[str, socket.socket] = {}
        self.endpoints: list[TunnelEndpoint] = []

    async def apply(self, event: TunnelTopologyChanged) -> None:
        """What the agent does on a topology event: derive peers and addresses, hand them over."""
        for cluster, tunnels in self.tunnels.items():
            await tunnels.on_topology(event)
            await self.forwarders[cluster].set_peers(tunnels.peers("d1"))
            for peer, addresses in tunnels._remote("d1").items():
                self.forwarders[cluster].set_remote_addresses(peer, addresses)


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[Mesh]:
    mesh = Mesh()
    allocated = AddressesAllocated(
        job_id="j1",
        domain="d1",
        cidr=CIDR,
        addresses=[WorkerAddress(worker_id=f"{c}-w", cluster=c, address=v) for c, v in VIPS.items()],
    )
    try:
        for cluster in CLUSTERS:
            tunnels = DomainTunnels(cluster, tmp_path / cluster, _ignore)
            mesh.tunnels[cluster] = tunnels
            config = ForwarderConfig(
                domain="d1",
                network=IPv4Network(CIDR),
                cluster=cluster,
                listen_host="127.0.0.1",
                ping_interval_s=0.1,
                dead_after_s=0.8,
                backoff_max_s=0.2,
                connect_timeout_s=1.0,
            )
            forwarder = TunnelForwarder(config, await tunnels.domain_key("d1"))
            mesh.forwarders[cluster] = forwarder
            port = await forwarder.start()
            mesh.endpoints.append(endpoint(cluster, port, public_line(await tunnels.domain_key("d1"))))
            await tunnels.on_allocated(allocated)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.setblocking(False)  # the forwarder reads until EAGAIN, as from a TUN fd
            theirs.setblocking(False)
            forwarder.attach_device(
                f"{cluster}-w", TunDevice(ours.detach(), "rlark0", None), IPv4Address(VIPS[cluster])
            )
            mesh.workers[cluster] = theirs
        yield mesh
    finally:
        for forwarder in mesh.forwarders.values():
            await forwarder.stop()
        for sock in mesh.workers.values():
            sock.close()


async def test_packets_cross_the_relay_both_ways_with_reverse_path_filtering_on_every_hop(mesh: Mesh) -> None:
    await mesh.apply(topology(True, *mesh.endpoints))
    alpha, gamma, relay = (mesh.forwarders[c] for c in CLUSTERS)
    await alpha.wait_peer_up("relay")
    await gamma.wait_peer_up("relay")
    assert [p.cluster for p in alpha.state().peers] == ["relay"]  # no link, no dialing towards gamma
    assert alpha.state().routes[VIPS["gamma"]] == "peer:relay"
    assert gamma.state().routes[VIPS["alpha"]] == "peer:relay"

    there = packet(VIPS["alpha"], VIPS["gamma"], b"ping")
    mesh.workers["alpha"].send(there)
    assert await receive(mesh.workers["gamma"]) == there
    back = packet(VIPS["gamma"], VIPS["alpha"], b"pong")
    mesh.workers["gamma"].send(back)
    assert await receive(mesh.workers["alpha"]) == back
    transit = relay.state()
    assert transit.peer("gamma").counters["packets_out"] == 1
    assert transit.peer("alpha").counters["packets_out"] == 1
    assert transit.peer("alpha").counters["drops"] == {}

    # The relay forwards only what the sending side may send: alpha forging relay's address is
    # dropped by alpha's own filter (never leaves), as without a relay.
    mesh.workers["alpha"].send(packet(VIPS["relay"], VIPS["gamma"]))
    await asyncio.sleep(0.3)
    assert alpha.state().worker("alpha-w").counters["drops"] == {"spoofed": 1}

    # Back to direct: alpha dials gamma again and the route follows.
    await mesh.apply(topology(False, *mesh.endpoints))
    await alpha.wait_peer_up("gamma")
    assert alpha.state().routes[VIPS["gamma"]] == "peer:gamma"
    mesh.workers["alpha"].send(there)
    assert await receive(mesh.workers["gamma"]) == there
    assert relay.state().peer("gamma").counters["packets_out"] == 1  # not through the relay any more
