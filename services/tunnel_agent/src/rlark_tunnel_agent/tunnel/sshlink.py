"""Peer links: one authenticated SSH connection per (domain, peer cluster), carrying frames.

Role: the I/O adapter between two tunnel-agents. Each agent runs, per domain, its own asyncssh
server (``TunnelServer``) with that domain's key as host key; the cluster that dials (the topology
says which) connects with the same domain's key as client key. Both sides pin the other's public
key: the client accepts exactly the peer's host key, the server accepts exactly the key issued to
the cluster named as the SSH user. No password or keyboard-interactive auth, no shell, exec,
subsystem, agent, X11 or remote forwarding: the only thing a peer can open is one direct-tcpip
channel to the domain's frame service (``service_name(domain)``), which asyncssh hands to us
in-process; nothing ever connects onwards.

On that channel both ends exchange the frames of ``frames.py``. ``PeerLink`` holds the state of
one peer (up/down, RTT, counters, last error), answers and sends PINGs, declares the link dead when
nothing arrives for ``dead_after_s`` (a cut cable does not close a TCP connection for minutes), and
``PeerDialer`` reconnects with capped exponential backoff. Channels use large windows and SSH
packets so that a batch of frames costs a few encryptions, and asyncssh sets TCP_NODELAY on the
socket (checked in tests), so small packets are not held back by Nagle. asyncssh writes an empty
``MSG_IGNORE`` before every encrypted packet (a countermeasure against CBC-mode attacks); our links
negotiate only AEAD ciphers, where it protects nothing, so ``skip_padding_ignores`` drops those on
tunnel connections — one SSH packet and one socket write per batch instead of two, which shortens
every small round trip (a Ray RPC) through the tunnel.

Sockets in a network namespace: given ``netns``, the server's listening socket and the dialer's
sockets are created inside that namespace (on a short-lived thread that entered it, as ``tun.py``
does) and handed to asyncssh ready-made; the agent's process and event loop stay where they are.
This puts a cluster's tunnel endpoint on that cluster's network (an emulated cluster in tests,
whose link can then be cut) while the agent's control-plane traffic stays in the host namespace.

Concurrency: everything runs on one asyncio loop; callbacks never block.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import asyncssh
from asyncssh.constants import MSG_IGNORE

from rlark_tunnel_agent.tunnel.frames import FrameDecoder, FrameError, FrameKind, encode_frame
from rlark_tunnel_agent.tunnel.routing import LinkCounters
from rlark_tunnel_agent.tunnel.tun import run_in_netns

CHANNEL_WINDOW = 16 * 1024 * 1024
CHANNEL_MAX_PKTSIZE = 192 * 1024
"""Below asyncssh's 256 KiB receive limit; a batch of several TSO super-packets per SSH packet."""
WRITE_HIGH_WATER = 4 * 1024 * 1024
CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com")
_TOKEN = struct.Struct("!Q")


def service_name(domain: str) -> str:
    """The direct-tcpip destination naming a domain's frame service."""
    return f"rlark-tunnel.{domain}"


class LinkState(StrEnum):
    DOWN = "down"
    CONNECTING = "connecting"
    UP = "up"


@dataclass(frozen=True, slots=True)
class PeerState:
    """What ``TunnelForwarder.state()`` reports per peer."""

    cluster: str
    state: LinkState
    dials: bool
    rtt_ms: float | None
    last_error: str | None
    connects: int
    up_since: float | None
    counters: dict[str, object]


PacketSink = Callable[["PeerLink", list[memoryview]], None]
WritableSink = Callable[["PeerLink", bool], None]


