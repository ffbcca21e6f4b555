"""Network sidecar: the worker-side link when the agent cannot open the worker's TUN itself.

Role: on Kubernetes the tunnel-agent does not run in the worker pod's network namespace, so a
small sidecar container in the pod (capability NET_ADMIN only, no privileged mode) creates the
TUN device there — same ``tun.py`` code, same address, MTU, queue and offloads — and streams its
packets to the agent over one TCP connection on the cluster network, in the frames of
``frames.py``. On the agent, ``SidecarServer`` turns each authenticated connection into a worker
link of the domain's ``TunnelForwarder``; from then on it is routed and checked (anti-spoofing
included) exactly like a local TUN.

Authentication: the agent issues a random token per worker (``SidecarServer.expect``) and hands it
to the pod (a Secret); the sidecar's first frame is ``HELLO {"worker", "token"}``, compared in
constant time. Anything else closes the connection. The sidecar reconnects with backoff when the
connection drops; the agent keeps the expectation until the worker leaves.

One server may serve several domains on one port (the agent's, behind its Service): each
expectation names the forwarder of the worker's domain, and the connection is that forwarder's
link once its HELLO is accepted.

``python -m rlark_tunnel_agent.tunnel.sidecar --agent HOST:PORT --worker W --address VIP/PREFIX``
with the token in the environment variable ``RLARK_TUNNEL_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import os
import secrets
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from rlark_tunnel_agent.tunnel import tun
from rlark_tunnel_agent.tunnel.forwarder import TunnelForwarder, WorkerLink
from rlark_tunnel_agent.tunnel.frames import (
    FrameDecoder,
    FrameError,
    FrameKind,
    encode_frame,
    encode_packets,
)

MAX_BUFFERED = 8 * 1024 * 1024
"""Above this many unsent bytes towards a sidecar, packets for it are dropped (counted)."""


@dataclass(frozen=True, slots=True)
class _Expected:
    address: IPv4Address
    token: str
    forwarder: TunnelForwarder


class _AgentSide(asyncio.Protocol):
    """One sidecar connection on the agent: HELLO first, then frames both ways."""

    def __init__(self, server: SidecarServer) -> None:
        self._server = server
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._forwarder: TunnelForwarder | None = None
        self._link: WorkerLink | None = None
        self.description = "sidecar"

    # PacketStream
    def send_packets(self, packets: list[bytes] | list[memoryview]) -> bool:
        transport = self._transport
        if transport is None or transport.get_write_buffer_size() > MAX_BUFFERED:
            return False
        transport.write(encode_packets(packets))
        return True

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.description = f"sidecar {peer[0]}:{peer[1]}" if peer else "sidecar"

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError:
            self._abort()
            return
        packets: list[memoryview] = []
        for kind, payload in frames:
            if kind == FrameKind.PACKET and self._link is not None:
                packets.append(payload)
            elif kind == FrameKind.HELLO and self._link is None:
                accepted = self._server.hello(self, bytes(payload))
                if accepted is None:
                    self._abort()
                    return
                self._forwarder, self._link = accepted
            elif kind == FrameKind.PING:
                assert self._transport is not None
                self._transport.write(encode_frame(FrameKind.PONG, bytes(payload)))
            else:
                self._abort()  # packets before HELLO, a second HELLO, or junk
                return
        if packets and self._forwarder is not None and self._link is not None:
            self._forwarder.stream_packets(self._link, packets)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._forwarder is not None and self._link is not None:
            self._forwarder.detach_stream(self._link)
            self._link = None

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class SidecarServer:
    """Agent side: accepts the network sidecars of workers (see module doc).

    ``forwarder`` is the domain of every expectation that names none; without one, each ``expect``
    must name its worker's forwarder."""

    def __init__(self, forwarder: TunnelForwarder | None = None) -> None:
        self.forwarder = forwarder
        self._expected: dict[str, _Expected] = {}
        self._server: asyncio.Server | None = None

    def expect(
        self,
        worker: str,
        address: IPv4Address,
        token: str | None = None,
        *,
        forwarder: TunnelForwarder | None = None,
    ) -> str:
        """Allow ``worker``'s sidecar to attach with ``address`` to ``forwarder`` (default: the
        server's); returns its token (a new random one unless given). The token is a secret: hand it
        to the pod, never log it."""
        target = forwarder or self.forwarder
        if target is None:
            raise ValueError(f"no forwarder for worker {worker}'s sidecar")
        token = token or secrets.token_urlsafe(32)
        self._expected[worker] = _Expected(address, token, target)
        return token

    def revoke(self, worker: str) -> None:
        """Refuse ``worker``'s sidecar from now on (a link it has stays until detached)."""
        self._expected.pop(worker, None)

    async def forget(self, worker: str) -> None:
        """The worker left: refuse its sidecar from now on and drop its link."""
        expected = self._expected.pop(worker, None)
        forwarder = expected.forwarder if expected is not None else self.forwarder
        if forwarder is not None:
            await forwarder.detach_worker(worker)

    def hello(self, stream: _AgentSide, payload: bytes) -> tuple[TunnelForwarder, WorkerLink] | None:
        try:
            hello = json.loads(payload)
            worker, token = str(hello["worker"]), str(hello["token"])
        except (ValueError, KeyError, TypeError):
            return None
        expected = self._expected.get(worker)
        if expected is None or not hmac.compare_digest(expected.token, token):
            return None
        return expected.forwarder, expected.forwarder.attach_stream(worker, expected.address, stream)

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.get_running_loop().create_server(lambda: _AgentSide(self), host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


class _PodSide(asyncio.Protocol):
    """The sidecar's connection to its agent: TUN reads out, frames in to the TUN."""

    def __init__(self, fd: int, batch: int) -> None:
        self._fd = fd
        self._batch = batch
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        asyncio.get_running_loop().add_reader(self._fd, self._on_tun_readable)

    def _on_tun_readable(self) -> None:
        packets: list[bytes] = []
        with contextlib.suppress(BlockingIOError):
            for _ in range(self._batch):
                packets.append(os.read(self._fd, tun.READ_SIZE))
        if packets and self._transport is not None:
            self._transport.write(encode_packets(packets))

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError:
            assert self._transport is not None
            self._transport.abort()
            return
        for kind, payload in frames:
            if kind == FrameKind.PACKET:
                with contextlib.suppress(OSError):
                    os.write(self._fd, payload)

    def pause_writing(self) -> None:
        asyncio.get_running_loop().remove_reader(self._fd)

    def resume_writing(self) -> None:
        asyncio.get_running_loop().add_reader(self._fd, self._on_tun_readable)

    def connection_lost(self, exc: Exception | None) -> None:
        asyncio.get_running_loop().remove_reader(self._fd)
        self._transport = None
        if not self.closed.done():
            self.closed.set_result(str(exc) if exc else "closed by the agent")


async def run_sidecar(
    agent: tuple[str, int],
    worker: str,
    token: str,
    address: IPv4Interface,
    *,
    mtu: int = tun.DEFAULT_MTU,
    txqueuelen: int = tun.DEFAULT_TXQUEUELEN,
    tun_name: str = "rlark0",
    batch: int = 256,
    backoff_max_s: float = 2.0,
) -> None:
    """Create the TUN in our own namespace, then keep one connection to the agent, forever."""
    fd = tun.open_tun(None, tun_name)
    await tun.configure_tun(None, tun_name, address, mtu=mtu, txqueuelen=txqueuelen)
    hello = encode_frame(FrameKind.HELLO, json.dumps({"worker": worker, "token": token}).encode())
    loop = asyncio.get_running_loop()
    backoff = 0.1
    while True:
        try:
            transport, protocol = await loop.create_connection(
                lambda: _PodSide(fd, batch), agent[0], agent[1]
            )
        except OSError as exc:
            print(f"sidecar: cannot reach agent {agent[0]}:{agent[1]}: {exc}", flush=True)
        else:
            transport.write(hello)
            print("CONNECTED", flush=True)
            backoff = 0.1
            reason = await protocol.closed
            print(f"sidecar: connection lost: {reason}", flush=True)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, backoff_max_s)


class SidecarSettings(BaseSettings):
    """The sidecar's setting from its environment (``RLARK_`` prefix): the token the driver put in the
    worker's Secret (``secretKeyRef``), never on its command line."""

    model_config = SettingsConfigDict(env_prefix="RLARK_", extra="ignore", frozen=True)

    tunnel_token: SecretStr = Field(min_length=1, description="This worker's token (RLARK_TUNNEL_TOKEN)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlark_tunnel_agent.tunnel.sidecar")
    parser.add_argument("--agent", required=True, help="HOST:PORT of the agent's sidecar server")
    parser.add_argument("--worker", required=True)
    parser.add_argument("--address", required=True, type=IPv4Interface, help="VIP/PREFIX")
    parser.add_argument("--mtu", type=int, default=tun.DEFAULT_MTU)
    args = parser.parse_args(argv)
    try:
        token = SidecarSettings().tunnel_token.get_secret_value()
    except ValidationError:
        parser.error("RLARK_TUNNEL_TOKEN is not set")
    host, _, port = args.agent.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_sidecar((host, int(port)), args.worker, token, args.address, mtu=args.mtu))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
