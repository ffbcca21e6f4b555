"""``TunnelForwarder``: the data path of one network domain in one cluster's tunnel-agent.

Role: move IP packets between the domain's local workers and the domain's peer clusters, by
destination address. It wires the pure core (``routing.Router`` decides, ``frames`` encodes) to
the I/O adapters (``tun`` worker links, ``sshlink`` peer links) and owns their counters.

- Worker links: the worker's TUN device lives in the worker's network namespace, its fd here
  (``tun.py``). The fd is registered with the event loop; on each wakeup up to ``batch_packets``
  packets are read, checked and grouped by outgoing link, and each peer gets **one** channel write
  for the whole group (length-prefixed frames). Packets from a worker whose source is not its own
  virtual IP are dropped and counted (``spoofed``).
- Peer links: one SSH connection per peer cluster (``PeerDialer`` when this side dials, the
  domain's ``TunnelServer`` when the peer dials). Frames received are decoded in one pass and
  written to the destination worker's TUN — or, on a relay, framed again towards the next peer.
- Relays: a peer spec may name ``via``: that cluster's virtual IPs are routed through the relay's
  link, and the relay's own forwarder forwards by destination like any other packet.
- Back-pressure: when a peer channel's send buffer passes its high-water mark, the forwarder
  stops reading worker TUNs until it drains; the kernel queue (``txqueuelen``) then fills and the
  workers' TCP slows down, as behind a congested NIC.

Concurrency: single asyncio loop; the hot path is synchronous callbacks with no awaits.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Protocol

import asyncssh

from rlark_tunnel_agent.tunnel import tun
from rlark_tunnel_agent.tunnel.frames import encode_packets
from rlark_tunnel_agent.tunnel.routing import Drop, LinkCounters, Router
from rlark_tunnel_agent.tunnel.sshlink import PeerDialer, PeerLink, PeerState, TunnelServer


@dataclass(frozen=True, slots=True)
class PeerSpec:
    """A peer cluster of the domain, as the desired topology describes it.

    ``public_key`` is the OpenSSH public key issued for (domain, that cluster): pinned as its host
    key when dialing and as the only key its agent may log in with. ``endpoint`` set means this
    side dials it. ``via`` names a relay cluster when the two cannot reach each other: then no
    link is kept to this peer and its addresses are routed through the relay's link.
    """

    cluster: str
    public_key: str
    endpoint: tuple[str, int] | None = None
    via: str | None = None


@dataclass(frozen=True, slots=True)
class ForwarderConfig:
    domain: str
    network: IPv4Network
    cluster: str
    listen_host: str = "0.0.0.0"  # noqa: S104 - the agent's peers reach it on its cluster address
    listen_port: int = 0
    listen_ports: int = 1
    """With a fixed ``listen_port``: the domain's server takes the first free port of
    ``listen_port .. listen_port + listen_ports - 1`` (one per domain on an agent, so a Service
    or firewall can expose a known range)."""
    mtu: int = tun.DEFAULT_MTU
    txqueuelen: int = tun.DEFAULT_TXQUEUELEN
    tun_name: str = "rlark0"
    offload: bool = True
    batch_packets: int = 256
    ping_interval_s: float = 1.0
    dead_after_s: float = 4.0
    connect_timeout_s: float = 3.0
    backoff_max_s: float = 2.0
    netns: str | None = None
    """The network namespace (name or path) in which the tunnel sockets live — the server's
    listening socket and the dialers' sockets; None: the agent's own. Workers' TUNs are unaffected."""
    dataplane: str | None = None
    """Path of the ``rlark-tunnel-dp`` binary: the packet path runs there (``dataplane.py``, ADR
    0008). None: this module's asyncio forwarder (worker sidecar streams need it)."""
    dataplane_transport: str = "keyed"
    """With ``dataplane``: ``keyed`` — frames on a second connection, AES-128-GCM with keys agreed
    inside the pinned SSH session — or ``ssh`` — frames on the SSH channel itself (about 3x the
    CPU per byte; measured in ADR 0008)."""
    dataplane_profile_dir: str | None = None
    """With ``dataplane``: the data path writes a CPU profile (pprof) of its run into this directory
    (``dp-<domain>-<cluster>.pprof``); None: no profile."""


@dataclass(frozen=True, slots=True)
class WorkerState:
    worker: str
    address: str
    netns: str
    device: str
    counters: dict[str, object]


