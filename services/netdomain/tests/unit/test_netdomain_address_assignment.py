"""Behaviour of virtual IP assignment: reserved addresses, lowest-free allocation, reuse,
capacity, exhaustion and idempotent planning per (job_id, worker_id)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netdomain_strategies import (
    private_networks,
    reference_assignable,
    reference_assignable_addresses,
    reference_lowest_free,
)
from rlark_devinfra.benches.netdomain_pool import bench_allocations
from rlark_netdomain.domain import (
    AddressPool,
    AddressPoolExhausted,
    NetDomainErrorCode,
    WorkerRef,
    count_assignable,
    is_assignable,
    next_free,
    nth_assignable,
    plan_allocations,
)

pytestmark = pytest.mark.unit


def net(text: str) -> IPv4Network:
    return IPv4Network(text)


def ip(text: str) -> IPv4Address:
    return IPv4Address(text)


# --- reserved addresses and capacity -----------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "network", "expected"),
    [
        ("10.100.0.1", "10.100.0.0/16", True),
        ("10.100.0.0", "10.100.0.0/16", False),
        ("10.100.255.255", "10.100.0.0/16", False),
        ("10.100.1.0", "10.100.0.0/16", False),
        ("10.100.0.255", "10.100.0.0/16", False),
        ("10.100.1.254", "10.100.0.0/16", True),
        ("10.100.0.16", "10.100.0.16/28", False),
        ("10.100.0.31", "10.100.0.16/28", False),
        ("10.100.0.17", "10.100.0.16/28", True),
        ("10.100.0.30", "10.100.0.16/28", True),
        ("10.100.0.240", "10.100.0.240/28", False),
        ("10.100.0.255", "10.100.0.240/28", False),
        ("10.100.0.254", "10.100.0.240/28", True),
        ("10.101.0.1", "10.100.0.0/16", False),
        ("10.0.0.1", "10.0.0.0/31", False),
    ],
)
def test_is_assignable_excludes_network_broadcast_and_dot_0_and_dot_255(
    address: str, network: str, expected: bool
) -> None:
    assert is_assignable(ip(address), net(network)) is expected


@pytest.mark.parametrize(
    ("network", "capacity"),
    [
        ("10.0.0.0/8", 65536 * 254),
        ("10.100.0.0/16", 256 * 254),
        ("192.168.1.0/24", 254),
        ("192.168.1.0/25", 126),
        ("192.168.1.128/25", 126),
        ("10.0.0.0/28", 14),
        ("10.0.0.0/30", 2),
        ("10.0.0.0/31", 0),
        ("10.0.0.7/32", 0),
    ],
)
def test_capacity_is_computed_arithmetically(network: str, capacity: int) -> None:
    assert count_assignable(net(network)) == capacity
    assert AddressPool(net(network)).capacity == capacity


@settings(max_examples=40, deadline=None)
@given(private_networks(min_prefix=20, max_prefix=28))
def test_capacity_equals_a_brute_force_count(network: IPv4Network) -> None:
    assert count_assignable(network) == sum(1 for _ in reference_assignable_addresses(network))


@settings(max_examples=40, deadline=None)
@given(private_networks(min_prefix=20, max_prefix=28))
def test_nth_assignable_enumerates_assignable_addresses_in_order(network: IPv4Network) -> None:
    expected = list(reference_assignable_addresses(network))

    assert [nth_assignable(network, i) for i in range(len(expected))] == expected
    with pytest.raises(IndexError):
        nth_assignable(network, len(expected))


@settings(max_examples=200, deadline=None)
@given(private_networks(), st.data())
def test_is_assignable_agrees_with_the_rule_for_any_address(
    network: IPv4Network, data: st.DataObject
) -> None:
    lo = max(0, int(network.network_address) - 300)
    hi = min(2**32 - 1, int(network.broadcast_address) + 300)
    address = IPv4Address(data.draw(st.integers(lo, hi)))

    assert is_assignable(address, network) == reference_assignable(address, network)


# --- the pool ----------------------------------------------------------------------------------


def test_allocation_starts_at_dot_1_and_skips_dot_255_and_dot_0() -> None:
    pool = AddressPool(
        net("10.100.0.0/16"), used=[nth_assignable(net("10.100.0.0/16"), i) for i in range(253)]
    )

    assert pool.allocate() == ip("10.100.0.254")
    assert pool.allocate() == ip("10.100.1.1")
    assert AddressPool(net("10.100.0.0/16")).allocate() == ip("10.100.0.1")


def test_allocation_fills_holes_left_in_the_used_set_lowest_first() -> None:
    pool = AddressPool(net("10.1.0.0/24"), used=[ip("10.1.0.1"), ip("10.1.0.3"), ip("10.1.0.4")])

    assert [pool.allocate() for _ in range(3)] == [ip("10.1.0.2"), ip("10.1.0.5"), ip("10.1.0.6")]
    assert pool.in_use == 6
    assert pool.free == 254 - 6


def test_released_address_is_reused_before_higher_ones() -> None:
    pool = AddressPool(net("10.1.0.0/24"))
    first, second, third = (pool.allocate() for _ in range(3))

    assert pool.release(second) is True
    assert pool.release(first) is True
    assert pool.allocate() == first
    assert pool.allocate() == second
    assert pool.allocate() == ip("10.1.0.4")
    assert third == ip("10.1.0.3")


def test_release_is_idempotent_and_refuses_foreign_addresses() -> None:
    pool = AddressPool(net("10.1.0.0/24"))
    address = pool.allocate()

    assert pool.release(address) is True
    assert pool.release(address) is False
    assert pool.in_use == 0
    with pytest.raises(ValueError, match=r"not in 10\.1\.0\.0/24"):
        pool.release(ip("10.2.0.1"))


def test_reserve_takes_a_specific_address_even_one_that_was_released() -> None:
    pool = AddressPool(net("10.1.0.0/24"))
    first = pool.allocate()
    pool.allocate()
    pool.release(first)

    assert pool.reserve(first) is True
    assert pool.reserve(first) is False
    assert pool.allocate() == ip("10.1.0.3")
    with pytest.raises(ValueError, match="not an assignable"):
        pool.reserve(ip("10.1.0.255"))


def test_pool_refuses_a_used_set_with_addresses_it_could_never_assign() -> None:
    with pytest.raises(ValueError, match="not an assignable"):
        AddressPool(net("10.1.0.0/16"), used=[ip("10.1.2.0")])
    with pytest.raises(ValueError, match="not an assignable"):
        AddressPool(net("10.1.0.0/16"), used=[ip("10.2.0.1")])


def test_exhausted_pool_says_the_cidr_and_how_many_usable_addresses_it_has() -> None:
    pool = AddressPool(net("10.9.0.0/28"))
    taken = [pool.allocate() for _ in range(14)]

    with pytest.raises(AddressPoolExhausted) as info:
        pool.allocate()

    assert len(set(taken)) == 14
    error = info.value
    assert error.code is NetDomainErrorCode.ADDRESS_POOL_EXHAUSTED
    assert "10.9.0.0/28" in error.message
    assert "14 usable addresses" in error.message
    assert (error.capacity, error.free) == (14, 0)


def test_allocate_many_is_all_or_nothing() -> None:
    pool = AddressPool(net("10.9.0.0/28"))
    pool.allocate_many(10)

    with pytest.raises(AddressPoolExhausted) as info:
        pool.allocate_many(5)

    assert "only 4 of its 14" in info.value.message
    assert pool.in_use == 10
    assert len(pool.allocate_many(4)) == 4


Operation = tuple[str, int]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.just(0)),
        st.tuples(st.just("release"), st.integers(0, 10_000)),
    ),
    max_size=80,
)


@settings(max_examples=120, deadline=None)
@given(private_networks(), st.data(), operations)
def test_random_allocate_release_sequences_keep_the_pool_correct(
    network: IPv4Network, data: st.DataObject, ops: list[Operation]
) -> None:
    capacity = count_assignable(network)
    start_indexes = data.draw(st.sets(st.integers(0, capacity - 1), max_size=min(40, capacity - 1)))
    held = {nth_assignable(network, i) for i in start_indexes}
    pool = AddressPool(network, held)

    for kind, pick in ops:
        if kind == "release":
            if not held:
                continue
            victim = sorted(held)[pick % len(held)]
            assert pool.release(victim)
            held.remove(victim)
        else:
            expected = reference_lowest_free(network, held)
            if expected is None:
                with pytest.raises(AddressPoolExhausted):
                    pool.allocate()
                continue
            address = pool.allocate()
            assert reference_assignable(address, network)
            assert address not in held
            assert address == expected  # lowest free, so released addresses come back first
            held.add(address)
        assert pool.in_use == len(held)
        assert pool.free == capacity - len(held)


@settings(max_examples=60, deadline=None)
@given(private_networks(min_prefix=24, max_prefix=28), st.data())
def test_small_network_gives_every_assignable_address_exactly_once(
    network: IPv4Network, data: st.DataObject
) -> None:
    pool = AddressPool(network)
    taken = [pool.allocate() for _ in range(pool.capacity)]
    to_release = data.draw(st.sets(st.sampled_from(taken), max_size=5))
    for address in to_release:
        pool.release(address)

    again = {pool.allocate() for _ in to_release}

    assert sorted(taken) == list(reference_assignable_addresses(network))
    assert again == to_release
    with pytest.raises(AddressPoolExhausted):
        pool.allocate()


def test_next_free_walks_from_start_over_used_and_reserved_addresses() -> None:
    network = net("10.5.0.0/16")
    used = {ip("10.5.0.253"), ip("10.5.0.254"), ip("10.5.1.1")}

    assert next_free(network, used) == ip("10.5.0.1")
    assert next_free(network, used, start=ip("10.5.0.253")) == ip("10.5.1.2")
    assert next_free(network, used, start=ip("10.4.0.0")) == ip("10.5.0.1")
    assert next_free(net("10.5.0.0/30"), {ip("10.5.0.1"), ip("10.5.0.2")}) is None


def test_pool_with_60000_addresses_in_use_in_a_slash_16_fills_the_rest_in_one_walk() -> None:
    network = net("10.50.0.0/16")
    used = [nth_assignable(network, i) for i in range(0, 65024) if i % 13 != 5][:60000]

    pool = AddressPool(network, used)
    rest = [pool.allocate() for _ in range(pool.free)]

    assert len(rest) == 65024 - 60000
    assert not set(rest) & set(used)
    assert rest == sorted(rest)  # lowest free first
    with pytest.raises(AddressPoolExhausted):
        pool.allocate()
    # One forward walk over the network for all 5,024 allocations; a scan from the start per
    # allocation would examine ~160 million candidates.
    assert pool.examined <= network.num_addresses


def test_pool_on_a_slash_8_allocates_without_walking_the_network() -> None:
    network = net("10.0.0.0/8")
    used = [nth_assignable(network, i * 271) for i in range(60000)]

    pool = AddressPool(network, used)
    fresh = pool.allocate_many(10_000)

    assert pool.capacity == 16_646_144
    expected_indexes = [i for i in range(11_000) if i % 271 != 0][:10_000]
    assert fresh == [nth_assignable(network, i) for i in expected_indexes]
    assert not set(fresh) & set(used)
    # The walk stopped at the last address it gave, about 10,100 addresses into a network of 16.7
    # million: the cost follows the addresses handed out, not the size of the network.
    assert pool.examined <= int(fresh[-1]) - int(network.network_address)


def test_examined_counts_released_addresses_reused_without_moving_the_cursor() -> None:
    pool = AddressPool(net("10.1.0.0/24"))
    taken = pool.allocate_many(10)
    walked = pool.examined
    pool.release(taken[3])

    assert pool.allocate() == taken[3]
    assert pool.examined == walked + 1
    assert walked == 10


# --- planning per worker -----------------------------------------------------------------------


def workers(job: str, count: int) -> list[WorkerRef]:
    return [WorkerRef(job, f"w{i}") for i in range(count)]


def test_plan_gives_new_workers_the_lowest_free_addresses_in_request_order() -> None:
    plan = plan_allocations(net("10.7.0.0/24"), {ip("10.7.0.1")}, workers("j1", 3), {})

    assert list(plan.assigned.values()) == [ip("10.7.0.2"), ip("10.7.0.3"), ip("10.7.0.4")]
    assert plan.new == plan.assigned


def test_plan_keeps_existing_addresses_and_only_allocates_for_the_rest() -> None:
    refs = workers("j1", 3)
    existing = {refs[1]: ip("10.7.0.9")}

    plan = plan_allocations(net("10.7.0.0/24"), {ip("10.7.0.9")}, refs, existing)

    assert plan.assigned == {refs[0]: ip("10.7.0.1"), refs[1]: ip("10.7.0.9"), refs[2]: ip("10.7.0.2")}
    assert plan.new == {refs[0]: ip("10.7.0.1"), refs[2]: ip("10.7.0.2")}


def test_plan_that_does_not_fit_allocates_nothing() -> None:
    with pytest.raises(AddressPoolExhausted) as info:
        plan_allocations(net("10.7.0.0/28"), set(), workers("big", 15), {})

    assert info.value.requested == 15
    assert info.value.free == 14


@settings(max_examples=80, deadline=None)
@given(
    private_networks(min_prefix=16, max_prefix=28),
    st.data(),
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 9)), max_size=12),
)
def test_replanning_with_the_stored_result_is_idempotent(
    network: IPv4Network, data: st.DataObject, raw_refs: list[tuple[str, int]]
) -> None:
    requests = [WorkerRef(job, f"w{worker}") for job, worker in raw_refs]
    capacity = count_assignable(network)
    used = {
        nth_assignable(network, i)
        for i in data.draw(st.sets(st.integers(0, capacity - 1), max_size=capacity // 2))
    }
    try:
        first = plan_allocations(network, used, requests, {})
    except AddressPoolExhausted:
        assert capacity - len(used) < len(set(requests))
        return

    stored_used = used | set(first.new.values())
    again = plan_allocations(network, stored_used, requests, first.assigned)

    assert again.assigned == first.assigned
    assert again.new == {}
    assert len(set(first.assigned.values())) == len(set(requests))
    assert not set(first.new.values()) & used
    assert all(reference_assignable(address, network) for address in first.new.values())


# --- benchmark ---------------------------------------------------------------------------------


def test_bench_reports_throughput_and_latency_for_a_busy_domain() -> None:
    result = bench_allocations(n_in_use=5_000, network="10.100.0.0/19", operations=200)

    assert result["n_in_use"] == 5_000
    assert result["allocations"] == 200 + min(200, count_assignable(net("10.100.0.0/19")) - 5000)
    assert float(result["allocations_per_s"]) > 0
    assert float(result["p50_us"]) <= float(result["p99_us"]) <= float(result["max_us"])
