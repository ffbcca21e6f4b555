"""Tunnel lifecycle: up with the first worker of a domain in the cluster, down with the last."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network

import asyncssh
import pytest
from rlark_tunnel_agent.tunnel import keys
from rlark_tunnel_agent.tunnel.forwarder import ForwarderConfig, PeerSpec, TunnelState
from rlark_tunnel_agent.tunnel.supervisor import TunnelSupervisor

pytestmark = pytest.mark.unit


class FakeForwarder:
    def __init__(self, config: ForwarderConfig, key: asyncssh.SSHKey, log: list[str]) -> None:
        self.config = config
        self.log = log
        self.workers: dict[str, IPv4Address] = {}
        self.peers: list[PeerSpec] = []
        self.remote: dict[str, list[IPv4Address]] = {}
        self.fail_attach = False

    @property
    def worker_count(self) -> int:
        return len(self.workers)

    async def start(self) -> int:
        self.log.append(f"start {self.config.domain}")
        return 2222

    async def stop(self) -> None:
        self.log.append(f"stop {self.config.domain}")

    async def set_peers(self, peers: Iterable[PeerSpec]) -> None:
        self.peers = list(peers)

    def set_remote_addresses(self, cluster: str, addresses: Sequence[IPv4Address]) -> None:
        self.remote[cluster] = list(addresses)

    async def attach_worker(self, worker: str, netns: str, address: IPv4Address) -> None:
        if self.fail_attach:
            raise RuntimeError("no TUN")
        self.workers[worker] = address

    async def detach_worker(self, worker: str) -> None:
        self.workers.pop(worker, None)

    def state(self) -> TunnelState:
        return TunnelState(self.config.domain, self.config.cluster, str(self.config.network), 2222)


@pytest.fixture
def log() -> list[str]:
    return []


@pytest.fixture
def supervisor(log: list[str]) -> TunnelSupervisor:
    return TunnelSupervisor(lambda config, key: FakeForwarder(config, key, log))


def config(domain: str) -> ForwarderConfig:
    return ForwarderConfig(domain=domain, network=IPv4Network("10.100.0.0/16"), cluster="a")


PEERS = [PeerSpec("b", "ssh-ed25519 AAAA", ("172.31.254.2", 2222))]
REMOTE = {"b": [IPv4Address("10.100.1.2")]}


async def land(supervisor: TunnelSupervisor, domain: str, worker: str, host: int) -> None:
    await supervisor.worker_landed(
        config(domain),
        keys.generate_key(),
        PEERS,
        REMOTE,
        worker=worker,
        netns=f"ns-{worker}",
        address=IPv4Address(f"10.100.0.{host}"),
    )


async def test_tunnels_come_up_with_the_first_worker_and_go_down_with_the_last(
    supervisor: TunnelSupervisor, log: list[str]
) -> None:
    await land(supervisor, "d1", "w1", 2)
    await land(supervisor, "d1", "w2", 3)
    assert log == ["start d1"]
    assert await supervisor.worker_left("d1", "w1") is False
    assert log == ["start d1"]
    assert await supervisor.worker_left("d1", "w2") is True
    assert log == ["start d1", "stop d1"]
    assert supervisor.domains == []


async def test_domains_have_separate_tunnels(supervisor: TunnelSupervisor, log: list[str]) -> None:
    await land(supervisor, "d1", "w1", 2)
    await land(supervisor, "d2", "w2", 2)
    assert supervisor.domains == ["d1", "d2"]
    await supervisor.worker_left("d2", "w2")
    assert supervisor.domains == ["d1"]
    assert [s.domain for s in supervisor.states()] == ["d1"]


async def test_repeated_events_are_harmless(supervisor: TunnelSupervisor, log: list[str]) -> None:
    await land(supervisor, "d1", "w1", 2)
    await land(supervisor, "d1", "w1", 2)
    assert await supervisor.worker_left("d1", "w1") is True
    assert await supervisor.worker_left("d1", "w1") is False
    assert log == ["start d1", "stop d1"]


async def test_a_failed_first_attach_leaves_no_tunnel_behind(log: list[str]) -> None:
    def failing(cfg: ForwarderConfig, key: asyncssh.SSHKey) -> FakeForwarder:
        fake = FakeForwarder(cfg, key, log)
        fake.fail_attach = True
        return fake

    supervisor = TunnelSupervisor(failing)
    with pytest.raises(RuntimeError, match="no TUN"):
        await land(supervisor, "d1", "w1", 2)
    assert supervisor.domains == []
    assert log == ["start d1", "stop d1"]


async def test_topology_updates_reach_the_running_forwarder(supervisor: TunnelSupervisor) -> None:
    await land(supervisor, "d1", "w1", 2)
    new_remote = {"b": [IPv4Address("10.100.1.2"), IPv4Address("10.100.1.3")]}
    await supervisor.update_topology("d1", PEERS, new_remote)
    forwarder = supervisor._forwarders["d1"]
    assert isinstance(forwarder, FakeForwarder)
    assert forwarder.remote == new_remote
    await supervisor.update_topology("unknown", PEERS, new_remote)  # ignored
    assert supervisor.domains == ["d1"]


async def test_a_relay_keeps_tunnels_up_without_workers_until_released(
    supervisor: TunnelSupervisor, log: list[str]
) -> None:
    await supervisor.relay_needed(config("d1"), keys.generate_key(), PEERS, REMOTE)
    assert supervisor.domains == ["d1"]
    await land(supervisor, "d1", "w1", 2)
    assert await supervisor.worker_left("d1", "w1") is False  # still relaying
    assert await supervisor.relay_released("d1") is True
    assert log == ["start d1", "stop d1"]
    assert await supervisor.relay_released("d1") is False
