"""``TunnelSupervisor``: which domains have tunnels in this cluster, and when they come and go.

Role: the lifecycle rule of issue 8 — a domain's tunnels come up in a cluster when the first
worker of that domain lands there, and go down when the last one leaves. The tunnel-agent calls
``worker_landed`` / ``worker_left`` from its placement handling and ``update_topology`` when the
netdomain service publishes new desired tunnels or allocations; everything is idempotent so
redelivered events are harmless.

Concurrency: one asyncio lock per domain serialises start, attach, detach and stop of that
domain; different domains proceed independently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from ipaddress import IPv4Address
from typing import Protocol

import asyncssh

from rlark_tunnel_agent.tunnel.forwarder import (
    ForwarderConfig,
    PeerSpec,
    TunnelForwarder,
    TunnelState,
)


class Forwarder(Protocol):
    """What the supervisor needs of a ``TunnelForwarder`` (a fake implements it in tests)."""

    @property
    def worker_count(self) -> int: ...

    async def start(self) -> int: ...

    async def stop(self) -> None: ...

    async def set_peers(self, peers: Iterable[PeerSpec]) -> None: ...

    def set_remote_addresses(self, cluster: str, addresses: Sequence[IPv4Address]) -> None: ...

    async def attach_worker(self, worker: str, netns: str, address: IPv4Address) -> None: ...

    async def detach_worker(self, worker: str) -> None: ...

    def state(self) -> TunnelState: ...


ForwarderFactory = Callable[[ForwarderConfig, asyncssh.SSHKey], Forwarder]


class TunnelSupervisor:
    def __init__(self, factory: ForwarderFactory = TunnelForwarder) -> None:
        self._factory = factory
        self._forwarders: dict[str, Forwarder] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, domain: str) -> asyncio.Lock:
        return self._locks.setdefault(domain, asyncio.Lock())

    @property
    def domains(self) -> list[str]:
        return sorted(self._forwarders)

    async def worker_landed(
        self,
        config: ForwarderConfig,
        key: asyncssh.SSHKey,
        peers: Iterable[PeerSpec],
        remote: Mapping[str, Sequence[IPv4Address]],
        *,
        worker: str,
        netns: str,
        address: IPv4Address,
    ) -> None:
        """Attach ``worker``; the first worker of a domain here brings its tunnels up."""
        async with self._lock(config.domain):
            forwarder = self._forwarders.get(config.domain)
            if forwarder is None:
                forwarder = self._factory(config, key)
                await forwarder.start()
                self._forwarders[config.domain] = forwarder
            await self._apply_topology(forwarder, peers, remote)
            try:
                await forwarder.attach_worker(worker, netns, address)
            except BaseException:
                if forwarder.worker_count == 0:
                    await self._stop(config.domain)
                raise

    async def worker_left(self, domain: str, worker: str) -> bool:
        """Detach ``worker``; returns True when it was the domain's last here (tunnels down)."""
        async with self._lock(domain):
            forwarder = self._forwarders.get(domain)
            if forwarder is None:
                return False
            await forwarder.detach_worker(worker)
            if forwarder.worker_count > 0:
                return False
            await self._stop(domain)
            return True

    async def update_topology(
        self,
        domain: str,
        peers: Iterable[PeerSpec],
        remote: Mapping[str, Sequence[IPv4Address]],
    ) -> None:
        """New desired peers or allocations of a domain that has tunnels here (else ignored)."""
        async with self._lock(domain):
            forwarder = self._forwarders.get(domain)
            if forwarder is not None:
                await self._apply_topology(forwarder, peers, remote)

    async def _apply_topology(
        self,
        forwarder: Forwarder,
        peers: Iterable[PeerSpec],
        remote: Mapping[str, Sequence[IPv4Address]],
    ) -> None:
        await forwarder.set_peers(peers)
        for cluster, addresses in remote.items():
            forwarder.set_remote_addresses(cluster, addresses)

    async def _stop(self, domain: str) -> None:
        forwarder = self._forwarders.pop(domain, None)
        if forwarder is not None:
            await forwarder.stop()

    def states(self) -> list[TunnelState]:
        """Health of every domain's tunnels in this cluster."""
        return [self._forwarders[d].state() for d in self.domains]

    async def close(self) -> None:
        for domain in self.domains:
            async with self._lock(domain):
                await self._stop(domain)
