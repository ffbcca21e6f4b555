"""Use cases of the netdomain service.

HTTP use cases (create, list, show, delete, check) and event use cases (a cluster's CIDRs changed,
its agent observed its networks, addresses requested, addresses released, an agent's tunnel link state or endpoint reported) and
the periodic relay check. Each loads, decides with the pure domain and writes state plus outbox
events in one transaction; none does network I/O inside it.

Concurrency: allocation and release in a domain take the domain's row lock, so two requests never
pick the same address and ``scan_from`` and the free list (where the search for free addresses
starts) stay right;
the primary key (job, worker) and the unique (domain, address) are the last line of defence.
Domain creation and cluster updates (declared or observed CIDRs) take one advisory lock, so a domain
created while a cluster changes its CIDRs is checked against the new CIDRs by one of the two. The lock
comes before the cluster's row is written, in every path, so the two never wait on each other crosswise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv4Network, IPv6Network, ip_network

import asyncpg
import structlog
from pydantic import BaseModel
from rlark_contracts import new_envelope
from rlark_contracts.events.agent import (
    LINK_CLOSED,
    NodesObserved,
    TunnelEndpointAnnounced,
    TunnelStateChanged,
)
from rlark_contracts.events.inventory import ClusterState
from rlark_contracts.events.netdomain import (
    AddressAllocationFailed,
    AddressesAllocated,
    AddressesReleased,
    DomainCreated,
    DomainDeleted,
    DomainOverlapDetected,
    TunnelEndpoint,
    TunnelLink,
    TunnelTopologyChanged,
    WorkerAddress,
)
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested
from rlark_contracts.messages import text
from rlark_platform.db import transaction
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller
from rlark_platform.messaging import PoisonMessage, add_event

from rlark_netdomain import repository as repo
from rlark_netdomain.domain import (
    AddressPoolExhausted,
    Conflict,
    DomainOverlapError,
    DomainValidationError,
    LinkReport,
    Relay,
    RelayPolicy,
    WorkerRef,
    count_assignable,
    domains_overlapping_cluster,
    find_overlaps,
    free_in_range,
    full_mesh,
    plan_relays,
    plan_with_free,
    validate_domain_cidr,
    validate_domain_name,
    validate_endpoint,
    workers_without_address,
)
from rlark_netdomain.repository import Domain, DomainCidrTaken, DomainNameTaken, OverlapWarning

log = structlog.get_logger(__name__)

SOURCE = "netdomain"


# --- results ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DomainDetail:
    domain: Domain
    capacity: int
    allocated: int
    per_cluster: dict[str, int]
    warnings: list[OverlapWarning]
    tunnel_states: list[repo.TunnelLinkState] = field(default_factory=list)
    relays: list[Relay] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DomainPage:
    items: list[repo.DomainSummary]
    total: int
    page: int
    page_size: int


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    cidr: str | None = None
    capacity: int | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    error: DomainValidationError | None = None


@dataclass(frozen=True, slots=True)
class EventMeta:
    """Where an event handler's output comes from: the input event's ids, for tracing."""

    causation_id: str | None = None
    correlation_id: str | None = None


async def _publish(conn: Connection, data: BaseModel, subject: str, meta: EventMeta | None = None) -> None:
    if meta is None:
        request_id = structlog.contextvars.get_contextvars().get("request_id")
        meta = EventMeta(correlation_id=request_id)
    envelope = new_envelope(
        data,
        source=SOURCE,
        subject=subject,
        causation_id=meta.causation_id,
        correlation_id=meta.correlation_id,
    )
    await add_event(conn, envelope)


def _refusal(error: DomainValidationError) -> ApiError:
    details: dict[str, object] = {}
    if isinstance(error, DomainOverlapError):
        details["conflicts"] = [_conflict_out(c) for c in error.conflicts]
    return ApiError(422, error.code.value, error.message, error.field, details or None)


def _conflict_out(conflict: Conflict) -> dict[str, str | bool]:
    return {
        "kind": conflict.kind.value,
        "name": conflict.name,
        "cidr": str(conflict.cidr),
        "observed": conflict.observed,
        "message": conflict.message,
    }


def _not_found(name: str) -> ApiError:
    return ApiError(404, "domain_not_found", text("domain_not_found", name=repr(name)), "name")


# --- HTTP use cases --------------------------------------------------------------------------------


async def create_domain(pool: asyncpg.Pool, caller: Caller, name: str, cidr: str, description: str) -> Domain:
    """Create a domain (``netdomain.domain.created.v1`` and its empty tunnel topology).

    422 with the domain's code for a bad name or CIDR, ``cidr_overlaps`` naming every cluster and
    domain it overlaps (also in ``details.conflicts``); 409 ``domain_exists`` for a taken name.
    """
    try:
        clean_name = validate_domain_name(name)
        network = validate_domain_cidr(cidr)
    except DomainValidationError as error:
        raise _refusal(error) from None
    async with transaction(pool) as conn:
        await repo.lock_overlap_checks(conn)
        if await repo.get_domain(conn, clean_name) is not None:
            raise _exists(clean_name)
        await _ensure_no_overlaps(conn, network)
        try:
            domain = await repo.insert_domain(
                conn, clean_name, network, description.strip(), caller.user, network.network_address + 1
            )
        except DomainNameTaken:
            raise _exists(clean_name) from None
        except DomainCidrTaken:  # cannot happen under the lock; the constraint is the guarantee
            raise ApiError(
                422, "cidr_overlaps", text("cidr_overlaps.other_domain", cidr=str(network)), "cidr"
            ) from None
        await _publish(
            conn,
            DomainCreated(name=domain.name, cidr=str(domain.cidr), description=domain.description),
            domain.name,
        )
        await _publish(conn, _topology_event(domain, ()), domain.name)
    log.info("domain created", domain=domain.name, cidr=str(domain.cidr))
    return domain


def _exists(name: str) -> ApiError:
    return ApiError(409, "domain_exists", text("domain_exists", name=repr(name)), "name")


async def _ensure_no_overlaps(conn: Connection, network: IPv4Network) -> None:
    conflicts = find_overlaps(network, await repo.live_clusters(conn), await repo.domain_cidrs(conn))
    if conflicts:
        raise _refusal(DomainOverlapError(network, conflicts))


async def check_cidr(pool: asyncpg.Pool, cidr: str) -> CheckResult:
    """Form validation: would ``cidr`` be accepted for a new domain, and if not, why."""
    try:
        network = validate_domain_cidr(cidr)
    except DomainValidationError as error:
        return CheckResult(ok=False, error=error)
    async with pool.acquire() as conn:
        conflicts = find_overlaps(network, await repo.live_clusters(conn), await repo.domain_cidrs(conn))
    return CheckResult(
        ok=not conflicts, cidr=str(network), capacity=count_assignable(network), conflicts=conflicts
    )


async def list_domains(pool: asyncpg.Pool, *, page: int, page_size: int) -> DomainPage:
    async with pool.acquire() as conn:
        items, total = await repo.list_domains(conn, limit=page_size, offset=(page - 1) * page_size)
    return DomainPage(items, total, page, page_size)


async def get_domain(pool: asyncpg.Pool, name: str) -> DomainDetail:
    """A domain with its utilisation, tunnel topology and overlap warnings."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        domain = await repo.get_domain(conn, name)
        if domain is None:
            raise _not_found(name)
        per_cluster = await repo.allocation_counts(conn, name)
        warnings = await repo.domain_warnings(conn, name)
        states = await repo.tunnel_states(conn, name)
        relays = await repo.tunnel_relays(conn, name)
    return DomainDetail(
        domain=domain,
        capacity=count_assignable(domain.cidr),
        allocated=sum(per_cluster.values()),
        per_cluster=per_cluster,
        warnings=warnings,
        tunnel_states=states,
        relays=relays,
    )


