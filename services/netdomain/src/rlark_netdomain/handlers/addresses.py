"""Event use cases of addresses: the scheduler requested a job's addresses
(``scheduler.job.addresses_requested.v1``), or asked to release them
(``scheduler.job.addresses_released.v1``).

Concurrency: both take the domain's row lock, so two requests never pick the same address and
``scan_from`` and the free list (where the search for free addresses starts) stay right; the primary
key (job, worker) and the unique (domain, address) are the last line of defence. A change in the set
of clusters hosting the domain's workers republishes its tunnel topology under the same lock
(``tunnel_topology.refresh_topology``).
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address

import structlog
from rlark_contracts.events.netdomain import (
    AddressAllocationFailed,
    AddressesAllocated,
    AddressesReleased,
    WorkerAddress,
)
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested
from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import (
    AddressPoolExhausted,
    WorkerRef,
    free_in_range,
    plan_with_free,
    workers_without_address,
)
from rlark_netdomain.handlers.publishing import EventMeta, publish
from rlark_netdomain.handlers.tunnel_topology import refresh_topology
from rlark_netdomain.repository import allocations, domains
from rlark_netdomain.repository.domains import Domain

log = structlog.get_logger(__name__)


def _page_size(count: int) -> int:
    return min(4096, max(256, count * 16))


@dataclass(frozen=True, slots=True)
class _Free:
    """Free addresses found for a request: released ones below ``scan_from`` (the free list),
    then ones found walking up from ``scan_from``; together the lowest free, ascending."""

    listed: list[IPv4Address]
    walked: list[IPv4Address]

    @property
    def all(self) -> list[IPv4Address]:
        return self.listed + self.walked


async def _lowest_free(conn: Connection, domain: Domain, count: int) -> _Free:
    """The ``count`` lowest free addresses of ``domain`` (all of them when it has fewer).

    Below ``scan_from`` every address is allocated or on the free list; above it, the allocated
    addresses are read in pages, only as far as needed to find the holes. So a request costs what
    it takes, not the size of the domain or the number of addresses in use.
    """
    if count == 0:
        return _Free([], [])
    listed = await allocations.free_list(conn, domain.name, count)
    network = domain.cidr
    last = network.broadcast_address - 1
    start = max(domain.scan_from, network.network_address + 1)
    page_size = _page_size(count)
    walked: list[IPv4Address] = []
    while len(listed) + len(walked) < count and start <= last:
        page = await allocations.used_addresses_from(conn, domain.name, start, page_size)
        # Every allocated address in [start, horizon] is in ``page``.
        horizon = page[-1] if len(page) == page_size else last
        walked += free_in_range(network, set(page), start, horizon, count - len(listed) - len(walked))
        start = horizon + 1
    return _Free(listed, walked)


async def allocate_addresses(conn: Connection, request: AddressesRequested, meta: EventMeta) -> bool:
    """One address per requested worker, stable for the job's life; True when allocated.

    Publishes ``netdomain.addresses.allocated.v1`` with every requested worker's address (kept ones
    too, so a repeated request gets the same answer and allocates nothing), or
    ``allocation_failed.v1`` with a code and a reason the scheduler shows as the job's pending
    reason: ``domain_not_found``, ``job_in_other_domain``, ``address_pool_exhausted``. All or
    nothing: a job whose workers do not all get an address gets none.
    """
    job_id = request.job_id
    domain = await domains.lock_domain(conn, request.domain)
    if domain is None:
        await _fail(
            conn,
            request,
            "domain_not_found",
            f'Network domain "{request.domain}" does not exist; an administrator must create it, '
            "or submit the job without a network domain.",
            meta,
        )
        return False
    stored = await allocations.job_allocations(conn, job_id)
    elsewhere = sorted({a.domain for a in stored if a.domain != domain.name})
    if elsewhere:
        await _fail(
            conn,
            request,
            "job_in_other_domain",
            f"Job {job_id} already holds addresses in network domain {elsewhere[0]!r}; "
            "a job's workers share one domain.",
            meta,
        )
        return False
    refs = [WorkerRef(job_id, w.worker_id) for w in request.workers]
    clusters = {w.worker_id: w.cluster for w in reversed(request.workers)}  # first mention wins
    existing = {WorkerRef(job_id, a.worker_id): a.address for a in stored}
    clusters.update({a.worker_id: a.cluster for a in stored})
    free = await _lowest_free(conn, domain, len(workers_without_address(refs, existing)))
    try:
        plan = plan_with_free(domain.cidr, refs, existing, free.all)
    except AddressPoolExhausted as exc:
        await _fail(
            conn,
            request,
            exc.code.value,
            f'Network domain "{domain.name}": {exc.message} The job waits until other jobs '
            "release addresses.",
            meta,
        )
        return False
    await allocations.insert_allocations(
        conn,
        domain.name,
        job_id,
        [(ref.worker_id, clusters[ref.worker_id], a) for ref, a in plan.new.items()],
    )
    # ``free`` held exactly the addresses needed, and all were taken.
    if free.listed:
        await allocations.remove_from_free_list(conn, domain.name, free.listed)
    if free.walked:
        # Every assignable address from scan_from up to the highest one just taken is now in use.
        await domains.set_scan_from(conn, domain.name, free.walked[-1] + 1)
    addresses = [
        WorkerAddress(worker_id=ref.worker_id, cluster=clusters[ref.worker_id], address=str(address))
        for ref, address in plan.assigned.items()
    ]
    await publish(
        conn,
        AddressesAllocated(job_id=job_id, domain=domain.name, cidr=str(domain.cidr), addresses=addresses),
        job_id,
        meta,
    )
    hosting = {clusters[ref.worker_id] for ref in plan.assigned}
    await refresh_topology(conn, domain, meta, added=hosting, released=set())
    log.info("addresses allocated", job_id=job_id, domain=domain.name, new=len(plan.new), kept=len(existing))
    return True


async def _fail(
    conn: Connection, request: AddressesRequested, code: str, reason: str, meta: EventMeta
) -> None:
    await publish(
        conn,
        AddressAllocationFailed(job_id=request.job_id, domain=request.domain, code=code, reason=reason),
        request.job_id,
        meta,
    )
    log.info("address allocation failed", job_id=request.job_id, domain=request.domain, code=code)


async def release_addresses(conn: Connection, request: AddressesReleaseRequested, meta: EventMeta) -> int:
    """Free every address of the job (``netdomain.addresses.released.v1``); returns how many.

    Idempotent: releasing a job that holds nothing frees nothing and confirms again.
    """
    stored = await allocations.job_allocations(conn, request.job_id)
    locked = await domains.lock_domains(conn, {a.domain for a in stored} | {request.domain})
    released = await allocations.delete_job_allocations(conn, request.job_id)
    for domain in locked:
        mine = [a for a in released if a.domain == domain.name]
        below = [a.address for a in mine if a.address < domain.scan_from]
        if below:
            # Above scan_from a freed address is found by the walk; below it, only on the list.
            await allocations.add_to_free_list(conn, domain.name, below)
        await refresh_topology(conn, domain, meta, added=set(), released={a.cluster for a in mine})
    await publish(conn, AddressesReleased(job_id=request.job_id, domain=request.domain), request.job_id, meta)
    log.info("addresses released", job_id=request.job_id, domain=request.domain, released=len(released))
    return len(released)