@dataclass(frozen=True, slots=True)
class TunnelState:
    """Everything ``state()`` reports; ``as_dict()`` is JSON-ready."""

    domain: str
    cluster: str
    network: str
    listen_port: int | None
    peers: list[PeerState] = field(default_factory=list)
    workers: list[WorkerState] = field(default_factory=list)
    routes: dict[str, str] = field(default_factory=dict)

    def peer(self, cluster: str) -> PeerState:
        return next(p for p in self.peers if p.cluster == cluster)

    def worker(self, worker: str) -> WorkerState:
        return next(w for w in self.workers if w.worker == worker)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class PacketStream(Protocol):
    """A worker reached over a byte stream of frames (its network sidecar), not a local fd."""

    description: str

    def send_packets(self, packets: list[bytes] | list[memoryview]) -> bool: ...

    def close(self) -> None: ...


class WorkerLink:
    """A local worker: its TUN fd (or its sidecar's stream) and counters."""

    __slots__ = ("address", "counters", "device", "reading", "stream", "worker")

    def __init__(
        self,
        worker: str,
        address: IPv4Interface,
        device: tun.TunDevice | None,
        stream: PacketStream | None = None,
    ) -> None:
        self.worker = worker
        self.address = address
        self.device = device
        self.stream = stream
        self.counters = LinkCounters()
        self.reading = False

    def close(self) -> None:
        if self.device is not None:
            self.device.close()
        if self.stream is not None:
            self.stream.close()


class ForwarderError(RuntimeError):
    pass


def _stream_name(stream: PacketStream | None) -> str:
    return stream.description if stream is not None else ""