async def delete_domain(pool: asyncpg.Pool, name: str) -> None:
    """Delete a domain (``netdomain.domain.deleted.v1``); 409 ``domain_in_use`` while any address
    of it is allocated."""
    async with transaction(pool) as conn:
        domain = await repo.lock_domain(conn, name)
        if domain is None:
            raise _not_found(name)
        per_cluster = await repo.allocation_counts(conn, name)
        if per_cluster:
            jobs = await repo.jobs_in_domain(conn, name, 5)
            shown = ", ".join(jobs) + (" ..." if len(jobs) == 5 else "")
            raise ApiError(
                409,
                "domain_in_use",
                text("domain_in_use", name=repr(name), addresses=sum(per_cluster.values()), jobs=shown),
                "name",
            )
        await repo.delete_domain(conn, name)
        await _publish(
            conn,
            DomainDeleted(name=domain.name, cidr=str(domain.cidr), description=domain.description),
            domain.name,
        )
    log.info("domain deleted", domain=name)


# --- clusters --------------------------------------------------------------------------------------


def _networks(values: list[str], cluster: str, what: str) -> list[IPv4Network | IPv6Network]:
    """Parse CIDRs read from an event; an unparsable one is skipped (read tolerantly) and logged."""
    parsed: list[IPv4Network | IPv6Network] = []
    for value in values:
        try:
            parsed.append(ip_network(value, strict=False))
        except ValueError:
            log.warning("ignoring unparsable cluster CIDR", cluster=cluster, kind=what, cidr=value[:64])
    return parsed


