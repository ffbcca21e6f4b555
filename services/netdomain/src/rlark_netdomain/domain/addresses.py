"""Virtual IP assignment inside a network domain.

Role: decide which addresses of a domain's CIDR a worker may get, and hand out the lowest free one.

Rules (user guide, step 3): the network and broadcast addresses are never assigned, and neither is
any address whose last byte is ``.0`` or ``.255``, whatever the prefix length (so in 10.100.0.0/16
neither 10.100.1.0 nor 10.100.0.255 is ever given).

Design. The repository keeps allocations in Postgres; a service call loads the addresses in use for
one domain, builds an ``AddressPool`` (or calls ``plan_allocations``) and writes back what it got,
under a lock or a unique constraint on (domain, address). Everything here is pure and
deterministic: the same inputs always give the same addresses, which makes retries idempotent.

Addresses are handled as integers. ``AddressPool`` keeps:
- ``_used``: a set of the addresses in use, for O(1) membership;
- ``_cursor``: every assignable address below it is either in use or in ``_released``;
- ``_released``: a min-heap of addresses freed below the cursor.
``allocate`` pops the heap first (those addresses are all below the cursor, so lower than anything
the cursor can find), otherwise walks the cursor forward over used addresses, jumping over each
``.255``/``.0`` pair. The cursor never moves back, so filling a network costs O(addresses passed)
in total, and a release or a reuse costs O(log released). Neither depends on the network's size:
a /8 with 60,000 addresses in use is as fast as a /16. A sorted container would do the same work
with a third-party dependency; a bitmap of the whole network would cost 2 MiB per /8 pool.
Capacity is computed arithmetically, never by enumerating the network.
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import Final

from rlark_contracts.messages import text

from rlark_netdomain.domain.errors import NetDomainError, NetDomainErrorCode

_USABLE_PER_24: Final = 254


class AddressPoolExhausted(NetDomainError):
    """The domain has fewer free assignable addresses than were asked for."""

    def __init__(self, network: IPv4Network, capacity: int, free: int, requested: int) -> None:
        if free == 0:
            message = text("address_pool_exhausted", network=str(network), capacity=capacity)
        else:
            message = text(
                "address_pool_exhausted.short",
                network=str(network),
                requested=requested,
                free=free,
                capacity=capacity,
            )
        super().__init__(NetDomainErrorCode.ADDRESS_POOL_EXHAUSTED, message)
        self.network = network
        self.capacity = capacity
        self.free = free
        self.requested = requested


def _assignable_int(value: int, first: int, last: int) -> bool:
    """``first``/``last`` bound the candidates: network + 1 and broadcast - 1."""
    return first <= value <= last and (value & 0xFF) not in (0, 0xFF)


def _bounds(network: IPv4Network) -> tuple[int, int]:
    return int(network.network_address) + 1, int(network.broadcast_address) - 1


def is_assignable(address: IPv4Address, network: IPv4Network) -> bool:
    """May ``address`` be given to a worker of the domain ``network``?"""
    return _assignable_int(int(address), *_bounds(network))


def _count_below(value: int) -> int:
    """How many integers in [0, value) do not end in byte 0x00 or 0xFF."""
    blocks, rest = divmod(value, 256)
    return blocks * _USABLE_PER_24 + max(0, min(rest, 255) - 1)


def count_assignable(network: IPv4Network) -> int:
    """Number of assignable addresses of ``network``, in O(1) (a /8 has 16,646,144)."""
    first, last = _bounds(network)
    if last < first:
        return 0
    return _count_below(last + 1) - _count_below(first)


def nth_assignable(network: IPv4Network, index: int) -> IPv4Address:
    """The ``index``-th (from 0) assignable address of ``network``, in O(1).

    Raises ``IndexError`` outside ``0 <= index < count_assignable(network)``.
    """
    if not 0 <= index < count_assignable(network):
        raise IndexError(f"{network} has no assignable address number {index}")
    base = int(network.network_address)
    if network.prefixlen <= 24:
        # Whole /24 blocks, each contributing .1 to .254.
        block, within = divmod(index, _USABLE_PER_24)
        return IPv4Address(base + block * 256 + within + 1)
    # Inside one /24: .0 and .255 can only be the network or broadcast address, already excluded.
    return IPv4Address(base + 1 + index)


def next_free(
    network: IPv4Network, used: Container[IPv4Address], start: IPv4Address | None = None
) -> IPv4Address | None:
    """Lowest assignable address of ``network``, at or above ``start``, not in ``used``.

    For one-off lookups against a set loaded from the database; it walks from ``start``, so it
    costs O(addresses in use above ``start``). Returns None when there is none.
    """
    first, last = _bounds(network)
    value = max(first, int(start)) if start is not None else first
    while value <= last:
        low = value & 0xFF
        if low == 0xFF:
            value += 1
            continue
        if low != 0 and IPv4Address(value) not in used:
            return IPv4Address(value)
        value += 1
    return None


class AddressPool:
    """The assignable addresses of one domain, with the ones in use; see the module docstring.

    Not thread-safe: build one per unit of work from the addresses the repository loaded.
    """

    def __init__(self, network: IPv4Network, used: Iterable[IPv4Address] = ()) -> None:
        """Raise ``ValueError`` if ``used`` holds an address the pool could never have assigned."""
        self._network = network
        self._first, self._last = _bounds(network)
        self._capacity = count_assignable(network)
        self._used: set[int] = set()
        for address in used:
            value = int(address)
            if not _assignable_int(value, self._first, self._last):
                raise ValueError(f"{address} is not an assignable address of {network}")
            self._used.add(value)
        self._cursor = self._first
        self._released: list[int] = []
        self._examined = 0

    @property
    def network(self) -> IPv4Network:
        return self._network

    @property
    def capacity(self) -> int:
        """Number of assignable addresses (used or not)."""
        return self._capacity

    @property
    def in_use(self) -> int:
        return len(self._used)

    @property
    def free(self) -> int:
        return self._capacity - len(self._used)

    @property
    def examined(self) -> int:
        """Candidate addresses ``allocate`` has looked at so far: released addresses popped plus
        addresses the cursor passed. The cursor never moves back, so filling the whole network
        examines at most its size, never a scan per allocation."""
        return self._examined

    def is_used(self, address: IPv4Address) -> bool:
        return int(address) in self._used

    def allocate(self) -> IPv4Address:
        """Take the lowest free assignable address, or raise ``AddressPoolExhausted``."""
        if len(self._used) >= self._capacity:
            raise AddressPoolExhausted(self._network, self._capacity, 0, 1)
        while self._released:
            value = heapq.heappop(self._released)
            self._examined += 1
            if value not in self._used:  # entries taken by reserve() are skipped lazily
                self._used.add(value)
                return IPv4Address(value)
        value = self._cursor
        used = self._used
        while value <= self._last:
            low = value & 0xFF
            if low == 0xFF:
                value += 2  # skip x.y.z.255 and the x.y.(z+1).0 after it
            elif low == 0 or value in used:
                value += 1
            else:
                used.add(value)
                self._examined += value + 1 - self._cursor
                self._cursor = value + 1
                return IPv4Address(value)
        # Unreachable while the free count is right; kept so a broken invariant cannot loop.
        self._examined += value - self._cursor
        self._cursor = value
        raise AddressPoolExhausted(self._network, self._capacity, 0, 1)

    def allocate_many(self, count: int) -> list[IPv4Address]:
        """Take ``count`` addresses, lowest first, or none at all if fewer are free."""
        if count > self.free:
            raise AddressPoolExhausted(self._network, self._capacity, self.free, count)
        return [self.allocate() for _ in range(count)]

    def reserve(self, address: IPv4Address) -> bool:
        """Mark a given address as in use; False if it already was.

        Raises ``ValueError`` for an address the pool could never assign.
        """
        value = int(address)
        if not _assignable_int(value, self._first, self._last):
            raise ValueError(f"{address} is not an assignable address of {self._network}")
        if value in self._used:
            return False
        self._used.add(value)
        return True

    def release(self, address: IPv4Address) -> bool:
        """Give an address back; False (and nothing changes) if it was not in use.

        Idempotent, so a redelivered "worker stopped" event is harmless. Raises ``ValueError`` for
        an address outside the network.
        """
        value = int(address)
        if address not in self._network:
            raise ValueError(f"{address} is not in {self._network}")
        if value not in self._used:
            return False
        self._used.remove(value)
        if value < self._cursor:
            heapq.heappush(self._released, value)
        return True


@dataclass(frozen=True, slots=True, order=True)
class WorkerRef:
    """The identity an address is allocated to: one worker of one job."""

    job_id: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    """Result of ``plan_allocations``.

    ``assigned`` maps every requested worker to its address (kept or new), in request order;
    ``new`` holds only the ones the caller must now store.
    """

    assigned: dict[WorkerRef, IPv4Address] = field(default_factory=dict)
    new: dict[WorkerRef, IPv4Address] = field(default_factory=dict)


def plan_allocations(
    network: IPv4Network,
    used: Iterable[IPv4Address],
    requests: Sequence[WorkerRef],
    existing: Mapping[WorkerRef, IPv4Address],
) -> AllocationPlan:
    """Addresses for ``requests``: a worker that already has one keeps it, the others get the
    lowest free ones, in request order.

    ``used`` is every address in use in the domain (it may include ``existing``'s). Calling it
    again with the stored result as ``existing`` gives the same assignment and nothing new, so a
    redelivered placement event is idempotent per (job_id, worker_id). All or nothing: if the
    domain cannot give every new worker an address, ``AddressPoolExhausted`` is raised and no
    address is planned (a gang-scheduled job starts whole or not at all).
    """
    pool = AddressPool(network, set(used) | set(existing.values()))
    assigned: dict[WorkerRef, IPv4Address] = {}
    pending: list[WorkerRef] = []
    for ref in dict.fromkeys(requests):
        if ref in existing:
            assigned[ref] = existing[ref]
        else:
            pending.append(ref)
    fresh = pool.allocate_many(len(pending))
    new = dict(zip(pending, fresh, strict=True))
    assigned.update(new)
    ordered = {ref: assigned[ref] for ref in dict.fromkeys(requests)}
    return AllocationPlan(assigned=ordered, new=new)


# --- planning against addresses paged out of a database -----------------------------------------
#
# ``plan_allocations`` needs every address in use, which costs O(addresses in use) per request: in a
# busy /16 that is 60,000 rows loaded and hashed to hand out one address. The functions below let a
# caller page the addresses in use in ascending order from a point below which it knows everything is
# taken, and stop as soon as it has found enough holes, so a request costs O(addresses walked).


def free_in_range(
    network: IPv4Network,
    used: Container[IPv4Address],
    start: IPv4Address,
    end: IPv4Address,
    limit: int,
) -> list[IPv4Address]:
    """Up to ``limit`` assignable addresses of ``network`` in ``[start, end]`` not in ``used``,
    lowest first.

    ``used`` only needs the addresses in use inside ``[start, end]``: the caller pages them out of
    its store and calls again from ``end + 1`` with the next page.
    """
    found: list[IPv4Address] = []
    while len(found) < limit:
        candidate = next_free(network, used, start)
        if candidate is None or candidate > end:
            break
        found.append(candidate)
        start = candidate + 1
    return found


def workers_without_address(
    requests: Sequence[WorkerRef], existing: Mapping[WorkerRef, IPv4Address]
) -> list[WorkerRef]:
    """The distinct requested workers that hold no address yet, in request order."""
    return [ref for ref in dict.fromkeys(requests) if ref not in existing]


def plan_with_free(
    network: IPv4Network,
    requests: Sequence[WorkerRef],
    existing: Mapping[WorkerRef, IPv4Address],
    free: Sequence[IPv4Address],
) -> AllocationPlan:
    """``plan_allocations`` for a caller that found the lowest free addresses itself.

    ``free`` holds free assignable addresses, lowest first, at least one per worker of
    ``workers_without_address`` — or, when the domain has fewer, every free address it has, and
    then ``AddressPoolExhausted`` is raised with that count and nothing is planned. Workers that
    already hold an address keep it, so replanning with the stored result allocates nothing.
    """
    pending = workers_without_address(requests, existing)
    if len(free) < len(pending):
        raise AddressPoolExhausted(network, count_assignable(network), len(free), len(pending))
    for address in free[: len(pending)]:
        if not is_assignable(address, network):
            raise ValueError(f"{address} is not an assignable address of {network}")
    new = dict(zip(pending, free[: len(pending)], strict=True))
    assigned = {ref: existing[ref] if ref in existing else new[ref] for ref in dict.fromkeys(requests)}
    return AllocationPlan(assigned=assigned, new=new)
