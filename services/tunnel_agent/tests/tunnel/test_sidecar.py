"""Sidecar streams on the agent: authenticated by token, then routed like a local TUN."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from ipaddress import IPv4Address, IPv4Network

import pytest
from rlark_tunnel_agent.tunnel import keys
from rlark_tunnel_agent.tunnel.forwarder import ForwarderConfig, TunnelForwarder
from rlark_tunnel_agent.tunnel.frames import FrameDecoder, FrameKind, encode_frame, encode_packets
from rlark_tunnel_agent.tunnel.sidecar import SidecarServer
from rlark_tunnel_agent.tunnel.tun import TunDevice

# Real sockets on loopback, so not marked `unit`; no root needed.


@pytest.fixture
async def agent() -> AsyncIterator[tuple[TunnelForwarder, SidecarServer, int, socket.socket]]:
    config = ForwarderConfig(
        domain="d1", network=IPv4Network("10.100.0.0/16"), cluster="a", listen_host="127.0.0.1"
    )
    forwarder = TunnelForwarder(config, keys.generate_key())
    await forwarder.start()
    ours, local_worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    local_worker.setblocking(False)
    forwarder.attach_device("a1", TunDevice(ours.detach(), "a1", None), IPv4Address("10.100.0.2"))
    server = SidecarServer(forwarder)
    port = await server.start("127.0.0.1", 0)
    yield forwarder, server, port, local_worker
    await server.stop()
    await forwarder.stop()
    local_worker.close()


async def connect(port: int, worker: str, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    hello = json.dumps({"worker": worker, "token": token}).encode()
    writer.write(encode_frame(FrameKind.HELLO, hello))
    return reader, writer


async def test_a_sidecar_with_its_token_is_routed_like_a_local_worker(agent, make_packet) -> None:  # type: ignore[no-untyped-def]
    forwarder, server, port, local_worker = agent
    token = server.expect("k1", IPv4Address("10.100.0.9"))
    reader, writer = await connect(port, "k1", token)
    out = [make_packet("10.100.0.9", "10.100.0.2", payload=bytes([n]) * n) for n in range(1, 50)]
    writer.write(encode_packets(out))
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):
        got = [await loop.sock_recv(local_worker, 70000) for _ in out]
    assert got == out
    back = make_packet("10.100.0.2", "10.100.0.9", payload=b"back")
    await loop.sock_sendall(local_worker, back)
    decoder = FrameDecoder()
    async with asyncio.timeout(5):
        frames = decoder.feed(await reader.read(70000))
    assert [(k, bytes(p)) for k, p in frames] == [(FrameKind.PACKET, back)]
    state = forwarder.state().worker("k1")
    assert state.device.startswith("sidecar 127.0.0.1:")
    assert state.counters["packets_in"] == len(out)
    writer.close()


async def test_a_sidecar_can_only_send_from_its_own_address(agent, make_packet) -> None:  # type: ignore[no-untyped-def]
    forwarder, server, port, local_worker = agent
    token = server.expect("k1", IPv4Address("10.100.0.9"))
    _, writer = await connect(port, "k1", token)
    writer.write(encode_packets([make_packet("10.100.0.7", "10.100.0.2")] * 3))

    def drops() -> object:
        workers = {w.worker: w for w in forwarder.state().workers}
        return workers["k1"].counters["drops"] if "k1" in workers else None

    async with asyncio.timeout(5):
        while drops() != {"spoofed": 3}:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    with pytest.raises(BlockingIOError):
        local_worker.recv(70000)
    writer.close()


@pytest.mark.parametrize("hello", ["wrong-token", "unknown-worker", "packet-first"])
async def test_unauthenticated_sidecars_are_cut_off(agent, make_packet, hello: str) -> None:  # type: ignore[no-untyped-def]
    forwarder, server, port, _ = agent
    token = server.expect("k1", IPv4Address("10.100.0.9"))
    if hello == "packet-first":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_packets([make_packet("10.100.0.9", "10.100.0.2")]))
    else:
        worker, secret = ("k1", token + "x") if hello == "wrong-token" else ("k2", token)
        reader, writer = await connect(port, worker, secret)
    async with asyncio.timeout(5):
        assert await reader.read() == b""  # the agent closed the connection
    assert [w.worker for w in forwarder.state().workers] == ["a1"]
    writer.close()


async def test_a_forgotten_worker_loses_its_link(agent) -> None:  # type: ignore[no-untyped-def]
    forwarder, server, port, _ = agent
    token = server.expect("k1", IPv4Address("10.100.0.9"))
    reader, writer = await connect(port, "k1", token)
    async with asyncio.timeout(5):
        while "10.100.0.9" not in forwarder.state().routes:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    await server.forget("k1")
    async with asyncio.timeout(5):
        assert await reader.read() == b""
    assert "10.100.0.9" not in forwarder.state().routes
    writer.close()
