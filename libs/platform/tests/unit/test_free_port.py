"""Test servers' ports: never one an outgoing connection could take first, never the same twice."""

from __future__ import annotations

import socket

from rlark_devinfra.testing import _ephemeral_low, free_port


def test_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port < min(_ephemeral_low(), 20000) for port in ports)  # not the workers' port blocks
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # really free