class TunnelForwarder:
    """Forwards one domain's packets between local workers and peer clusters (see module doc)."""

    def __init__(self, config: ForwarderConfig, private_key: asyncssh.SSHKey) -> None:
        self.config = config
        self._key = private_key
        self._router: Router[WorkerLink | PeerLink] = Router(config.network)
        self._workers: dict[str, WorkerLink] = {}
        self._peers: dict[str, PeerSpec] = {}
        self._links: dict[str, PeerLink] = {}
        self._dialers: dict[str, PeerDialer] = {}
        self._peer_keys: dict[str, asyncssh.SSHKey] = {}
        self._remote: dict[str, list[IPv4Address]] = {}
        self._paused: set[PeerLink] = set()
        self._server = TunnelServer(config.domain, private_key, lambda: self._peer_keys, self._links.get)
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> int:
        """Start the domain's SSH endpoint; returns its port."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        candidates = (
            [0] if cfg.listen_port == 0 else range(cfg.listen_port, cfg.listen_port + cfg.listen_ports)
        )
        for port in candidates:
            try:
                self._port = await self._server.start(cfg.listen_host, port, cfg.netns)
                return self._port
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
        raise ForwarderError(
            f"no free tunnel port for domain {cfg.domain} in {cfg.listen_port}-"
            f"{cfg.listen_port + cfg.listen_ports - 1} (one per domain; raise RLARK_TUNNEL_LISTEN_PORTS)"
        )

    async def stop(self) -> None:
        """Close every tunnel and remove every worker TUN device."""
        await self._server.stop()
        for cluster in list(self._dialers):
            await self._dialers.pop(cluster).stop()
        for link in self._links.values():
            link.close("tunnel stopped")
        for worker in list(self._workers):
            await self.detach_worker(worker)

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def worker_count(self) -> int:
        return len(self._workers)

    # --- topology ---------------------------------------------------------------------------

    async def set_peers(self, peers: Iterable[PeerSpec]) -> None:
        """Make the peer set equal to ``peers``: new ones get a link (and a dialer when this side
        dials), removed ones are closed and their routes dropped. Idempotent."""
        wanted = {p.cluster: p for p in peers}
        if self.config.cluster in wanted:
            raise ForwarderError("a cluster is not its own peer")
        for cluster in [c for c in self._peers if c not in wanted or wanted[c] != self._peers[c]]:
            await self._remove_peer(cluster)
        for cluster, spec in wanted.items():
            if cluster not in self._peers:
                self._add_peer(spec)
        for cluster, addresses in self._remote.items():
            self._route_remote(cluster, addresses)

    def _add_peer(self, spec: PeerSpec) -> None:
        self._peers[spec.cluster] = spec
        if spec.via is not None:
            return
        key = asyncssh.import_public_key(spec.public_key)
        self._peer_keys[spec.cluster] = key
        link = PeerLink(
            spec.cluster,
            dials=spec.endpoint is not None,
            on_packets=self._on_peer_packets,
            on_writable=self._on_writable,
            ping_interval_s=self.config.ping_interval_s,
            dead_after_s=self.config.dead_after_s,
        )
        self._links[spec.cluster] = link
        if spec.endpoint is not None:
            dialer = PeerDialer(
                link,
                domain=self.config.domain,
                local_cluster=self.config.cluster,
                client_key=self._key,
                peer_host_key=key,
                host=spec.endpoint[0],
                port=spec.endpoint[1],
                connect_timeout_s=self.config.connect_timeout_s,
                backoff_max_s=self.config.backoff_max_s,
                netns=self.config.netns,
            )
            self._dialers[spec.cluster] = dialer
            dialer.start()

    async def _remove_peer(self, cluster: str) -> None:
        self._peers.pop(cluster, None)
        self._peer_keys.pop(cluster, None)
        dialer = self._dialers.pop(cluster, None)
        if dialer is not None:
            await dialer.stop()
        link = self._links.pop(cluster, None)
        if link is not None:
            link.close("peer removed")
            self._router.remove_link(link)
            self._on_writable(link, True)
        for address in self._remote.get(cluster, []):
            self._router.remove_route(address)

    def set_remote_addresses(self, cluster: str, addresses: Sequence[IPv4Address]) -> None:
        """The virtual IPs that workers of peer ``cluster`` hold now (replaces the previous set)."""
        for old in self._remote.get(cluster, []):
            if old not in addresses:
                self._router.remove_route(old)
        self._remote[cluster] = list(addresses)
        self._route_remote(cluster, addresses)

    def _route_remote(self, cluster: str, addresses: Sequence[IPv4Address]) -> None:
        spec = self._peers.get(cluster)
        link = None
        if spec is not None:
            link = self._links.get(spec.via or cluster)
        for address in addresses:
            if link is None:
                self._router.remove_route(address)
            else:
                self._router.set_route(address, link)

    # --- workers ----------------------------------------------------------------------------

    async def attach_worker(self, worker: str, netns: str, address: IPv4Address) -> None:
        """Give ``worker`` (in ``netns``) a TUN device holding ``address`` and the route for the
        domain network, and start forwarding its packets. Idempotent for the same address."""
        if self._check_attach(worker, address):
            return
        cfg = self.config
        fd = await asyncio.to_thread(tun.open_tun, netns, cfg.tun_name, offload=cfg.offload)
        device = tun.TunDevice(fd, cfg.tun_name, netns)
        interface = IPv4Interface(f"{address}/{cfg.network.prefixlen}")
        try:
            await tun.configure_tun(netns, cfg.tun_name, interface, mtu=cfg.mtu, txqueuelen=cfg.txqueuelen)
        except BaseException:
            device.close()
            raise
        self.attach_device(worker, device, address)

    def attach_device(self, worker: str, device: tun.TunDevice, address: IPv4Address) -> None:
        """Forward for ``worker`` through an already open, configured packet device.

        ``attach_worker`` uses it after creating the TUN; it also takes any fd that reads and
        writes one packet (virtio-net header first) per call — a network sidecar's device, or a
        ``SOCK_SEQPACKET`` socket pair in tests. The forwarder owns (and closes) the fd.
        """
        if self._check_attach(worker, address):
            device.close()
            return
        interface = IPv4Interface(f"{address}/{self.config.network.prefixlen}")
        link = WorkerLink(worker, interface, device)
        self._workers[worker] = link
        self._router.set_route(address, link)
        if not self._paused:
            self._start_reading(link)

    def _check_attach(self, worker: str, address: IPv4Address) -> bool:
        """True when ``worker`` already holds ``address``; raises when the address is unusable."""
        current = self._workers.get(worker)
        if current is not None and current.address.ip == address:
            return True
        if address not in self.config.network:
            raise ForwarderError(f"{address} is outside {self.config.network}")
        owner = self._router.route_of(address)
        if owner is not None and owner is not current:
            raise ForwarderError(f"{address} is already routed elsewhere")
        if current is not None:  # same worker, new address: drop the old device
            self._stop_reading(current)
            self._router.remove_link(current)
            self._workers.pop(worker)
            current.close()
        return False

    async def detach_worker(self, worker: str) -> None:
        """Stop forwarding for ``worker`` and remove its TUN device. Idempotent."""
        link = self._workers.pop(worker, None)
        if link is None:
            return
        self._stop_reading(link)
        self._router.remove_link(link)
        link.close()

    def attach_stream(self, worker: str, address: IPv4Address, stream: PacketStream) -> WorkerLink:
        """Forward for ``worker`` through its sidecar's frame stream (see ``sidecar.py``).

        A newer stream for the same worker replaces the older one."""
        if self._check_attach(worker, address):
            self.detach_stream(self._workers[worker])
        interface = IPv4Interface(f"{address}/{self.config.network.prefixlen}")
        link = WorkerLink(worker, interface, None, stream)
        self._workers[worker] = link
        self._router.set_route(address, link)
        return link

    def detach_stream(self, link: WorkerLink) -> None:
        """The sidecar's stream ended: forget the link if it is still the worker's current one."""
        if self._workers.get(link.worker) is link:
            del self._workers[link.worker]
            self._router.remove_link(link)
        link.close()

    def stream_packets(self, link: WorkerLink, packets: list[memoryview]) -> None:
        """Packets a worker's sidecar sent: counted, checked and forwarded like TUN reads."""
        counters = link.counters
        counters.packets_in += len(packets)
        counters.bytes_in += sum(map(len, packets))
        for target, group in self._router.route_batch(packets, link, counters.drops).items():
            self._emit(target, group)

    def _start_reading(self, link: WorkerLink) -> None:
        if link.device is None:
            return
        if not link.reading and self._loop is not None:
            self._loop.add_reader(link.device.fd, self._on_worker_readable, link)
            link.reading = True

    def _stop_reading(self, link: WorkerLink) -> None:
        if link.reading and self._loop is not None and link.device is not None:
            self._loop.remove_reader(link.device.fd)
            link.reading = False

    # --- hot path ---------------------------------------------------------------------------

    def _on_worker_readable(self, link: WorkerLink) -> None:
        assert link.device is not None
        fd = link.device.fd
        read = os.read
        size = tun.READ_SIZE
        packets: list[bytes] = []
        append = packets.append
        try:
            for _ in range(self.config.batch_packets):
                append(read(fd, size))
        except BlockingIOError:
            pass
        except OSError as exc:
            self._stop_reading(link)
            link.counters.drops[f"read_error:{exc.errno}"] += 1
        if not packets:
            return
        counters = link.counters
        counters.packets_in += len(packets)
        counters.bytes_in += sum(map(len, packets))
        groups = self._router.route_batch(packets, link, counters.drops)
        for target, group in groups.items():
            self._emit(target, group)

    def _on_peer_packets(self, link: PeerLink, packets: list[memoryview]) -> None:
        groups = self._router.route_batch(packets, link, link.counters.drops)
        for target, group in groups.items():
            self._emit(target, group)

    def _emit(self, target: WorkerLink | PeerLink, packets: list[bytes] | list[memoryview]) -> None:
        if isinstance(target, PeerLink):
            if not target.send(encode_packets(packets), len(packets)):
                target.counters.drop(Drop.LINK_DOWN, len(packets))
            return
        if target.stream is not None:
            if target.stream.send_packets(packets):
                target.counters.packets_out += len(packets)
                target.counters.bytes_out += sum(map(len, packets))
            else:
                target.counters.drop(Drop.WRITE_FAILED, len(packets))
            return
        assert target.device is not None
        fd = target.device.fd
        write = os.write
        sent = size = 0
        for packet in packets:
            try:
                size += write(fd, packet)
            except OSError:
                target.counters.drop(Drop.WRITE_FAILED)
                continue
            sent += 1
        target.counters.packets_out += sent
        target.counters.bytes_out += size

    def _on_writable(self, link: PeerLink, writable: bool) -> None:
        if writable:
            self._paused.discard(link)
            if not self._paused:
                for worker in self._workers.values():
                    self._start_reading(worker)
        else:
            if not self._paused:
                for worker in self._workers.values():
                    self._stop_reading(worker)
            self._paused.add(link)

    # --- health -----------------------------------------------------------------------------

    def state(self) -> TunnelState:
        """Tunnel state: per peer up/down, RTT, bytes, last error; per worker counters; routes."""
        peers = [link.snapshot() for link in self._links.values()]
        workers = [
            WorkerState(
                worker=w.worker,
                address=str(w.address.ip),
                netns=(w.device.netns or "") if w.device is not None else "",
                device=w.device.name if w.device is not None else _stream_name(w.stream),
                counters=w.counters.as_dict(),
            )
            for w in self._workers.values()
        ]
        routes: dict[str, str] = {}
        for worker in self._workers.values():
            routes[str(worker.address.ip)] = f"worker:{worker.worker}"
        for cluster, addresses in self._remote.items():
            spec = self._peers.get(cluster)
            for address in addresses:
                if spec is not None and self._router.route_of(address) is not None:
                    routes[str(address)] = f"peer:{spec.via or cluster}"
        return TunnelState(
            domain=self.config.domain,
            cluster=self.config.cluster,
            network=str(self.config.network),
            listen_port=self._port,
            peers=peers,
            workers=workers,
            routes=routes,
        )

    async def wait_peer_up(self, cluster: str, timeout_s: float = 10.0) -> None:
        """Wait until the link to ``cluster`` is up (for start-up and tests)."""
        deadline = time.monotonic() + timeout_s
        while True:
            link = self._links.get(cluster)
            if link is not None and link.is_up:
                return
            if time.monotonic() > deadline:
                error = link.last_error if link is not None else "no such peer"
                raise TimeoutError(f"peer {cluster} not up after {timeout_s} s: {error}")
            await asyncio.sleep(0.05)
