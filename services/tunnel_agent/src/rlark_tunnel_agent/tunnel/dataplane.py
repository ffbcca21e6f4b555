"""``DataplaneForwarder``: ``TunnelForwarder``'s API with the packet path in a Go process.

Role: the fast data path of one domain in one agent (ADR 0008). Python keeps the control plane —
which workers and peers a domain has, creating each worker's TUN device inside the worker's
network namespace (``tun.py``), state and health for the agent — and hands the per-packet work to
``rlark-tunnel-dp`` (``services/tunnel_agent/dataplane``, Go, x/crypto/ssh): reading and writing the
TUN devices, strict reverse-path filtering, the SSH links to peer clusters (pinned Ed25519 keys,
AEAD ciphers only, one direct-tcpip channel to ``rlark-tunnel.<domain>``, frames of ``frames.py``),
PING/PONG, link-down detection, redialing with backoff, relays and every counter.

One process per domain, started inside ``ForwarderConfig.netns`` (``nsenter``) so its listening and
dialing sockets live there, as ``sshlink.py``'s do. It is driven over a ``SOCK_SEQPACKET`` socket
pair: one JSON request per message, one JSON reply; a worker's TUN fd travels with its ``attach``
request (``SCM_RIGHTS``) and belongs to the Go process from then on. The key is sent once, on that
private socket pair, and never written anywhere. When this side closes the socket the process
closes every device and link and exits, so it cannot outlive its agent.

Concurrency: each request is a short synchronous exchange (the Go side never blocks in a handler),
serialised by a lock; the asyncio loop is not held for longer than a local round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import asyncssh

from rlark_tunnel_agent.tunnel import tun
from rlark_tunnel_agent.tunnel.forwarder import (
    ForwarderConfig,
    ForwarderError,
    PeerSpec,
    TunnelForwarder,
    TunnelState,
    WorkerState,
)
from rlark_tunnel_agent.tunnel.sshlink import LinkState, PeerState

_REPLY_BYTES = 1 << 22


class DataplaneError(ForwarderError):
    """The Go data path refused a request or is gone."""


class DataplaneForwarder:
    """Forwards one domain's packets through ``rlark-tunnel-dp`` (see module doc)."""

    def __init__(self, config: ForwarderConfig, private_key: asyncssh.SSHKey, binary: Path) -> None:
        self.config = config
        self._key = private_key
        self._binary = binary
        self._sock: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = threading.Lock()
        self._port: int | None = None
        self._workers: dict[str, tuple[IPv4Address, str, str]] = {}
        """worker → (address, netns, device name): what the Go side does not know."""

    # --- control socket -------------------------------------------------------------------

    def _call(self, request: dict[str, Any], fds: Sequence[int] = ()) -> dict[str, Any]:
        sock = self._sock
        if sock is None:
            raise DataplaneError(f"the data path of domain {self.config.domain} is not running")
        data = json.dumps(request).encode()
        with self._lock:
            try:
                if fds:
                    socket.send_fds(sock, [data], list(fds))
                else:
                    sock.send(data)
                raw = sock.recv(_REPLY_BYTES)
            except OSError as exc:
                raise DataplaneError(f"the data path of domain {self.config.domain} is gone: {exc}") from exc
        if not raw:
            raise DataplaneError(f"the data path of domain {self.config.domain} exited")
        reply: dict[str, Any] = json.loads(raw)
        if not reply.get("ok"):
            raise DataplaneError(f"{request['op']}: {reply.get('error')}")
        return reply

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> int:
        """Start the process and the domain's SSH endpoint; returns its port."""
        cfg = self.config
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [str(self._binary), "--control-fd", str(theirs.fileno())]
        if cfg.dataplane_profile_dir:
            argv.append(f"--cpuprofile={cfg.dataplane_profile_dir}/dp-{cfg.domain}-{cfg.cluster}.pprof")
        if cfg.netns is not None:
            argv = ["nsenter", f"--net={tun.netns_path(cfg.netns)}", "--", *argv]
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        start = {
            "domain": cfg.domain,
            "network": str(cfg.network),
            "cluster": cfg.cluster,
            "private_key": self._key.export_private_key("openssh").decode(),
            "listen_host": cfg.listen_host,
            "listen_port": cfg.listen_port,
            "listen_ports": cfg.listen_ports,
            "ping_interval_s": cfg.ping_interval_s,
            "dead_after_s": cfg.dead_after_s,
            "connect_timeout_s": cfg.connect_timeout_s,
            "backoff_max_s": cfg.backoff_max_s,
            "transport": cfg.dataplane_transport,
        }
        try:
            reply = await asyncio.to_thread(self._call, {"op": "start", "start": start})
        except DataplaneError as exc:
            await self.stop()
            if "address already in use" in str(exc):
                raise ForwarderError(
                    f"no free tunnel port for domain {cfg.domain} in {cfg.listen_port}-"
                    f"{cfg.listen_port + cfg.listen_ports - 1} (one per domain; raise RLARK_TUNNEL_LISTEN_PORTS)"
                ) from exc
            raise
        self._port = int(reply["port"])
        return self._port

    async def stop(self) -> None:
        """Close every tunnel and remove every worker TUN device (the process exits)."""
        sock, proc = self._sock, self._proc
        if sock is not None:
            with contextlib.suppress(DataplaneError):  # already gone: closing the socket is all that is left
                await asyncio.to_thread(self._call, {"op": "stop"})
            sock.close()
            self._sock = None
        if proc is not None:
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            self._proc = None
        self._workers.clear()

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def worker_count(self) -> int:
        return len(self._workers)

    # --- topology ---------------------------------------------------------------------------

    async def set_peers(self, peers: Iterable[PeerSpec]) -> None:
        specs = [
            {
                "cluster": p.cluster,
                "public_key": p.public_key,
                "endpoint": list(p.endpoint) if p.endpoint is not None else None,
                "via": p.via,
            }
            for p in peers
        ]
        self._call({"op": "peers", "peers": specs})

    def set_remote_addresses(self, cluster: str, addresses: Sequence[IPv4Address]) -> None:
        self._call({"op": "remote", "cluster": cluster, "addresses": [str(a) for a in addresses]})

    # --- workers ----------------------------------------------------------------------------

    async def attach_worker(self, worker: str, netns: str, address: IPv4Address) -> None:
        """Give ``worker`` (in ``netns``) a TUN device holding ``address`` and hand its fd to the
        data path. Idempotent for the same address."""
        current = self._workers.get(worker)
        if current is not None and current[0] == address:
            return
        cfg = self.config
        if address not in cfg.network:
            raise ForwarderError(f"{address} is outside {cfg.network}")
        fd = await asyncio.to_thread(tun.open_tun, netns, cfg.tun_name, offload=cfg.offload)
        device = tun.TunDevice(fd, cfg.tun_name, netns)
        try:
            interface = IPv4Interface(f"{address}/{cfg.network.prefixlen}")
            await tun.configure_tun(netns, cfg.tun_name, interface, mtu=cfg.mtu, txqueuelen=cfg.txqueuelen)
            self._call({"op": "attach", "worker": worker, "address": str(address)}, [fd])
        finally:
            device.close()  # the data path holds its own copy of the fd
        self._workers[worker] = (address, netns, cfg.tun_name)

    def attach_device(self, worker: str, device: tun.TunDevice, address: IPv4Address) -> None:
        """Forward for ``worker`` through an already open packet device (closed here: the data
        path keeps its own copy of the fd)."""
        try:
            self._call({"op": "attach", "worker": worker, "address": str(address)}, [device.fd])
        finally:
            device.close()
        self._workers[worker] = (address, device.netns or "", device.name)

    async def detach_worker(self, worker: str) -> None:
        """Stop forwarding for ``worker``; its TUN device goes with the last fd. Idempotent."""
        if self._workers.pop(worker, None) is not None:
            self._call({"op": "detach", "worker": worker})

    # --- health -----------------------------------------------------------------------------

    def state(self) -> TunnelState:
        raw = self._call({"op": "state"})["state"]
        peers = sorted(
            (
                PeerState(
                    cluster=p["cluster"],
                    state=LinkState(p["state"]),
                    dials=p["dials"],
                    rtt_ms=p["rtt_ms"],
                    last_error=p["last_error"],
                    connects=p["connects"],
                    up_since=p["up_since"],
                    counters=p["counters"],
                )
                for p in raw["peers"]
            ),
            key=lambda p: p.cluster,
        )
        workers = [
            WorkerState(
                worker=name,
                address=str(address),
                netns=netns,
                device=device,
                counters=raw["workers"].get(name, {}),
            )
            for name, (address, netns, device) in self._workers.items()
        ]
        return TunnelState(
            domain=self.config.domain,
            cluster=self.config.cluster,
            network=str(self.config.network),
            listen_port=self._port,
            peers=peers,
            workers=workers,
            routes=dict(raw["routes"]),
        )

    async def wait_peer_up(self, cluster: str, timeout_s: float = 10.0) -> None:
        """Wait until the link to ``cluster`` is up (for start-up and tests)."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.state()
            peer = next((p for p in state.peers if p.cluster == cluster), None)
            if peer is not None and peer.state == LinkState.UP:
                return
            if time.monotonic() > deadline:
                error = peer.last_error if peer is not None else "no such peer"
                raise TimeoutError(f"peer {cluster} not up after {timeout_s} s: {error}")
            await asyncio.sleep(0.05)


def new_forwarder(
    config: ForwarderConfig, private_key: asyncssh.SSHKey
) -> TunnelForwarder | DataplaneForwarder:
    """The forwarder ``config`` asks for: the Go data path when ``config.dataplane`` names its
    binary, else the asyncio ``TunnelForwarder``."""
    if config.dataplane is None:
        return TunnelForwarder(config, private_key)
    return DataplaneForwarder(config, private_key, Path(config.dataplane))