class PeerLink:
    """One peer cluster of one domain: the current channel (if any), its state and counters."""

    def __init__(
        self,
        cluster: str,
        *,
        dials: bool,
        on_packets: PacketSink,
        on_writable: WritableSink,
        ping_interval_s: float = 1.0,
        dead_after_s: float = 4.0,
    ) -> None:
        self.cluster = cluster
        self.dials = dials
        self.counters = LinkCounters()
        self.state = LinkState.DOWN
        self.rtt_s: float | None = None
        self.last_error: str | None = None
        self.connects = 0
        self.up_since: float | None = None
        self.writable = True
        self._on_packets = on_packets
        self._on_writable = on_writable
        self._ping_interval_s = ping_interval_s
        self._dead_after_s = dead_after_s
        self._chan: asyncssh.SSHTCPChannel[bytes] | None = None
        self._conn: asyncssh.SSHClientConnection | asyncssh.SSHServerConnection | None = None
        self._decoder = FrameDecoder()
        self._last_rx = 0.0
        self._keepalive: asyncio.Task[None] | None = None
        self._down = asyncio.Event()
        self._down.set()

    # --- state -----------------------------------------------------------------------------

    @property
    def is_up(self) -> bool:
        return self._chan is not None

    def owns(self, chan: asyncssh.SSHTCPChannel[bytes] | None) -> bool:
        """Whether ``chan`` is the link's current channel (an older, replaced one is not)."""
        return chan is not None and chan is self._chan

    def snapshot(self) -> PeerState:
        return PeerState(
            cluster=self.cluster,
            state=self.state,
            dials=self.dials,
            rtt_ms=None if self.rtt_s is None else round(self.rtt_s * 1000, 3),
            last_error=self.last_error,
            connects=self.connects,
            up_since=self.up_since,
            counters=self.counters.as_dict(),
        )

    async def wait_down(self) -> None:
        await self._down.wait()

    # --- channel lifecycle ------------------------------------------------------------------

    def session(self) -> _FrameSession:
        return _FrameSession(self)

    def attach(
        self,
        chan: asyncssh.SSHTCPChannel[bytes],
        conn: asyncssh.SSHClientConnection | asyncssh.SSHServerConnection,
    ) -> None:
        """A new channel to the peer is open: it replaces any older one."""
        if self._chan is not None and self._chan is not chan:
            self._drop_channel("replaced by a newer connection")
        chan.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        skip_padding_ignores(conn)
        self._chan = chan
        self._conn = conn
        self._decoder = FrameDecoder()
        self._last_rx = time.monotonic()
        self.state = LinkState.UP
        self.up_since = time.time()
        self.connects += 1
        self._down.clear()
        self.set_writable(True)
        self._keepalive = asyncio.get_running_loop().create_task(self._keepalive_loop())

    def channel_lost(self, chan: asyncssh.SSHTCPChannel[bytes], exc: Exception | None) -> None:
        if chan is self._chan:
            self._drop_channel(str(exc) if exc else "channel closed by peer")

    def fail(self, error: str) -> None:
        """Record an error while (re)connecting; the link stays down."""
        self.last_error = error
        if self._chan is None:
            self.state = LinkState.DOWN

    def connecting(self) -> None:
        if self._chan is None:
            self.state = LinkState.CONNECTING

    def close(self, reason: str = "closed") -> None:
        if self._chan is not None:
            self._drop_channel(reason)

    def _drop_channel(self, reason: str) -> None:
        conn = self._conn
        self._detach(reason)
        if conn is not None:
            conn.abort()

    def _detach(self, reason: str) -> None:
        self._chan = None
        self._conn = None
        self.state = LinkState.DOWN
        self.up_since = None
        self.last_error = reason
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        self.set_writable(True)
        self._down.set()

    def set_writable(self, writable: bool) -> None:
        if writable != self.writable:
            self.writable = writable
            self._on_writable(self, writable)

    async def _keepalive_loop(self) -> None:
        while self._chan is not None:
            silent = time.monotonic() - self._last_rx
            if silent > self._dead_after_s:
                self._drop_channel(f"no frames from peer for {silent:.1f} s")
                return
            if not self._write(encode_frame(FrameKind.PING, _TOKEN.pack(time.monotonic_ns()))):
                return
            await asyncio.sleep(self._ping_interval_s)

    # --- data -------------------------------------------------------------------------------

    def send(self, data: bytes, packets: int) -> bool:
        """Write already-framed ``data`` (``packets`` PACKET frames); False when the link is down."""
        if not self._write(data):
            return False
        counters = self.counters
        counters.packets_out += packets
        counters.bytes_out += len(data)
        return True

    def _write(self, data: bytes) -> bool:
        """Write on the current channel; a channel that closed under us takes the link down."""
        chan = self._chan
        if chan is None:
            return False
        try:
            chan.write(data)
        except (BrokenPipeError, OSError, asyncssh.Error) as exc:
            self._drop_channel(f"write failed: {exc}")
            return False
        return True

    def data_received(self, data: bytes) -> None:
        self._last_rx = time.monotonic()
        self.counters.bytes_in += len(data)
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._drop_channel(f"protocol error: {exc}")
            return
        packets: list[memoryview] = []
        for kind, payload in frames:
            if kind == 0:
                packets.append(payload)
            elif kind == FrameKind.PING:
                self._write(encode_frame(FrameKind.PONG, bytes(payload)))
            elif len(payload) == _TOKEN.size:  # PONG
                (sent,) = _TOKEN.unpack(payload)
                self.rtt_s = (time.monotonic_ns() - sent) / 1e9
        if packets:
            self.counters.packets_in += len(packets)
            self._on_packets(self, packets)


