"""Tunnel sockets inside a network namespace, the test process staying in its own (root only).

Two forwarders run on the test's event loop, in the host namespace, with ``ForwarderConfig.netns``
naming the agent namespaces of a two-cluster test bed (``rlark_devinfra.netns``) joined by one veth
link: their SSH server listens, and the dialer dials, from inside those namespaces. Socket pairs
stand in for the workers' TUN devices (as in ``test_forwarder.py``).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

import asyncssh
import pytest
from rlark_devinfra import netns
from rlark_tunnel_agent.tunnel import keys
from rlark_tunnel_agent.tunnel.forwarder import ForwarderConfig, PeerSpec, TunnelForwarder
from rlark_tunnel_agent.tunnel.tun import TunDevice, run_in_netns

pytestmark = pytest.mark.netns

NET = IPv4Network("10.100.0.0/16")
FAST = {"ping_interval_s": 0.2, "dead_after_s": 1.0, "backoff_max_s": 0.3, "connect_timeout_s": 1.0}


@dataclass
class Linked:
    bed: netns.TestBed
    a: TunnelForwarder
    b: TunnelForwarder
    key_b: asyncssh.SSHKey
    b_address: str
    workers: dict[str, socket.socket]


def device(name: str) -> tuple[TunDevice, socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for sock in (ours, theirs):
        sock.setblocking(False)
    return TunDevice(ours.detach(), name, None), theirs


async def wait_for(predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():  # noqa: ASYNC110 - polls plain forwarder state
            await asyncio.sleep(0.05)


def tcp_connect_error(address: str, port: int) -> int:
    """0 when a TCP connection to ``address:port`` from the calling thread's namespace succeeds."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((address, port))


@pytest.fixture
async def linked() -> AsyncIterator[Linked]:
    bed = await asyncio.to_thread(netns.create, f"s{os.getpid() % 100000}", {"a": [], "b": []})
    try:
        key_a, key_b = keys.generate_key(), keys.generate_key()
        ns_a, ns_b = bed.agents["a"], bed.agents["b"]
        b = TunnelForwarder(ForwarderConfig(domain="d1", network=NET, cluster="b", netns=ns_b, **FAST), key_b)
        port = await b.start()
        a = TunnelForwarder(ForwarderConfig(domain="d1", network=NET, cluster="a", netns=ns_a, **FAST), key_a)
        await a.start()
        b_address = bed.address_of("b", "a")
        await a.set_peers([PeerSpec("b", keys.public_line(key_b), (b_address, port))])
        await b.set_peers([PeerSpec("a", keys.public_line(key_a))])
        workers: dict[str, socket.socket] = {}
        for fwd, name, address in ((a, "a1", "10.100.0.2"), (b, "b1", "10.100.1.2")):
            dev, theirs = device(name)
            fwd.attach_device(name, dev, IPv4Address(address))
            workers[name] = theirs
        a.set_remote_addresses("b", [IPv4Address("10.100.1.2")])
        b.set_remote_addresses("a", [IPv4Address("10.100.0.2")])
        try:
            yield Linked(bed, a, b, key_b, b_address, workers)
        finally:
            await a.stop()
            await b.stop()
            for sock in workers.values():
                sock.close()
    finally:
        await asyncio.to_thread(bed.destroy)


async def test_a_forwarder_with_a_namespace_listens_and_dials_only_there(linked: Linked, make_packet) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(10):
        await linked.a.wait_peer_up("b")
    packet = make_packet("10.100.0.2", "10.100.1.2", payload=b"through the veth")
    linked.workers["a1"].send(packet)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):
        assert await loop.sock_recv(linked.workers["b1"], 70000) == packet

    port = linked.b.port
    assert port is not None
    # The listening socket is in b's namespace: there, not here.
    inside = await asyncio.to_thread(
        run_in_netns, linked.bed.agents["b"], lambda: tcp_connect_error("127.0.0.1", port)
    )
    assert inside == 0
    assert await asyncio.to_thread(tcp_connect_error, "127.0.0.1", port) == errno.ECONNREFUSED
    # The link address exists only in the test bed's namespaces.
    assert await asyncio.to_thread(tcp_connect_error, linked.b_address, port) != 0


async def test_a_forwarder_in_the_host_namespace_cannot_reach_a_namespaced_peer(linked: Linked) -> None:
    port = linked.b.port
    assert port is not None
    outsider = TunnelForwarder(
        ForwarderConfig(domain="d1", network=NET, cluster="a", listen_host="127.0.0.1", **FAST),
        keys.generate_key(),
    )
    await outsider.start()
    try:
        await outsider.set_peers([PeerSpec("b", keys.public_line(linked.key_b), (linked.b_address, port))])
        await wait_for(lambda: outsider.state().peer("b").last_error, 5)
        assert outsider.state().peer("b").state != "up"
        assert f"connect to {linked.b_address}:{port}" in (outsider.state().peer("b").last_error or "")
    finally:
        await outsider.stop()


async def test_cutting_the_namespaces_link_takes_the_tunnel_down_and_restoring_it_brings_it_back(
    linked: Linked,
    make_packet,  # type: ignore[no-untyped-def]
) -> None:
    async with asyncio.timeout(10):
        await linked.a.wait_peer_up("b")
    await asyncio.to_thread(linked.bed.set_link, "a", "b", False)
    try:
        await wait_for(lambda: linked.a.state().peer("b").state != "up", 5)
        assert "no frames from peer" in (linked.a.state().peer("b").last_error or "")
    finally:
        await asyncio.to_thread(linked.bed.set_link, "a", "b", True)
    async with asyncio.timeout(10):
        await linked.a.wait_peer_up("b")
    assert linked.a.state().peer("b").connects == 2
    packet = make_packet("10.100.0.2", "10.100.1.2", payload=b"after the repair")
    linked.workers["a1"].send(packet)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):
        assert await loop.sock_recv(linked.workers["b1"], 70000) == packet
