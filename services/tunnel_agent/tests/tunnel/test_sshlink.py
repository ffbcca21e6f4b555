"""Peer links over real asyncssh on loopback: pinned keys, nothing but the frame service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncssh
import pytest
from rlark_tunnel_agent.tunnel import keys
from rlark_tunnel_agent.tunnel.frames import encode_packets
from rlark_tunnel_agent.tunnel.sshlink import (
    LinkState,
    PeerDialer,
    PeerLink,
    TunnelServer,
    nodelay,
    service_name,
    skip_padding_ignores,
)

# Real sockets and asyncssh on loopback, so not marked `unit`; no root needed.


def public(key: asyncssh.SSHKey) -> asyncssh.SSHKey:
    return asyncssh.import_public_key(keys.public_line(key))


@dataclass
class Pair:
    """Cluster a dials cluster b's server for domain d1."""

    key_a: asyncssh.SSHKey
    key_b: asyncssh.SSHKey
    server: TunnelServer
    port: int
    link_b: PeerLink  # b's view of a
    received_b: list[bytes] = field(default_factory=list)

    def link_a(self) -> tuple[PeerLink, list[bytes]]:
        got: list[bytes] = []
        link = PeerLink(
            "b",
            dials=True,
            on_packets=lambda _l, pkts: got.extend(bytes(p) for p in pkts),
            on_writable=lambda _l, _w: None,
        )
        return link, got

    def dialer(self, link: PeerLink, *, client_key=None, host_key=None) -> PeerDialer:  # type: ignore[no-untyped-def]
        return PeerDialer(
            link,
            domain="d1",
            local_cluster="a",
            client_key=client_key or self.key_a,
            peer_host_key=host_key or public(self.key_b),
            host="127.0.0.1",
            port=self.port,
            connect_timeout_s=2.0,
            backoff_max_s=0.3,
        )


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    key_a, key_b = keys.generate_key(), keys.generate_key()
    received: list[bytes] = []

    def echo(link: PeerLink, packets: list[memoryview]) -> None:
        received.extend(bytes(p) for p in packets)
        link.send(encode_packets([bytes(p) for p in packets]), len(packets))

    link_b = PeerLink("a", dials=False, on_packets=echo, on_writable=lambda _l, _w: None)
    server = TunnelServer("d1", key_b, lambda: {"a": public(key_a)}, {"a": link_b}.get)
    port = await server.start("127.0.0.1", 0)
    yield Pair(key_a, key_b, server, port, link_b, received)
    link_b.close()
    await server.stop()