async def apply_cluster(
    conn: Connection, state: ClusterState, observed_at: datetime, meta: EventMeta
) -> None:
    """Keep a local copy of a cluster's declared CIDRs and flag domains they, or the networks its agent
    observed, overlap (:func:`_reconcile_overlaps`). Older states than the one stored are ignored.
    """
    await repo.lock_overlap_checks(conn)
    pods = _networks(state.pod_cidrs, state.name, "pod")
    services = _networks(state.service_cidrs, state.name, "service")
    deleted = state.deleted
    if not await repo.apply_cluster(
        conn, state.name, pods, services, deleted=deleted, observed_at=observed_at
    ):
        log.info("stale cluster state ignored", cluster=state.name)
        return
    overlaps = await _reconcile_overlaps(conn, state.name, meta)
    log.info("cluster applied", cluster=state.name, deleted=deleted, overlaps=overlaps)


def _network_set(networks: Sequence[IPv4Network | IPv6Network]) -> repo.Networks:
    """Distinct networks in a stable order (IPv4 first), so two reports of one set compare equal."""
    return tuple(sorted(set(networks), key=lambda n: (n.version, int(n.network_address), n.prefixlen)))


async def apply_nodes_observed(
    conn: Connection, report: NodesObserved, now: datetime, meta: EventMeta
) -> bool:
    """Keep the networks a cluster's agent observed — the union of its nodes' pod CIDRs, and its service
    CIDRs — and flag domains they overlap, as for declared CIDRs (:func:`_reconcile_overlaps`). True when
    they changed.

    The report's time is the agent's, capped at ours; older reports than the one stored are ignored. A
    partial snapshot (``complete`` false) only adds networks. Snapshots come every few seconds and
    rarely change anything: an unchanged one takes no lock and flags nothing.
    """
    cluster = report.cluster
    pods = _networks([c for node in report.nodes for c in node.pod_cidrs], cluster, "observed pod")
    services = _networks(report.service_cidrs, cluster, "observed service")
    stored = await repo.observed_networks(conn, cluster)
    if not report.complete and stored is not None:
        pods, services = [*stored[0], *pods], [*stored[1], *services]
    observed = (_network_set(pods), _network_set(services))
    at = min(report.observed_at, now)
    if stored is not None and (_network_set(stored[0]), _network_set(stored[1])) == observed:
        await repo.apply_observed_networks(conn, cluster, *observed, at)
        return False
    await repo.lock_overlap_checks(conn)
    if not await repo.apply_observed_networks(conn, cluster, *observed, at):
        log.info("stale node observation ignored", cluster=cluster)
        return False
    overlaps = await _reconcile_overlaps(conn, cluster, meta)
    log.info(
        "observed cluster networks applied",
        cluster=cluster,
        pod_cidrs=[str(n) for n in observed[0]],
        service_cidrs=[str(n) for n in observed[1]],
        overlaps=overlaps,
    )
    return True


