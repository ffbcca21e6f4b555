"""Forwarding decisions of one network domain: where a packet goes, or why it is dropped.

Role: the pure core of a tunnel-agent's data path (no I/O). A ``Router`` maps every virtual IP of
the domain to the link that leads to it: the local worker's TUN link for workers of this cluster,
the peer link of the cluster that hosts it (or of the relay cluster in between) for the others.

One rule covers anti-spoofing for workers and peers alike (strict reverse-path filtering): a packet
is accepted from a link only when the route back to its *source* address is that same link. A
worker can therefore only send from its own virtual IP, and a peer only from the virtual IPs it
hosts (or relays). Destinations must be routed virtual IPs of this domain: anything else, including
other domains' addresses, is dropped — one ``Router`` per domain is what isolates domains.

Packets are read as the TUN devices hand them out: ``offset`` bytes of virtio-net header, then the
IPv4 header.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from ipaddress import IPv4Address, IPv4Network
from typing import Generic, TypeVar

L = TypeVar("L")
P = TypeVar("P", bytes, memoryview)

VNET_HDR_LEN = 10
"""Size of ``struct virtio_net_hdr`` that precedes each packet on our TUN devices."""


class Drop(Enum):
    """Why a packet was not forwarded; the value is the counter's name."""

    TRUNCATED = "truncated"
    NOT_IPV4 = "not_ipv4"
    SPOOFED = "spoofed"
    OUTSIDE_DOMAIN = "outside_domain"
    NO_ROUTE = "no_route"
    LOOP = "loop"
    LINK_DOWN = "link_down"
    WRITE_FAILED = "write_failed"


@dataclass(slots=True)
class LinkCounters:
    """Traffic through one link, as seen by the agent ("in" = received from the link)."""

    packets_in: int = 0
    bytes_in: int = 0
    packets_out: int = 0
    bytes_out: int = 0
    drops: Counter[str] = field(default_factory=Counter)

    def drop(self, reason: Drop, count: int = 1) -> None:
        self.drops[reason.value] += count

    def as_dict(self) -> dict[str, object]:
        return {
            "packets_in": self.packets_in,
            "bytes_in": self.bytes_in,
            "packets_out": self.packets_out,
            "bytes_out": self.bytes_out,
            "drops": dict(self.drops),
        }


class Router(Generic[L]):
    """Virtual IP → link table of one domain, and the per-packet decision.

    Links are any objects compared by identity (the forwarder uses its link objects).
    """

    __slots__ = ("_mask", "_net", "_network", "_offset", "_routes")

    def __init__(self, network: IPv4Network, offset: int = VNET_HDR_LEN) -> None:
        self._network = network
        self._net = int(network.network_address)
        self._mask = int(network.netmask)
        self._offset = offset
        self._routes: dict[bytes, L] = {}

    @property
    def network(self) -> IPv4Network:
        return self._network

    def set_route(self, address: IPv4Address, link: L) -> None:
        """``address`` is reached (and may only be sent from) through ``link``."""
        if address not in self._network:
            raise ValueError(f"{address} is outside the domain network {self._network}")
        self._routes[address.packed] = link

    def remove_route(self, address: IPv4Address) -> None:
        self._routes.pop(address.packed, None)

    def remove_link(self, link: L) -> list[IPv4Address]:
        """Forget every route through ``link``; returns the addresses that had one."""
        gone = [key for key, via in self._routes.items() if via is link]
        for key in gone:
            del self._routes[key]
        return [IPv4Address(key) for key in gone]

    def route_of(self, address: IPv4Address) -> L | None:
        return self._routes.get(address.packed)

    def addresses_via(self, link: L) -> list[IPv4Address]:
        return sorted(IPv4Address(key) for key, via in self._routes.items() if via is link)

    def decide(self, packet: bytes | memoryview, from_link: L) -> L | Drop:
        """The link ``packet`` (received from ``from_link``) goes out on, or the drop reason."""
        offset = self._offset
        if len(packet) < offset + 20:
            return Drop.TRUNCATED
        if packet[offset] >> 4 != 4:
            return Drop.NOT_IPV4
        routes = self._routes
        if routes.get(bytes(packet[offset + 12 : offset + 16])) is not from_link:
            return Drop.SPOOFED
        destination = bytes(packet[offset + 16 : offset + 20])
        out = routes.get(destination)
        if out is None:
            inside = int.from_bytes(destination, "big") & self._mask == self._net
            return Drop.NO_ROUTE if inside else Drop.OUTSIDE_DOMAIN
        if out is from_link:
            return Drop.LOOP
        return out

    def route_batch(self, packets: Sequence[P], from_link: L, drops: Counter[str]) -> dict[L, list[P]]:
        """``decide`` for many packets at once: packets grouped by outgoing link (order kept),
        drops added to ``drops`` by reason. The loop is inlined: this is the per-packet hot path,
        and a function call per packet would cost as much as the decision itself."""
        offset = self._offset
        src_at, dst_at, end = offset + 12, offset + 16, offset + 20
        routes = self._routes
        get = routes.get
        groups: dict[L, list[P]] = {}
        for packet in packets:
            if len(packet) < end:
                drops[Drop.TRUNCATED.value] += 1
                continue
            if packet[offset] >> 4 != 4:
                drops[Drop.NOT_IPV4.value] += 1
                continue
            if get(bytes(packet[src_at:dst_at])) is not from_link:
                drops[Drop.SPOOFED.value] += 1
                continue
            out = get(bytes(packet[dst_at:end]))
            if out is None or out is from_link:
                reason = self.decide(packet, from_link)  # rare: let decide name the reason
                drops[reason.value if isinstance(reason, Drop) else Drop.NO_ROUTE.value] += 1
                continue
            group = groups.get(out)
            if group is None:
                groups[out] = [packet]
            else:
                group.append(packet)
        return groups