async def wait_for(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():  # noqa: ASYNC110 - polls plain link state, no event to wait on
            await asyncio.sleep(0.02)


async def test_pinned_peers_connect_and_carry_frames_both_ways(pair: Pair) -> None:
    link, got = pair.link_a()
    dialer = pair.dialer(link)
    dialer.start()
    try:
        await wait_for(lambda: link.is_up and pair.link_b.is_up)
        packets = [bytes([n]) * (n * 100) for n in range(1, 40)]
        assert link.send(encode_packets(packets), len(packets))
        await wait_for(lambda: len(got) == len(packets))
        assert got == packets
        assert pair.received_b == packets
        await wait_for(lambda: link.rtt_s is not None)
        state = link.snapshot()
        assert state.state is LinkState.UP
        assert state.counters["packets_out"] == len(packets)
        assert state.counters["packets_in"] == len(packets)
    finally:
        await dialer.stop()
    assert link.state is LinkState.DOWN


async def test_asyncssh_sets_tcp_nodelay_on_tunnel_connections(pair: Pair) -> None:
    link, _ = pair.link_a()
    dialer = pair.dialer(link)
    dialer.start()
    try:
        await wait_for(lambda: link.is_up)
        assert link._conn is not None
        assert nodelay(link._conn)
        assert pair.link_b._conn is not None
        assert nodelay(pair.link_b._conn)
    finally:
        await dialer.stop()


async def test_tunnel_connections_send_one_ssh_packet_per_batch_without_padding_ignores(pair: Pair) -> None:
    link, got = pair.link_a()
    dialer = pair.dialer(link)
    dialer.start()
    try:
        await wait_for(lambda: link.is_up and pair.link_b.is_up)
        conn = link._conn
        assert conn is not None
        assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
        # asyncssh numbers every SSH packet it sends: a batch must cost exactly one (CHANNEL_DATA),
        # not two (an empty MSG_IGNORE first). Pings run meanwhile, so count over a quiet batch.
        for _ in range(20):
            before = conn._send_seq
            assert link.send(encode_packets([b"x" * 100]), 1)
            after = conn._send_seq
            if after - before == 1:
                break
        assert after - before == 1
        await wait_for(lambda: got == [b"x" * 100] * len(got) and len(got) >= 1)
    finally:
        await dialer.stop()


def test_padding_ignores_are_kept_for_ciphers_that_need_them() -> None:
    sent: list[tuple[int, tuple[bytes, ...]]] = []

    class Conn:
        def __init__(self, cipher: str) -> None:
            self.cipher = cipher

        def get_extra_info(self, name: str) -> str:
            return self.cipher

        def send_packet(self, pkttype: int, *args: bytes, handler: object = None) -> None:
            sent.append((pkttype, args))

    cbc = Conn("aes128-cbc")
    assert not skip_padding_ignores(cbc)  # type: ignore[arg-type]
    cbc.send_packet(2, b"\0\0\0\0")
    gcm = Conn("aes128-gcm@openssh.com")
    assert skip_padding_ignores(gcm)  # type: ignore[arg-type]
    gcm.send_packet(2, b"\0\0\0\0")  # the padding ignore: dropped
    gcm.send_packet(2, b"\0\0\0\1x")  # an ignore with a payload: sent
    gcm.send_packet(94, b"data")
    assert sent == [(2, (b"\0\0\0\0",)), (2, (b"\0\0\0\1x",)), (94, (b"data",))]


async def test_a_key_not_issued_to_the_cluster_is_refused(pair: Pair) -> None:
    link, _ = pair.link_a()
    dialer = pair.dialer(link, client_key=keys.generate_key())
    dialer.start()
    try:
        await wait_for(lambda: link.last_error is not None)
        assert not link.is_up
        assert "Permission denied" in (link.last_error or "")
        assert not pair.link_b.is_up
    finally:
        await dialer.stop()


async def test_a_server_with_another_host_key_is_not_trusted(pair: Pair) -> None:
    link, _ = pair.link_a()
    dialer = pair.dialer(link, host_key=public(keys.generate_key()))
    dialer.start()
    try:
        await wait_for(lambda: link.last_error is not None)
        assert "not trusted" in (link.last_error or "")
        assert not link.is_up
    finally:
        await dialer.stop()


async def _connect(pair: Pair, **kwargs) -> asyncssh.SSHClientConnection:  # type: ignore[no-untyped-def]
    options = {
        "username": "a",
        "client_keys": [pair.key_a],
        "known_hosts": ([public(pair.key_b)], [], []),
        "agent_path": None,
        "config": None,
        **kwargs,
    }
    return await asyncssh.connect("127.0.0.1", pair.port, **options)


async def test_passwords_are_not_accepted(pair: Pair) -> None:
    with pytest.raises(asyncssh.PermissionDenied):
        await _connect(pair, client_keys=None, password="secret", preferred_auth=["password"])


async def test_no_shell_exec_or_other_destinations_for_an_authenticated_peer(pair: Pair) -> None:
    async with await _connect(pair) as conn:
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.create_process("id")
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.open_connection("127.0.0.1", 22)
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.open_connection(service_name("another-domain"), 0)
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.open_unix_connection("/run/docker.sock")
        with pytest.raises(asyncssh.ChannelListenError):
            await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", 1)


async def test_a_newer_connection_replaces_the_older_one(pair: Pair) -> None:
    link1, _ = pair.link_a()
    first = pair.dialer(link1)
    first.start()
    await wait_for(lambda: link1.is_up and pair.link_b.connects == 1)
    link2, got2 = pair.link_a()
    second = pair.dialer(link2)
    second.start()
    try:
        await wait_for(lambda: link2.is_up and pair.link_b.connects == 2)
        assert link2.send(encode_packets([b"x" * 10]), 1)
        await wait_for(lambda: got2 == [b"x" * 10])
    finally:
        await first.stop()
        await second.stop()