class _FrameSession(asyncssh.SSHTCPSession[bytes]):
    """asyncssh callbacks of one channel, handed to the owning ``PeerLink``."""

    def __init__(self, link: PeerLink) -> None:
        self._link = link
        self._chan: asyncssh.SSHTCPChannel[bytes] | None = None

    def connection_made(self, chan: asyncssh.SSHTCPChannel[bytes]) -> None:
        self._chan = chan
        conn = chan.get_connection()
        assert isinstance(conn, asyncssh.SSHClientConnection | asyncssh.SSHServerConnection)
        self._link.attach(chan, conn)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if self._link.owns(self._chan):
            self._link.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._chan is not None:
            self._link.channel_lost(self._chan, exc)

    def pause_writing(self) -> None:
        if self._link.owns(self._chan):
            self._link.set_writable(False)

    def resume_writing(self) -> None:
        if self._link.owns(self._chan):
            self._link.set_writable(True)


def _common_options() -> dict[str, Any]:
    return {
        "encryption_algs": list(CIPHERS),
        "compression_algs": ["none"],
        "keepalive_interval": 0,
        "tcp_keepalive": True,
        "window": CHANNEL_WINDOW,
        "max_pktsize": CHANNEL_MAX_PKTSIZE,
    }


_EMPTY_STRING = b"\0\0\0\0"
"""An SSH ``string`` of length 0: the payload of asyncssh's padding ``MSG_IGNORE``."""


def skip_padding_ignores(conn: asyncssh.SSHClientConnection | asyncssh.SSHServerConnection) -> bool:
    """Stop ``conn`` from sending the empty ``MSG_IGNORE`` asyncssh puts before each packet.

    Only when the negotiated ciphers both ways are AEAD (``CIPHERS``; the ignore packet defends
    CBC modes only) — returns whether it did. Every other packet, including ignores with a payload,
    goes out unchanged. Hand-written because asyncssh has no option for it (2.24).
    """
    if getattr(conn, "_rlark_skips_ignores", False):
        return True
    ciphers = {conn.get_extra_info("send_cipher"), conn.get_extra_info("recv_cipher")}
    if not ciphers <= set(CIPHERS):
        return False
    send = conn.send_packet

    def send_packet(pkttype: int, *args: bytes, handler: Any = None) -> None:
        if pkttype == MSG_IGNORE and args == (_EMPTY_STRING,):
            return
        send(pkttype, *args, handler=handler)

    conn.send_packet = send_packet  # type: ignore[method-assign]
    conn._rlark_skips_ignores = True  # type: ignore[union-attr]
    return True


def nodelay(conn: asyncssh.SSHClientConnection | asyncssh.SSHServerConnection) -> bool:
    """Whether TCP_NODELAY is set on the connection's socket (asyncssh sets it; we check)."""
    sock = conn.get_extra_info("socket")
    if sock is None:
        return False
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


