"""Behaviour of planning against addresses paged out of a store: ``free_in_range`` finds the same
holes as a brute-force walk, page by page, and ``plan_with_free`` keeps ``plan_allocations``'
contract (existing addresses kept, lowest free for the rest, all or nothing)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netdomain_strategies import private_networks, reference_assignable_addresses
from rlark_netdomain.domain import (
    AddressPoolExhausted,
    WorkerRef,
    count_assignable,
    free_in_range,
    nth_assignable,
    plan_allocations,
    plan_with_free,
    workers_without_address,
)

pytestmark = pytest.mark.unit


def ip(text: str) -> IPv4Address:
    return IPv4Address(text)


def test_free_in_range_skips_used_and_reserved_addresses_and_stops_at_the_end() -> None:
    network = IPv4Network("10.5.0.0/16")
    used = {ip("10.5.0.253"), ip("10.5.1.1")}

    found = free_in_range(network, used, ip("10.5.0.252"), ip("10.5.1.3"), limit=10)

    assert found == [ip("10.5.0.252"), ip("10.5.0.254"), ip("10.5.1.2"), ip("10.5.1.3")]
    assert free_in_range(network, used, ip("10.5.0.252"), ip("10.5.1.3"), limit=2) == found[:2]
    assert free_in_range(network, set(), ip("10.5.255.254"), ip("10.5.255.255"), limit=5) == [
        ip("10.5.255.254")
    ]


@settings(max_examples=60, deadline=None)
@given(private_networks(min_prefix=22, max_prefix=28), st.data())
def test_paging_through_used_addresses_finds_the_lowest_free_ones(
    network: IPv4Network, data: st.DataObject
) -> None:
    capacity = count_assignable(network)
    used = sorted(nth_assignable(network, i) for i in data.draw(st.sets(st.integers(0, capacity - 1))))
    wanted = data.draw(st.integers(1, capacity))
    page_size = data.draw(st.integers(1, 8))
    expected = [a for a in reference_assignable_addresses(network) if a not in set(used)][:wanted]

    # What a repository does: read used addresses in pages from ``start`` and look for holes only
    # where it knows every used address.
    found: list[IPv4Address] = []
    start = network.network_address + 1
    last = network.broadcast_address - 1
    while len(found) < wanted and start <= last:
        page = [a for a in used if a >= start][:page_size]
        horizon = page[-1] if len(page) == page_size else last
        found += free_in_range(network, set(page), start, horizon, wanted - len(found))
        start = horizon + 1

    assert found == expected


def test_plan_with_free_keeps_existing_addresses_and_gives_the_rest_in_request_order() -> None:
    network = IPv4Network("10.7.0.0/24")
    refs = [WorkerRef("j1", f"w{i}") for i in range(3)]
    existing = {refs[1]: ip("10.7.0.9")}

    plan = plan_with_free(network, [*refs, refs[0]], existing, [ip("10.7.0.1"), ip("10.7.0.2")])

    assert plan.assigned == {refs[0]: ip("10.7.0.1"), refs[1]: ip("10.7.0.9"), refs[2]: ip("10.7.0.2")}
    assert plan.new == {refs[0]: ip("10.7.0.1"), refs[2]: ip("10.7.0.2")}
    assert workers_without_address(refs, plan.assigned) == []


def test_plan_with_free_agrees_with_plan_allocations() -> None:
    network = IPv4Network("10.7.0.0/24")
    used = {ip("10.7.0.1"), ip("10.7.0.3")}
    refs = [WorkerRef("j1", f"w{i}") for i in range(4)]
    free = free_in_range(network, used, ip("10.7.0.1"), ip("10.7.0.254"), limit=4)

    assert plan_with_free(network, refs, {}, free) == plan_allocations(network, used, refs, {})


def test_plan_with_too_few_free_addresses_is_refused_with_the_counts() -> None:
    network = IPv4Network("10.7.0.0/28")
    refs = [WorkerRef("big", f"w{i}") for i in range(3)]

    with pytest.raises(AddressPoolExhausted) as info:
        plan_with_free(network, refs, {}, [ip("10.7.0.14"), ip("10.7.0.13")])

    assert (info.value.capacity, info.value.free, info.value.requested) == (14, 2, 3)
    assert "only 2 of its 14" in info.value.message


def test_plan_with_free_refuses_an_address_the_domain_could_never_assign() -> None:
    with pytest.raises(ValueError, match="not an assignable"):
        plan_with_free(IPv4Network("10.7.0.0/16"), [WorkerRef("j", "w")], {}, [ip("10.7.1.0")])
