"""``TunnelSupervisor``: which domains have tunnels in this cluster, and when they come and go.

Role: the lifecycle rule of issue 8 — a domain's tunnels come up in a cluster when the first
worker of that domain lands there, and go down when the last one leaves. A cluster may also be
asked to relay a domain between two clusters that cannot reach each other (``relay_needed``):
its tunnels then stay up, with or without workers, until ``relay_released``. The tunnel-agent calls
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

from rlark_tunnel_agent.tunnel.dataplane import new_forwarder
from rlark_tunnel_agent.tunnel.forwarder import (
    ForwarderConfig,
    PeerSpec,
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
    def __init__(self, factory: ForwarderFactory = new_forwarder) -> None:
        self._factory = factory
        self._forwarders: dict[str, Forwarder] = {}
        self._relaying: set[str] = set()
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
            forwarder = await self._ensure(config, key)
            await self._apply_topology(forwarder, peers, remote)
            try:
                await forwarder.attach_worker(worker, netns, address)
            except BaseException:
                await self._stop_if_unused(config.domain, forwarder)
                raise

    async def worker_left(self, domain: str, worker: str) -> bool:
        """Detach ``worker``; returns True when it was the domain's last here (tunnels down)."""
        async with self._lock(domain):
            forwarder = self._forwarders.get(domain)
            if forwarder is None:
                return False
            await forwarder.detach_worker(worker)
            return await self._stop_if_unused(domain, forwarder)

    async def relay_needed(
        self,
        config: ForwarderConfig,
        key: asyncssh.SSHKey,
        peers: Iterable[PeerSpec],
        remote: Mapping[str, Sequence[IPv4Address]],
    ) -> None:
        """Keep the domain's tunnels up to relay between peers, even with no local worker."""
        async with self._lock(config.domain):
            forwarder = await self._ensure(config, key)
            self._relaying.add(config.domain)
            await self._apply_topology(forwarder, peers, remote)

    async def relay_released(self, domain: str) -> bool:
        """No relaying asked any more; returns True when the tunnels went down with it."""
        async with self._lock(domain):
            self._relaying.discard(domain)
            forwarder = self._forwarders.get(domain)
            return forwarder is not None and await self._stop_if_unused(domain, forwarder)

    async def _ensure(self, config: ForwarderConfig, key: asyncssh.SSHKey) -> Forwarder:
        forwarder = self._forwarders.get(config.domain)
        if forwarder is None:
            forwarder = self._factory(config, key)
            await forwarder.start()
            self._forwarders[config.domain] = forwarder
        return forwarder

    async def _stop_if_unused(self, domain: str, forwarder: Forwarder) -> bool:
        if forwarder.worker_count > 0 or domain in self._relaying:
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
        self._relaying.clear()
        for domain in self.domains:
            async with self._lock(domain):
                await self._stop(domain)
