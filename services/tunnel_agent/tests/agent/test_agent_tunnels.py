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
