"""Shared fixtures for the tunnel tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rlark_tunnel_agent.tunnel.probe import udp_datagram
from rlark_tunnel_agent.tunnel.routing import VNET_HDR_LEN

PacketFactory = Callable[..., bytes]


def tun_packet(src: str, dst: str, *, version: int = 4, payload: bytes = b"hi") -> bytes:
    """A UDP/IPv4 packet as a TUN device hands it out: zeroed virtio-net header first."""
    packet = bytearray(udp_datagram(src, dst, 9999, payload))
    packet[0] = version << 4 | 5
    return bytes(VNET_HDR_LEN) + bytes(packet)


@pytest.fixture
def make_packet() -> PacketFactory:
    return tun_packet
