"""SQL of the ``clusters`` table, the service's read model of clusters: a local copy of inventory's
declared CIDRs (``inventory.clusters``) and the networks each cluster's agent last observed
(``agent.nodes.observed.v1``). Each half moves only forward in its own time; deleted clusters stay
as tombstones.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from ipaddress import IPv4Network, IPv6Network

import asyncpg
from rlark_platform.db.pool import Connection

from rlark_netdomain.domain import ClusterCidrs

Networks = tuple[IPv4Network | IPv6Network, ...]


def _cluster_cidrs(row: asyncpg.Record) -> ClusterCidrs:
    return ClusterCidrs(
        row["name"],
        tuple(row["pod_cidrs"]),
        tuple(row["service_cidrs"]),
        tuple(row["observed_pod_cidrs"]),
        tuple(row["observed_service_cidrs"]),
    )


async def apply_cluster(
    conn: Connection,
    name: str,
    pod_cidrs: Sequence[IPv4Network | IPv6Network],
    service_cidrs: Sequence[IPv4Network | IPv6Network],
    *,
    deleted: bool,
    observed_at: datetime,
) -> bool:
    """Store a cluster's state unless a newer one is stored already; True when applied."""
    applied = await conn.fetchval(
        """INSERT INTO clusters (name, pod_cidrs, service_cidrs, deleted, observed_at)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (name) DO UPDATE SET pod_cidrs = EXCLUDED.pod_cidrs,
               service_cidrs = EXCLUDED.service_cidrs, deleted = EXCLUDED.deleted,
               observed_at = EXCLUDED.observed_at
           WHERE clusters.observed_at <= EXCLUDED.observed_at
           RETURNING true""",
        name,
        list(pod_cidrs),
        list(service_cidrs),
        deleted,
        observed_at,
    )
    return bool(applied)


async def live_clusters(conn: Connection) -> list[ClusterCidrs]:
    """Every cluster not deleted, with its declared and observed CIDRs."""
    rows = await conn.fetch(
        """SELECT name, pod_cidrs, service_cidrs, observed_pod_cidrs, observed_service_cidrs
             FROM clusters WHERE NOT deleted ORDER BY name"""
    )
    return [_cluster_cidrs(r) for r in rows]


async def live_cluster(conn: Connection, name: str) -> ClusterCidrs | None:
    """One cluster's declared and observed CIDRs; None when it is deleted or unknown."""
    row = await conn.fetchrow(
        """SELECT name, pod_cidrs, service_cidrs, observed_pod_cidrs, observed_service_cidrs
             FROM clusters WHERE name = $1 AND NOT deleted""",
        name,
    )
    return None if row is None else _cluster_cidrs(row)


async def observed_networks(conn: Connection, name: str) -> tuple[Networks, Networks] | None:
    """The (pod, service) networks the cluster's agent last reported; None before its first report."""
    row = await conn.fetchrow(
        """SELECT observed_pod_cidrs, observed_service_cidrs FROM clusters
            WHERE name = $1 AND networks_observed_at IS NOT NULL""",
        name,
    )
    return None if row is None else (tuple(row["observed_pod_cidrs"]), tuple(row["observed_service_cidrs"]))


async def apply_observed_networks(
    conn: Connection, name: str, pod_cidrs: Networks, service_cidrs: Networks, observed_at: datetime
) -> bool:
    """Store the networks a cluster's agent observed unless a later report is stored already; True when
    applied. A report before inventory's state of the cluster creates its row with no declared CIDRs
    (``observed_at`` '-infinity': every cluster state is newer); a deleted cluster stays deleted."""
    applied = await conn.fetchval(
        """INSERT INTO clusters (name, observed_pod_cidrs, observed_service_cidrs, networks_observed_at,
                                 observed_at)
           VALUES ($1, $2, $3, $4, '-infinity')
           ON CONFLICT (name) DO UPDATE SET observed_pod_cidrs = EXCLUDED.observed_pod_cidrs,
               observed_service_cidrs = EXCLUDED.observed_service_cidrs,
               networks_observed_at = EXCLUDED.networks_observed_at
           WHERE clusters.networks_observed_at IS NULL
              OR clusters.networks_observed_at <= EXCLUDED.networks_observed_at
           RETURNING true""",
        name,
        list(pod_cidrs),
        list(service_cidrs),
        observed_at,
    )
    return bool(applied)