async def _reconcile_overlaps(conn: Connection, cluster: str, meta: EventMeta) -> int:
    """Make the cluster's overlap warnings match its CIDRs now (declared ∪ observed; none once deleted),
    under the overlap lock; returns how many hold.

    A new overlap is recorded as a warning (shown with the domain) and announced with
    ``netdomain.domain.overlap_detected.v1``; warnings that no longer hold are removed.
    """
    cidrs = await repo.live_cluster(conn, cluster)
    found = [] if cidrs is None else domains_overlapping_cluster(cidrs, await repo.domain_cidrs(conn))
    current = {(w.domain, w.kind, w.cluster_cidr): w for w in await repo.cluster_warnings(conn, cluster)}
    wanted = {(o.domain_name, o.kind.value, o.cluster_cidr): o for o in found}
    for key in current.keys() - wanted.keys():
        await repo.delete_warning(conn, key[0], cluster, key[1], key[2])
    for key in sorted(wanted.keys() - current.keys(), key=str):
        overlap = wanted[key]
        await repo.insert_warning(
            conn, overlap.domain_name, cluster, overlap.kind.value, overlap.cluster_cidr, overlap.message
        )
        await _publish(
            conn,
            DomainOverlapDetected(
                name=overlap.domain_name,
                cidr=str(overlap.domain_cidr),
                cluster=cluster,
                cluster_cidr=str(overlap.cluster_cidr),
                message=overlap.message,
            ),
            # Keyed by domain and cluster, not by domain alone: on the compacted domains topic the
            # domain's own record must survive, and so must the latest overlap per cluster.
            f"{overlap.domain_name}/overlaps/{cluster}",
            meta,
        )
        log.warning(
            "cluster overlaps a network domain",
            cluster=cluster,
            domain=overlap.domain_name,
            observed=overlap.observed,
        )
    return len(wanted)


# --- addresses -------------------------------------------------------------------------------------


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
    listed = await repo.free_list(conn, domain.name, count)
    network = domain.cidr
    last = network.broadcast_address - 1
    start = max(domain.scan_from, network.network_address + 1)
    page_size = _page_size(count)
    walked: list[IPv4Address] = []
    while len(listed) + len(walked) < count and start <= last:
        page = await repo.used_addresses_from(conn, domain.name, start, page_size)
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
    domain = await repo.lock_domain(conn, request.domain)
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
    stored = await repo.job_allocations(conn, job_id)
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
    await repo.insert_allocations(
        conn,
        domain.name,
        job_id,
        [(ref.worker_id, clusters[ref.worker_id], a) for ref, a in plan.new.items()],
    )
    # ``free`` held exactly the addresses needed, and all were taken.
    if free.listed:
        await repo.remove_from_free_list(conn, domain.name, free.listed)
    if free.walked:
        # Every assignable address from scan_from up to the highest one just taken is now in use.
        await repo.set_scan_from(conn, domain.name, free.walked[-1] + 1)
    addresses = [
        WorkerAddress(worker_id=ref.worker_id, cluster=clusters[ref.worker_id], address=str(address))
        for ref, address in plan.assigned.items()
    ]
    await _publish(
        conn,
        AddressesAllocated(job_id=job_id, domain=domain.name, cidr=str(domain.cidr), addresses=addresses),
        job_id,
        meta,
    )
    hosting = {clusters[ref.worker_id] for ref in plan.assigned}
    await _refresh_topology(conn, domain, meta, added=hosting, released=set())
    log.info("addresses allocated", job_id=job_id, domain=domain.name, new=len(plan.new), kept=len(existing))
    return True


