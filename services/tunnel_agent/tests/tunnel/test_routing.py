"""Forwarding decisions: destination routing, reverse-path anti-spoofing, domain isolation."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import pytest
from rlark_tunnel_agent.tunnel.routing import Drop, LinkCounters, Router

pytestmark = pytest.mark.unit

NET = IPv4Network("10.100.0.0/16")


class Link:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


@pytest.fixture
def table() -> tuple[Router[Link], Link, Link, Link]:
    a1, a2, peer_b = Link("a1"), Link("a2"), Link("peer-b")
    router: Router[Link] = Router(NET)
    router.set_route(IPv4Address("10.100.0.2"), a1)
    router.set_route(IPv4Address("10.100.0.3"), a2)
    router.set_route(IPv4Address("10.100.1.2"), peer_b)
    router.set_route(IPv4Address("10.100.1.3"), peer_b)
    return router, a1, a2, peer_b


def test_packets_go_out_on_the_link_of_their_destination(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    router, a1, a2, peer_b = table
    assert router.decide(packet("10.100.0.2", "10.100.1.3"), a1) is peer_b
    assert router.decide(packet("10.100.0.2", "10.100.0.3"), a1) is a2
    assert router.decide(packet("10.100.1.2", "10.100.0.2"), peer_b) is a1


def test_a_worker_can_only_send_from_its_own_address(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    router, a1, _, _ = table
    assert router.decide(packet("10.100.0.3", "10.100.1.2"), a1) is Drop.SPOOFED
    assert router.decide(packet("10.100.1.2", "10.100.1.3"), a1) is Drop.SPOOFED
    assert router.decide(packet("10.100.9.9", "10.100.1.2"), a1) is Drop.SPOOFED
    assert router.decide(packet("192.168.0.1", "10.100.1.2"), a1) is Drop.SPOOFED


def test_a_peer_can_only_send_from_addresses_it_hosts(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    router, _, _, peer_b = table
    assert router.decide(packet("10.100.0.3", "10.100.0.2"), peer_b) is Drop.SPOOFED


def test_destinations_outside_the_domain_or_unknown_are_dropped(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    router, a1, _, _ = table
    assert router.decide(packet("10.100.0.2", "10.200.0.2"), a1) is Drop.OUTSIDE_DOMAIN
    assert router.decide(packet("10.100.0.2", "8.8.8.8"), a1) is Drop.OUTSIDE_DOMAIN
    assert router.decide(packet("10.100.0.2", "10.100.7.7"), a1) is Drop.NO_ROUTE
    assert router.decide(packet("10.100.0.2", "10.100.255.255"), a1) is Drop.NO_ROUTE


def test_malformed_and_non_ipv4_packets_are_dropped(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    router, a1, _, _ = table
    assert router.decide(packet("10.100.0.2", "10.100.1.2")[:25], a1) is Drop.TRUNCATED
    assert router.decide(packet("10.100.0.2", "10.100.1.2", version=6), a1) is Drop.NOT_IPV4


def test_a_packet_is_never_sent_back_where_it_came_from(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    router, _, _, peer_b = table
    assert router.decide(packet("10.100.1.2", "10.100.1.3"), peer_b) is Drop.LOOP


def test_a_relay_forwards_between_two_peers_by_destination(make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    from_a, to_c = Link("peer-a"), Link("peer-c")
    relay: Router[Link] = Router(NET)
    relay.set_route(IPv4Address("10.100.0.2"), from_a)
    relay.set_route(IPv4Address("10.100.2.2"), to_c)
    assert relay.decide(packet("10.100.0.2", "10.100.2.2"), from_a) is to_c
    assert relay.decide(packet("10.100.2.2", "10.100.0.2"), to_c) is from_a


def test_removing_a_link_removes_its_routes(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    router, a1, _, peer_b = table
    assert router.remove_link(peer_b) == [IPv4Address("10.100.1.2"), IPv4Address("10.100.1.3")]
    assert router.decide(packet("10.100.0.2", "10.100.1.2"), a1) is Drop.NO_ROUTE


def test_routes_outside_the_domain_network_are_refused() -> None:
    router: Router[Link] = Router(NET)
    with pytest.raises(ValueError, match="outside"):
        router.set_route(IPv4Address("10.200.0.2"), Link("x"))


def test_domains_are_isolated_by_their_own_tables(make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    shared_address = IPv4Address("10.100.0.2")
    worker_d1, peer_d2 = Link("w-d1"), Link("peer-d2")
    d1: Router[Link] = Router(NET)
    d2: Router[Link] = Router(NET)
    d1.set_route(shared_address, worker_d1)
    d2.set_route(IPv4Address("10.100.1.2"), peer_d2)
    # d1 knows nothing of d2's addresses: its worker cannot reach them
    assert d1.decide(packet("10.100.0.2", "10.100.1.2"), worker_d1) is Drop.NO_ROUTE


def test_counters_record_drops_by_reason() -> None:
    counters = LinkCounters()
    counters.drop(Drop.SPOOFED)
    counters.drop(Drop.SPOOFED, 2)
    assert counters.as_dict()["drops"] == {"spoofed": 3}


def test_batch_routing_agrees_with_single_decisions(table, make_packet) -> None:  # type: ignore[no-untyped-def]
    packet = make_packet
    from collections import Counter

    router, a1, a2, peer_b = table
    addresses = ["10.100.0.2", "10.100.0.3", "10.100.1.2", "10.100.9.9", "10.200.0.1"]
    batch = [packet(s, d) for s in addresses for d in addresses]
    batch += [packet("10.100.0.2", "10.100.1.2")[:21], packet("10.100.0.2", "10.100.1.2", version=6)]
    for source in (a1, a2, peer_b):
        drops: Counter[str] = Counter()
        groups = router.route_batch(batch, source, drops)
        expected: dict[object, list[bytes]] = {}
        expected_drops: Counter[str] = Counter()
        for p in batch:
            verdict = router.decide(p, source)
            if isinstance(verdict, Drop):
                expected_drops[verdict.value] += 1
            else:
                expected.setdefault(verdict, []).append(p)
        assert groups == expected
        assert drops == expected_drops
