"""DomainTunnels' desired state: peers only once announced, one dialing side, remote addresses by cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from ipaddress import IPv4Address
from pathlib import Path

from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_contracts.events.netdomain import (
    AddressesAllocated,
    AddressesReleased,
    TunnelTopologyChanged,
    WorkerAddress,
)
from rlark_tunnel_agent.agent.tunnels import DomainTunnels
from rlark_tunnel_agent.tunnel import LinkState, PeerState, TunnelState, TunnelSupervisor


async def _ignore(_: TunnelEndpointAnnounced) -> None:
    return None


def announced(cluster: str, port: int) -> TunnelEndpointAnnounced:
    return TunnelEndpointAnnounced(
        cluster=cluster,
        domain="d1",
        host="127.0.0.1",
        port=port,
        public_key=f"ssh-ed25519 KEY{cluster}",
        announced_at=datetime.now(UTC),
    )


async def test_a_peer_is_linked_once_announced_and_the_smaller_name_dials(tmp_path: Path) -> None:
    beta = DomainTunnels("beta", tmp_path, _ignore)
    await beta.on_topology(
        TunnelTopologyChanged(
            domain="d1", cidr="10.200.0.0/16", clusters=["alpha", "beta", "gamma"], links=[]
        )
    )
    assert beta.peers("d1") == []
    await beta.on_endpoint(announced("alpha", 4001))
    await beta.on_endpoint(announced("gamma", 4003))
    await beta.on_endpoint(announced("beta", 4002))  # its own: ignored
    peers = {p.cluster: p for p in beta.peers("d1")}
    assert set(peers) == {"alpha", "gamma"}
    assert peers["alpha"].endpoint is None  # alpha dials beta
    assert peers["gamma"].endpoint == ("127.0.0.1", 4003)
    assert peers["gamma"].public_key == "ssh-ed25519 KEYgamma"


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
    await alpha.on_endpoint(announced("beta", 4002))
    assert [p.cluster for p in alpha.peers("d1")] == ["beta"]
    await alpha.on_released(AddressesReleased(job_id="j1", domain="d1"))
    assert alpha._remote("d1") == {}


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
    alpha = DomainTunnels("alpha", tmp_path, _ignore, supervisor=links)
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
    assert alpha.link_reports() == []
    links.peers = [_peer(LinkState.DOWN, error="refused")]
    assert [r.state for r in alpha.link_reports()] == ["down"]  # the domain came back: reported afresh
