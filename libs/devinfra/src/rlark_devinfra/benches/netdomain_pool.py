"""Micro benchmark of ``AddressPool``; ``make bench`` calls ``bench_allocations``.

It measures what a netdomain call pays: building a pool from the addresses a busy domain already
uses (random, so the free ones are scattered holes), then allocating. Two phases are timed per
operation: ``fill`` allocates fresh addresses (the cursor walks past used ones), ``churn``
releases a random held address and allocates again (the released-address heap is hit). Pure
computation with a seeded random generator; it prints nothing unless run as a script.
"""

from __future__ import annotations

import json
import random
import time
from ipaddress import IPv4Address, IPv4Network

from rlark_netdomain.domain.addresses import AddressPool, count_assignable, nth_assignable


def _percentile(sorted_values: list[int], fraction: float) -> int:
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index]


def bench_allocations(
    n_in_use: int = 60_000,
    network: str = "10.100.0.0/16",
    operations: int = 4_000,
    seed: int = 20240601,
) -> dict[str, float | int | str]:
    """Time pool construction and ``operations`` allocations in each phase.

    Returns ``allocations_per_s`` and ``p50_us``/``p99_us``/``max_us`` over every timed allocation
    of both phases, plus ``build_ms`` and the sizes used. Fill allocations stop early if the
    network runs out of free addresses.
    """
    net = IPv4Network(network)
    capacity = count_assignable(net)
    if n_in_use > capacity:
        raise ValueError(f"{net} has only {capacity} assignable addresses")
    rng = random.Random(seed)
    used = [nth_assignable(net, i) for i in rng.sample(range(capacity), n_in_use)]

    started = time.perf_counter_ns()
    pool = AddressPool(net, used)
    build_ns = time.perf_counter_ns() - started

    held: list[IPv4Address] = list(used)
    timings: list[int] = []
    fill = min(operations, pool.free)
    for _ in range(fill):
        started = time.perf_counter_ns()
        address = pool.allocate()
        timings.append(time.perf_counter_ns() - started)
        held.append(address)
    for _ in range(operations):
        victim = rng.randrange(len(held))
        held[victim], held[-1] = held[-1], held[victim]
        pool.release(held.pop())
        started = time.perf_counter_ns()
        held.append(pool.allocate())
        timings.append(time.perf_counter_ns() - started)

    total_ns = sum(timings)
    timings.sort()
    return {
        "network": str(net),
        "capacity": capacity,
        "n_in_use": n_in_use,
        "allocations": len(timings),
        "build_ms": round(build_ns / 1e6, 2),
        "allocations_per_s": round(len(timings) / (total_ns / 1e9)),
        "p50_us": round(_percentile(timings, 0.50) / 1e3, 2),
        "p99_us": round(_percentile(timings, 0.99) / 1e3, 2),
        "max_us": round(timings[-1] / 1e3, 2),
    }


if __name__ == "__main__":
    for cidr in ("10.100.0.0/16", "10.0.0.0/8"):
        print(json.dumps(bench_allocations(network=cidr)))