def _listening_socket(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket listening on ``host:port`` in the calling thread's namespace."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(100)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _dialing_socket(host: str, port: int) -> tuple[socket.socket, Any]:
    """A non-blocking, unconnected TCP socket in the calling thread's namespace, and the address
    to connect it to (resolved there too)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    return sock, address


class _Server(asyncssh.SSHServer):
    """Authenticates peer clusters by pinned key and serves only the domain's frame service."""

    def __init__(self, owner: TunnelServer) -> None:
        self._owner = owner
        self._conn: asyncssh.SSHServerConnection | None = None
        self._user: str | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn

    def begin_auth(self, username: str) -> bool:
        self._user = username
        return True

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def host_based_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        pinned = self._owner.peer_keys().get(username)
        return pinned is not None and key.public_data == pinned.public_data

    def session_requested(self) -> bool:
        return False

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False

    def unix_connection_requested(self, dest_path: str) -> bool:
        return False

    def unix_server_requested(self, listen_path: str) -> bool:
        return False

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Any:
        conn, user = self._conn, self._user
        if conn is None or user is None or dest_host != service_name(self._owner.domain):
            return False
        link = self._owner.link_for(user)
        if link is None:
            return False
        chan = conn.create_tcp_channel(window=CHANNEL_WINDOW, max_pktsize=CHANNEL_MAX_PKTSIZE)
        return chan, link.session()


class TunnelServer:
    """The SSH endpoint of one (agent, domain): accepts the dialing peers of that domain."""

    def __init__(
        self,
        domain: str,
        host_key: asyncssh.SSHKey,
        peer_keys: Callable[[], dict[str, asyncssh.SSHKey]],
        link_for: Callable[[str], PeerLink | None],
    ) -> None:
        self.domain = domain
        self._host_key = host_key
        self.peer_keys = peer_keys
        self.link_for = link_for
        self._acceptor: asyncssh.SSHAcceptor | None = None

    async def start(self, host: str, port: int, netns: str | None = None) -> int:
        """Listen on ``host:port`` (port 0: any) — inside network namespace ``netns`` (a name or a
        path, see ``tun.netns_path``) when given; return the port."""
        where: dict[str, Any] = {"host": host, "port": port}
        if netns is not None:
            sock = await asyncio.to_thread(run_in_netns, netns, lambda: _listening_socket(host, port))
            where = {"sock": sock}
        self._acceptor = await asyncssh.listen(
            **where,
            server_factory=lambda: _Server(self),
            server_host_keys=[self._host_key],
            allow_pty=False,
            agent_forwarding=False,
            x11_forwarding=False,
            login_timeout=10,
            **_common_options(),
        )
        return int(self._acceptor.get_port())

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None


class PeerDialer:
    """Keeps one ``PeerLink`` connected by dialing the peer's endpoint, with backoff."""

    def __init__(
        self,
        link: PeerLink,
        *,
        domain: str,
        local_cluster: str,
        client_key: asyncssh.SSHKey,
        peer_host_key: asyncssh.SSHKey,
        host: str,
        port: int,
        connect_timeout_s: float = 3.0,
        backoff_min_s: float = 0.2,
        backoff_max_s: float = 2.0,
        netns: str | None = None,
    ) -> None:
        self._link = link
        self._domain = domain
        self._user = local_cluster
        self._client_key = client_key
        self._peer_host_key = peer_host_key
        self._host = host
        self._port = port
        self._connect_timeout_s = connect_timeout_s
        self._backoff_min_s = backoff_min_s
        self._backoff_max_s = backoff_max_s
        self._netns = netns
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._link.close("tunnel stopped")

    async def _connected_socket(self) -> socket.socket:
        """A TCP connection to the peer from a socket created in ``self._netns``."""
        netns = self._netns
        assert netns is not None
        sock, address = await asyncio.to_thread(
            run_in_netns, netns, lambda: _dialing_socket(self._host, self._port)
        )
        try:
            await asyncio.get_running_loop().sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        return sock

    async def _dial(self) -> asyncssh.SSHClientConnection:
        where: dict[str, Any] = {}
        if self._netns is not None:
            where = {"sock": await self._connected_socket()}
        return await asyncssh.connect(
            self._host,
            self._port,
            **where,
            username=self._user,
            client_keys=[self._client_key],
            known_hosts=([self._peer_host_key], [], []),
            preferred_auth=["publickey"],
            agent_path=None,
            config=None,
            ignore_encrypted=True,
            **_common_options(),
        )

    async def _connect_once(self) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as the
        # dial completes, and ``stop()`` then waited forever on a dialer that went on (a test hung 300 s).
        async with asyncio.timeout(self._connect_timeout_s):
            conn = await self._dial()
        try:
            # the session attaches the channel to the link in connection_made
            async with asyncio.timeout(self._connect_timeout_s):
                await conn.create_connection(
                    self._link.session,
                    service_name(self._domain),
                    0,
                    window=CHANNEL_WINDOW,
                    max_pktsize=CHANNEL_MAX_PKTSIZE,
                )
        except BaseException:
            conn.abort()
            raise

    async def _run(self) -> None:
        backoff = self._backoff_min_s
        while True:
            self._link.connecting()
            started = time.monotonic()
            try:
                await self._connect_once()
            except (OSError, asyncssh.Error, TimeoutError) as exc:
                self._link.fail(f"connect to {self._host}:{self._port}: {_describe(exc)}")
            else:
                await self._link.wait_down()
                if time.monotonic() - started > 5 * self._backoff_max_s:
                    backoff = self._backoff_min_s
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, self._backoff_max_s)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return text
