"""A domain's tunnel topology as published, and the steps that change it, shared by the use cases
that change a domain's clusters (allocation, release, creation), its endpoints or its relays.

Every function here runs in its caller's transaction with the domain's row locked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import structlog
from rlark_contracts.events.netdomain import TunnelEndpoint, TunnelLink, TunnelTopologyChanged
from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import LinkReport, Relay, RelayPolicy, full_mesh, plan_relays
from rlark_netdomain.handlers.publishing import EventMeta, publish
from rlark_netdomain.repository import allocations, domains, tunnel_endpoints, tunnel_relays, tunnel_states
from rlark_netdomain.repository.domains import Domain
from rlark_netdomain.repository.tunnel_endpoints import StoredEndpoint

log = structlog.get_logger(__name__)


def topology_event(
    domain: Domain,
    clusters: tuple[str, ...] | list[str],
    endpoints: Sequence[StoredEndpoint] = (),
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


async def store_planned_relays(
    conn: Connection, domain: str, clusters: Sequence[str], now: datetime, policy: RelayPolicy
) -> tuple[list[Relay], bool]:
    """Decide the domain's relays (domain row locked) and store them; True when they changed.

    Pairs that stop being relayed lose their stored link reports: those described the relayed
    path, and the direct link must show its own state before it can be judged again.
    """
    stored = await tunnel_relays.tunnel_relays(conn, domain)
    reports = [
        LinkReport(s.cluster, s.peer, s.state == "up", s.since, s.last_error)
        for s in await tunnel_states.tunnel_states(conn, domain)
    ]
    planned = list(plan_relays(clusters, reports, stored, now, policy))
    if planned == stored:
        return planned, False
    await tunnel_relays.replace_tunnel_relays(conn, domain, planned)
    await tunnel_states.forget_tunnel_states(
        conn, domain, {r.link for r in stored} - {r.link for r in planned}
    )
    return planned, True


async def refresh_topology(
    conn: Connection, domain: Domain, meta: EventMeta, *, added: set[str], released: set[str]
) -> None:
    """Publish the domain's tunnel topology when its set of clusters changed (domain row locked).

    Incremental, so a busy domain is never scanned: clusters that just got a worker join; a
    cluster that just lost one leaves only when none of its workers remains in the domain. Relays
    that lost a cluster are repaired at once (another relay, or direct); new relays and returns to
    direct are the relay check's (``tunnel_relays.check_relays``).
    """
    clusters = set(domain.topology_clusters) | added
    for cluster in released & clusters:
        if not await allocations.cluster_has_allocations(conn, domain.name, cluster):
            clusters.discard(cluster)
    ordered = sorted(clusters)
    if tuple(ordered) == domain.topology_clusters:
        return
    await domains.set_topology(conn, domain.name, ordered)
    left = sorted(set(domain.topology_clusters) - clusters)
    if left:
        # A cluster that rejoins announces afresh; a stale endpoint must not be handed out meanwhile.
        await tunnel_endpoints.delete_tunnel_endpoints(conn, domain.name, left)
    relays, _ = await store_planned_relays(
        conn, domain.name, ordered, datetime.now(UTC), RelayPolicy.repair_only()
    )
    endpoints = await tunnel_endpoints.tunnel_endpoints(conn, domain.name)
    await publish(conn, topology_event(domain, ordered, endpoints, relays), domain.name, meta)
    log.info("tunnel topology changed", domain=domain.name, clusters=ordered)
