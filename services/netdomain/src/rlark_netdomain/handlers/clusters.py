"""Event use cases of clusters' networks: a cluster's declared CIDRs changed (``inventory.clusters``),
or its agent observed its networks (``agent.nodes.observed.v1``). Both land in the local ``clusters``
table and reconcile the overlap warnings of the domains they overlap (:func:`_reconcile_overlaps`).

Both take the overlap lock (``overlaps.lock_overlap_checks``) before they write the cluster's row, as
domain creation does, so an overlap between a new domain and a changing cluster is never missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from ipaddress import IPv4Network, IPv6Network, ip_network

import structlog
from rlark_contracts.events.agent import NodesObserved
from rlark_contracts.events.inventory import ClusterState
from rlark_contracts.events.netdomain import DomainOverlapDetected
from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import domains_overlapping_cluster
from rlark_netdomain.handlers.publishing import EventMeta, publish
from rlark_netdomain.repository import clusters, domains, overlaps
from rlark_netdomain.repository.clusters import Networks

log = structlog.get_logger(__name__)


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
    await overlaps.lock_overlap_checks(conn)
    pods = _networks(state.pod_cidrs, state.name, "pod")
    services = _networks(state.service_cidrs, state.name, "service")
    deleted = state.deleted
    if not await clusters.apply_cluster(
        conn, state.name, pods, services, deleted=deleted, observed_at=observed_at
    ):
        log.info("stale cluster state ignored", cluster=state.name)
        return
    found = await _reconcile_overlaps(conn, state.name, meta)
    log.info("cluster applied", cluster=state.name, deleted=deleted, overlaps=found)


def _network_set(networks: Sequence[IPv4Network | IPv6Network]) -> Networks:
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
    stored = await clusters.observed_networks(conn, cluster)
    if not report.complete and stored is not None:
        pods, services = [*stored[0], *pods], [*stored[1], *services]
    observed = (_network_set(pods), _network_set(services))
    at = min(report.observed_at, now)
    if stored is not None and (_network_set(stored[0]), _network_set(stored[1])) == observed:
        await clusters.apply_observed_networks(conn, cluster, *observed, at)
        return False
    await overlaps.lock_overlap_checks(conn)
    if not await clusters.apply_observed_networks(conn, cluster, *observed, at):
        log.info("stale node observation ignored", cluster=cluster)
        return False
    found = await _reconcile_overlaps(conn, cluster, meta)
    log.info(
        "observed cluster networks applied",
        cluster=cluster,
        pod_cidrs=[str(n) for n in observed[0]],
        service_cidrs=[str(n) for n in observed[1]],
        overlaps=found,
    )
    return True


async def _reconcile_overlaps(conn: Connection, cluster: str, meta: EventMeta) -> int:
    """Make the cluster's overlap warnings match its CIDRs now (declared ∪ observed; none once deleted),
    under the overlap lock; returns how many hold.

    A new overlap is recorded as a warning (shown with the domain) and announced with
    ``netdomain.domain.overlap_detected.v1``; warnings that no longer hold are removed.
    """
    cidrs = await clusters.live_cluster(conn, cluster)
    found = [] if cidrs is None else domains_overlapping_cluster(cidrs, await domains.domain_cidrs(conn))
    current = {(w.domain, w.kind, w.cluster_cidr): w for w in await overlaps.cluster_warnings(conn, cluster)}
    wanted = {(o.domain_name, o.kind.value, o.cluster_cidr): o for o in found}
    for key in current.keys() - wanted.keys():
        await overlaps.delete_warning(conn, key[0], cluster, key[1], key[2])
    for key in sorted(wanted.keys() - current.keys(), key=str):
        overlap = wanted[key]
        await overlaps.insert_warning(
            conn, overlap.domain_name, cluster, overlap.kind.value, overlap.cluster_cidr, overlap.message
        )
        await publish(
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