async def _fail(
    conn: Connection, request: AddressesRequested, code: str, reason: str, meta: EventMeta
) -> None:
    await _publish(
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
    stored = await repo.job_allocations(conn, request.job_id)
    domains = await repo.lock_domains(conn, {a.domain for a in stored} | {request.domain})
    released = await repo.delete_job_allocations(conn, request.job_id)
    for domain in domains:
        mine = [a for a in released if a.domain == domain.name]
        below = [a.address for a in mine if a.address < domain.scan_from]
        if below:
            # Above scan_from a freed address is found by the walk; below it, only on the list.
            await repo.add_to_free_list(conn, domain.name, below)
        await _refresh_topology(conn, domain, meta, added=set(), released={a.cluster for a in mine})
    await _publish(
        conn, AddressesReleased(job_id=request.job_id, domain=request.domain), request.job_id, meta
    )
    log.info("addresses released", job_id=request.job_id, domain=request.domain, released=len(released))
    return len(released)


def _topology_event(
    domain: Domain,
    clusters: tuple[str, ...] | list[str],
    endpoints: Sequence[repo.StoredEndpoint] = (),
    relays: Sequence[Relay] = (),
) -> TunnelTopologyChanged:
    topology = full_mesh(clusters)
    via = {r.link: r.via for r in relays if r.via in topology.clusters}
    return TunnelTopologyChanged(
        domain=domain.name,
        cidr=str(domain.cidr),
        clusters=list(topology.clusters),
        links=[TunnelLink(a=link.a, b=link.b, via=via.get(link)) for link in topology.links],
        endpoints=[
            TunnelEndpoint(cluster=e.cluster, host=e.host, port=e.port, public_key=e.public_key)
            for e in endpoints
            if e.cluster in topology.clusters
        ],
    )


async def _plan_relays(
    conn: Connection, domain: str, clusters: Sequence[str], now: datetime, policy: RelayPolicy
) -> tuple[list[Relay], bool]:
    """Decide the domain's relays (domain row locked) and store them; True when they changed.

    Pairs that stop being relayed lose their stored link reports: those described the relayed
    path, and the direct link must show its own state before it can be judged again.
    """
    stored = await repo.tunnel_relays(conn, domain)
    reports = [
        LinkReport(s.cluster, s.peer, s.state == "up", s.since, s.last_error)
        for s in await repo.tunnel_states(conn, domain)
    ]
    planned = list(plan_relays(clusters, reports, stored, now, policy))
    if planned == stored:
        return planned, False
    await repo.replace_tunnel_relays(conn, domain, planned)
    await repo.forget_tunnel_states(conn, domain, {r.link for r in stored} - {r.link for r in planned})
    return planned, True


async def _refresh_topology(
    conn: Connection, domain: Domain, meta: EventMeta, *, added: set[str], released: set[str]
) -> None:
    """Publish the domain's tunnel topology when its set of clusters changed (domain row locked).

    Incremental, so a busy domain is never scanned: clusters that just got a worker join; a
    cluster that just lost one leaves only when none of its workers remains in the domain. Relays
    that lost a cluster are repaired at once (another relay, or direct); new relays and returns to
    direct are the relay check's (:func:`check_relays`).
    """
    clusters = set(domain.topology_clusters) | added
    for cluster in released & clusters:
        if not await repo.cluster_has_allocations(conn, domain.name, cluster):
            clusters.discard(cluster)
    ordered = sorted(clusters)
    if tuple(ordered) == domain.topology_clusters:
        return
    await repo.set_topology(conn, domain.name, ordered)
    left = sorted(set(domain.topology_clusters) - clusters)
    if left:
        # A cluster that rejoins announces afresh; a stale endpoint must not be handed out meanwhile.
        await repo.delete_tunnel_endpoints(conn, domain.name, left)
    relays, _ = await _plan_relays(conn, domain.name, ordered, datetime.now(UTC), RelayPolicy.repair_only())
    endpoints = await repo.tunnel_endpoints(conn, domain.name)
    await _publish(conn, _topology_event(domain, ordered, endpoints, relays), domain.name, meta)
    log.info("tunnel topology changed", domain=domain.name, clusters=ordered)


async def check_relays(pool: asyncpg.Pool, domain_name: str, now: datetime, policy: RelayPolicy) -> bool:
    """Apply the relay rules (``domain.relays``) to one domain; True when its topology was
    republished. Publishes only on change, so running it twice, or from two worker processes at
    once (the domain's row lock orders them), publishes once."""
    async with transaction(pool) as conn:
        domain = await repo.lock_domain(conn, domain_name)
        if domain is None:
            return False
        relays, changed = await _plan_relays(conn, domain.name, domain.topology_clusters, now, policy)
        if not changed:
            return False
        endpoints = await repo.tunnel_endpoints(conn, domain.name)
        await _publish(
            conn,
            _topology_event(domain, domain.topology_clusters, endpoints, relays),
            domain.name,
            EventMeta(correlation_id=f"relays/{domain.name}"),
        )
    log.info(
        "tunnel relays changed",
        domain=domain_name,
        relays=[f"{r.link.a}-{r.via}-{r.link.b}" for r in relays],
    )
    return True


async def apply_tunnel_state(conn: Connection, payload: TunnelStateChanged, now: datetime) -> bool:
    """Keep an agent's report on one link of a domain, for ``GET /api/v1/domains/{name}``; a ``closed``
    link is forgotten. The report's time is the agent's, capped at ours; reports on unknown domains
    are dropped."""
    if not payload.domain or not payload.peer or payload.peer == payload.cluster:
        raise PoisonMessage("a tunnel state report names a domain and a peer other than its cluster")
    at = min(payload.at, now)
    if payload.state == LINK_CLOSED:
        return await repo.delete_tunnel_state(conn, payload.domain, payload.cluster, payload.peer, at)
    return await repo.upsert_tunnel_state(
        conn,
        payload.domain,
        repo.TunnelLinkState(
            cluster=payload.cluster,
            peer=payload.peer,
            state="up" if payload.state == "up" else "down",
            since=at,
            rtt_ms=payload.rtt_ms,
            bytes_sent=max(payload.bytes_sent, 0),
            bytes_received=max(payload.bytes_received, 0),
            last_error=payload.last_error[:500],
            reported_at=at,
        ),
    )


async def apply_tunnel_endpoint(
    conn: Connection, payload: TunnelEndpointAnnounced, now: datetime, meta: EventMeta
) -> bool:
    """Keep a cluster's verified tunnel endpoint and republish the domain's topology with it.

    The caller (the platform consumer) has checked that it came on ``payload.cluster``'s own topic, which
    only that cluster's agent may write, with that agent's ``source`` (ADR 0004); here the fields are validated (a malformed one is a poison message naming it; the key is never
    echoed, only its fingerprint logged). Only clusters of the domain's current topology are kept:
    an announcement for an unknown domain, or from a cluster hosting none of its workers, changes
    nothing. ``netdomain.tunnels.topology_changed.v1`` goes out only when the stored host, port or
    key changed, so redeliveries and the agents' periodic re-announcements publish nothing. True
    when published.
    """
    try:
        endpoint = validate_endpoint(payload.cluster, payload.host, payload.port, payload.public_key)
    except DomainValidationError as error:
        raise PoisonMessage(f"tunnel endpoint refused: {error.message}") from None
    known = await repo.tunnel_endpoint(conn, payload.domain, endpoint.cluster)
    if known is not None and (known.host, known.port, known.public_key) == (
        endpoint.host,
        endpoint.port,
        endpoint.public_key,
    ):
        return False  # the common case (a heartbeat's re-announcement): no lock, no write
    # The domain's row lock orders this with allocations and releases, which change the topology.
    domain = await repo.lock_domain(conn, payload.domain)
    if domain is None or endpoint.cluster not in domain.topology_clusters:
        log.info(
            "tunnel endpoint ignored: cluster not in the domain's topology",
            domain=payload.domain,
            cluster=endpoint.cluster,
        )
        return False
    stored = repo.StoredEndpoint(
        cluster=endpoint.cluster,
        host=endpoint.host,
        port=endpoint.port,
        public_key=endpoint.public_key,
        announced_at=min(payload.announced_at, now),
    )
    if not await repo.upsert_tunnel_endpoint(conn, domain.name, stored):
        return False
    endpoints = await repo.tunnel_endpoints(conn, domain.name)
    relays = await repo.tunnel_relays(conn, domain.name)
    await _publish(
        conn, _topology_event(domain, domain.topology_clusters, endpoints, relays), domain.name, meta
    )
    log.info(
        "tunnel endpoint verified and published",
        domain=domain.name,
        cluster=endpoint.cluster,
        host=endpoint.host,
        port=endpoint.port,
        key_fingerprint=endpoint.fingerprint,
    )
    return True
