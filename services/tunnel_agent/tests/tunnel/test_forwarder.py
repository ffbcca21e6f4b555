"""TunnelForwarder end to end without root: two agents over real asyncssh on loopback.

Workers' TUN devices are stood in for by ``SOCK_SEQPACKET`` socket pairs (one packet per read and
write, like a TUN fd): the forwarder holds one end, the test plays the worker's kernel on the
other. Covers routing, batching, anti-spoofing, counters, link loss and reconnection.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

import asyncssh
import pytest
from rlark_tunnel_agent.tunnel import keys
from rlark_tunnel_agent.tunnel.forwarder import ForwarderConfig, ForwarderError, PeerSpec, TunnelForwarder
from rlark_tunnel_agent.tunnel.tun import TunDevice

# Real sockets and asyncssh on loopback, so not marked `unit`; no root needed.

NET = IPv4Network("10.100.0.0/16")
FAST = {"ping_interval_s": 0.1, "dead_after_s": 0.8, "backoff_max_s": 0.2, "connect_timeout_s": 1.0}


@dataclass
class Agents:
    a: TunnelForwarder
    b: TunnelForwarder
    key_a: asyncssh.SSHKey
    key_b: asyncssh.SSHKey
    workers: dict[str, socket.socket]  # the worker's side of each device


def device(name: str) -> tuple[TunDevice, socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for sock in (ours, theirs):
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return TunDevice(ours.detach(), name, None), theirs


def forwarder_b(key_b: asyncssh.SSHKey, port: int = 0) -> TunnelForwarder:
    config = ForwarderConfig(
        domain="d1", network=NET, cluster="b", listen_host="127.0.0.1", listen_port=port, **FAST
    )
    return TunnelForwarder(config, key_b)


async def wait_for(predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():  # noqa: ASYNC110 - polls plain forwarder state
            await asyncio.sleep(0.02)


async def receive(sock: socket.socket, count: int, timeout_s: float = 5.0) -> list[bytes]:
    loop = asyncio.get_running_loop()
    got = []
    async with asyncio.timeout(timeout_s):
        while len(got) < count:
            got.append(await loop.sock_recv(sock, 70000))
    return got


async def nothing_arrives(sock: socket.socket, wait_s: float = 0.5) -> bool:
    await asyncio.sleep(wait_s)
    try:
        sock.recv(70000)
    except BlockingIOError:
        return True
    return False


@pytest.fixture
async def agents() -> AsyncIterator[Agents]:
    key_a, key_b = keys.generate_key(), keys.generate_key()
    b = forwarder_b(key_b)
    port = await b.start()
    config_a = ForwarderConfig(domain="d1", network=NET, cluster="a", listen_host="127.0.0.1", **FAST)
    a = TunnelForwarder(config_a, key_a)
    await a.start()
    await a.set_peers([PeerSpec("b", keys.public_line(key_b), ("127.0.0.1", port))])
    await b.set_peers([PeerSpec("a", keys.public_line(key_a))])
    workers: dict[str, socket.socket] = {}
    for fwd, name, address in ((a, "a1", "10.100.0.2"), (a, "a2", "10.100.0.3"), (b, "b1", "10.100.1.2")):
        dev, theirs = device(name)
        fwd.attach_device(name, dev, IPv4Address(address))
        workers[name] = theirs
    a.set_remote_addresses("b", [IPv4Address("10.100.1.2")])
    b.set_remote_addresses("a", [IPv4Address("10.100.0.2"), IPv4Address("10.100.0.3")])
    await a.wait_peer_up("b")
    agents = Agents(a, b, key_a, key_b, workers)
    yield agents
    await agents.a.stop()
    await agents.b.stop()
    for sock in workers.values():
        sock.close()


async def test_a_burst_of_packets_crosses_in_order_and_unchanged(agents: Agents, make_packet) -> None:  # type: ignore[no-untyped-def]
    packets = [
        make_packet("10.100.0.2", "10.100.1.2", payload=bytes([i % 256]) * (i * 7)) for i in range(300)
    ]
    loop = asyncio.get_running_loop()
    arriving = asyncio.create_task(receive(agents.workers["b1"], len(packets)))
    for packet in packets:
        await loop.sock_sendall(agents.workers["a1"], packet)
    assert await arriving == packets
    reply = make_packet("10.100.1.2", "10.100.0.2", payload=b"pong")
    agents.workers["b1"].send(reply)
    assert await receive(agents.workers["a1"], 1) == [reply]
    state = agents.a.state()
    assert state.peer("b").counters["packets_out"] == 300
    assert state.worker("a1").counters["packets_in"] == 300
    json.dumps(state.as_dict())  # JSON-ready health report


async def test_forged_sources_are_dropped_and_counted(agents: Agents, make_packet) -> None:  # type: ignore[no-untyped-def]
    for forged in ("10.100.0.3", "10.100.1.2", "10.100.0.99", "192.168.0.1"):
        agents.workers["a1"].send(make_packet(forged, "10.100.1.2"))
    assert await nothing_arrives(agents.workers["b1"])
    assert agents.a.state().worker("a1").counters["drops"] == {"spoofed": 4}


async def test_local_workers_talk_without_the_tunnel(agents: Agents, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet("10.100.0.2", "10.100.0.3")
    agents.workers["a1"].send(packet)
    assert await receive(agents.workers["a2"], 1) == [packet]
    assert agents.a.state().peer("b").counters["packets_out"] == 0


async def test_unknown_destinations_are_dropped(agents: Agents, make_packet) -> None:  # type: ignore[no-untyped-def]
    agents.workers["a1"].send(make_packet("10.100.0.2", "10.100.1.77"))
    agents.workers["a1"].send(make_packet("10.100.0.2", "10.200.0.1"))
    await wait_for(lambda: sum(agents.a.state().worker("a1").counters["drops"].values()) == 2)  # type: ignore[attr-defined]
    assert agents.a.state().worker("a1").counters["drops"] == {"no_route": 1, "outside_domain": 1}


async def test_a_lost_peer_is_reported_and_traffic_resumes_when_it_returns(
    agents: Agents,
    make_packet,  # type: ignore[no-untyped-def]
) -> None:
    port = agents.b.port
    assert port is not None
    await agents.b.stop()
    await wait_for(lambda: agents.a.state().peer("b").state != "up")
    down = agents.a.state().peer("b")
    assert down.last_error
    agents.workers["a1"].send(make_packet("10.100.0.2", "10.100.1.2"))
    await wait_for(lambda: agents.a.state().peer("b").counters["drops"] == {"link_down": 1})

    agents.b = forwarder_b(agents.key_b, port)  # the peer agent comes back on the same endpoint
    await agents.b.start()
    await agents.b.set_peers([PeerSpec("a", keys.public_line(agents.key_a))])
    agents.b.set_remote_addresses("a", [IPv4Address("10.100.0.2")])
    dev, theirs = device("b1")
    agents.b.attach_device("b1", dev, IPv4Address("10.100.1.2"))
    agents.workers["b1"].close()
    agents.workers["b1"] = theirs
    await agents.a.wait_peer_up("b")
    packet = make_packet("10.100.0.2", "10.100.1.2", payload=b"again")
    agents.workers["a1"].send(packet)
    assert await receive(agents.workers["b1"], 1) == [packet]
    assert agents.a.state().peer("b").connects == 2


async def test_a_silent_peer_is_declared_dead_and_redialed(agents: Agents) -> None:
    link = agents.a._links["b"]
    conn = link._conn
    assert conn is not None
    conn._transport.pause_reading()  # type: ignore[union-attr]  # a hears nothing: a cut cable
    await wait_for(lambda: agents.a.state().peer("b").state != "up", 5)
    assert "no frames from peer" in (agents.a.state().peer("b").last_error or "")
    await agents.a.wait_peer_up("b")  # a fresh connection
    assert agents.a.state().peer("b").connects == 2


async def test_domains_take_the_first_free_port_of_a_fixed_range_and_a_full_range_says_so() -> None:
    def free_run(count: int) -> int:
        """The first of ``count`` consecutive free ports, below the kernel's ephemeral range so that no
        connection made meanwhile by another test takes one of them."""
        for start in random.sample(range(20_000, 30_000, count), 200):
            probes = [socket.socket() for _ in range(count)]
            try:
                for offset, probe in enumerate(probes):
                    probe.bind(("127.0.0.1", start + offset))
                return start
            except OSError:
                continue
            finally:
                for probe in probes:
                    probe.close()
        raise AssertionError(f"no {count} consecutive free ports in 20000-29999")

    first = free_run(3)
    taken = socket.socket()
    taken.bind(("127.0.0.1", first))  # someone else holds the range's first port
    taken.listen()
    forwarders = [
        TunnelForwarder(
            ForwarderConfig(
                domain=f"d{n}",
                network=IPv4Network("10.100.0.0/16"),
                cluster="a",
                listen_host="127.0.0.1",
                listen_port=first,
                listen_ports=3,
            ),
            keys.generate_key(),
        )
        for n in range(3)
    ]
    try:
        ports = [await forwarders[0].start(), await forwarders[1].start()]
        assert ports == [first + 1, first + 2]
        with pytest.raises(
            ForwarderError, match=rf"no free tunnel port for domain d2 in {first}-{first + 2}"
        ):
            await forwarders[2].start()
    finally:
        taken.close()
        for forwarder in forwarders[:2]:
            await forwarder.stop()
