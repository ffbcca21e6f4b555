"""Hypothesis strategies and brute-force references for the netdomain domain tests.

The references are written independently of the code under test (plain loops over addresses),
so a property comparing the two can fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

from hypothesis import strategies as st

PRIVATE_BLOCKS = (
    IPv4Network("10.0.0.0/8"),
    IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"),
    IPv4Network("100.64.0.0/10"),
)


@st.composite
def private_networks(draw: st.DrawFn, min_prefix: int = 8, max_prefix: int = 28) -> IPv4Network:
    """A network inside one private block with a prefix between ``min_prefix`` and
    ``max_prefix`` (never shorter than the block itself)."""
    block = draw(st.sampled_from(PRIVATE_BLOCKS))
    prefix = draw(st.integers(max(min_prefix, block.prefixlen), max_prefix))
    offset = draw(st.integers(0, block.num_addresses - 1))
    return IPv4Network((int(block.network_address) + offset, prefix), strict=False)


def reference_assignable(address: IPv4Address, network: IPv4Network) -> bool:
    last_byte = address.packed[-1]
    return (
        address in network
        and address != network.network_address
        and address != network.broadcast_address
        and last_byte not in (0, 255)
    )


def reference_assignable_addresses(network: IPv4Network) -> Iterator[IPv4Address]:
    """Every assignable address, by walking the whole network (use on small networks only)."""
    return (address for address in network if reference_assignable(address, network))


def reference_lowest_free(network: IPv4Network, held: set[IPv4Address]) -> IPv4Address | None:
    """Lowest assignable address not held, walking up from the network address."""
    value = int(network.network_address)
    while value <= int(network.broadcast_address):
        address = IPv4Address(value)
        if reference_assignable(address, network) and address not in held:
            return address
        value += 1
    return None
