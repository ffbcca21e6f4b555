"""Read models of other services' public state: inventory's ``clusters`` and ``nodes``, keys'
``ssh_keys`` (public material only) and ``secret_names`` (names only), netdomain's ``network_domains``.

Only the ``scheduler-state`` consumer writes them (from those services' events); everything else
reads. A node's row is joined with the GPUs of the scheduler's own workers on it (the capacity
model's view of a node is ``repository.capacity``'s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.capacity import ClusterFacts, cluster_labels
from rlark_scheduler.repository.jobs import HOLDING_VALUES

# ------------------------------------------------------------------------------------------- clusters


@dataclass(frozen=True)
class ClusterRow:
    name: str
    runtime: str
    online: bool
    deleted: bool
    hostpath_allow: tuple[str, ...] = ()
    unmountable: tuple[str, ...] = ()
    """Mount types its agent is not set up for (``ClusterState.unmountable``)."""


def _cluster(row: asyncpg.Record) -> ClusterRow:
    return ClusterRow(
        row["name"],
        row["runtime"],
        row["online"],
        row["deleted"],
        tuple(row["hostpath_allow"]),
        tuple(row["unmountable"]),
    )


async def get_cluster(conn: Connection, name: str) -> ClusterRow | None:
    row = await conn.fetchrow(
        "SELECT name, runtime, online, deleted, hostpath_allow, unmountable FROM clusters WHERE name = $1",
        name,
    )
    return _cluster(row) if row else None


async def upsert_cluster(
    conn: Connection,
    name: str,
    *,
    runtime: str,
    online: bool,
    pod_cidrs: Sequence[str],
    service_cidrs: Sequence[str],
    deleted: bool,
    hostpath_allow: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    category: str = "",
    region: str = "",
    unmountable: Sequence[str] = (),
    at: datetime | None = None,
) -> ClusterRow | None:
    """Store a cluster's state; returns the previous row (None when new). A cluster that goes offline keeps
    when it did (``at``, the database's clock when None) until it is back online."""
    previous = await conn.fetchrow(
        "SELECT name, runtime, online, deleted, hostpath_allow, unmountable FROM clusters WHERE name = $1 FOR UPDATE",
        name,
    )
    await conn.execute(
        """INSERT INTO clusters (name, runtime, online, pod_cidrs, service_cidrs, deleted, hostpath_allow,
               labels, category, region, unmountable, changed_at, offline_since)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now(),
                   CASE WHEN $3 THEN NULL ELSE coalesce($12::timestamptz, now()) END)
           ON CONFLICT (name) DO UPDATE SET runtime = EXCLUDED.runtime, online = EXCLUDED.online,
               offline_since = CASE WHEN EXCLUDED.online THEN NULL
                                    ELSE coalesce(clusters.offline_since, EXCLUDED.offline_since) END,
               pod_cidrs = EXCLUDED.pod_cidrs, service_cidrs = EXCLUDED.service_cidrs,
               deleted = EXCLUDED.deleted, hostpath_allow = EXCLUDED.hostpath_allow,
               labels = EXCLUDED.labels, category = EXCLUDED.category, region = EXCLUDED.region,
               unmountable = EXCLUDED.unmountable, changed_at = now()""",
        name,
        runtime,
        online,
        list(pod_cidrs),
        list(service_cidrs),
        deleted,
        list(hostpath_allow),
        dict(labels or {}),
        category,
        region,
        sorted(set(unmountable)),
        at,
    )
    return _cluster(previous) if previous else None


async def clusters_offline_before(conn: Connection, cutoff: datetime) -> list[str]:
    """The clusters (not deleted) that went offline before ``cutoff`` and are not back."""
    rows = await conn.fetch(
        "SELECT name FROM clusters WHERE NOT online AND NOT deleted AND offline_since < $1 ORDER BY name",
        cutoff,
    )
    return [r["name"] for r in rows]


async def cluster_facts(conn: Connection, names: Sequence[str] | None = None) -> dict[str, ClusterFacts]:
    """What the placer chooses clusters by (ADR 0026), for the clusters ``names`` (every one when None) that
    are not deleted: their labels with region and category, runtime and hostPath policy. A cluster known only
    through its nodes has no labels, the Kubernetes runtime and no hostPath (as ``known_clusters`` says)."""
    rows = await conn.fetch(
        """SELECT name, labels, category, region, runtime, hostpath_allow, unmountable FROM clusters
            WHERE NOT deleted AND ($1::text[] IS NULL OR name = ANY($1::text[]))
           UNION ALL
           SELECT DISTINCT n.cluster, '{}'::jsonb, '', '', 'kubernetes', '{}'::text[], '{}'::text[] FROM nodes n
            WHERE ($1::text[] IS NULL OR n.cluster = ANY($1::text[]))
              AND NOT EXISTS (SELECT 1 FROM clusters c WHERE c.name = n.cluster)""",
        None if names is None else list(names),
    )
    return {
        r["name"]: ClusterFacts(
            labels=cluster_labels(dict(r["labels"]), region=r["region"], category=r["category"]),
            runtime=r["runtime"],
            hostpath_allow=tuple(r["hostpath_allow"]),
            unmountable=tuple(r["unmountable"]),
        )
        for r in rows
    }


async def offline_clusters(conn: Connection) -> list[str]:
    rows = await conn.fetch("SELECT name FROM clusters WHERE NOT online OR deleted")
    return [r["name"] for r in rows]


async def known_clusters(conn: Connection, names: Sequence[str] | None) -> list[ClusterRow]:
    """Clusters among ``names`` (every one when None) that exist (not deleted) as clusters or through their
    nodes.

    Node and cluster events travel on different topics: a cluster whose nodes arrived first is
    known, and online until its own state says otherwise; until then it allows no hostPath.
    """
    rows = await conn.fetch(
        """SELECT c.name, c.runtime, c.online, c.deleted, c.hostpath_allow, c.unmountable FROM clusters c
            WHERE ($1::text[] IS NULL OR c.name = ANY($1::text[])) AND NOT c.deleted
           UNION ALL
           SELECT DISTINCT n.cluster, 'kubernetes', true, false, '{}'::text[], '{}'::text[] FROM nodes n
            WHERE ($1::text[] IS NULL OR n.cluster = ANY($1::text[]))
              AND NOT EXISTS (SELECT 1 FROM clusters c WHERE c.name = n.cluster)""",
        None if names is None else list(names),
    )
    return [_cluster(r) for r in rows]


# ---------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class NodeRow:
    """A node as inventory reported it, plus the GPUs of RLark workers present on it (of jobs that
    still hold capacity) and the GPUs the scheduler's allocations hold on it."""

    cluster: str
    name: str
    ready: bool
    schedulable: bool
    gone: bool
    gpu_allocatable: int
    gpu_allocated: int
    labels: dict[str, str]
    addresses: list[str]
    present_gpus: int
    held_gpus: int
    gpu_allocated_foreign: int = 0
    gpu_model: str = ""


_NODE_SELECT = """
    SELECT n.cluster, n.name, n.ready, n.schedulable, n.gone, n.gpu_allocatable, n.gpu_allocated,
           n.gpu_allocated_foreign, n.gpu_model, n.labels, n.addresses,
           COALESCE(w.present_gpus, 0) AS present_gpus, COALESCE(w.held_gpus, 0) AS held_gpus
      FROM nodes n
      LEFT JOIN LATERAL (
          SELECT sum(wk.gpus) FILTER (
                     WHERE wk.present
                       AND (n.observed_at IS NULL OR wk.present_since IS NULL OR wk.present_since <= n.observed_at)
                 ) AS present_gpus,
                 sum(wk.gpus) AS held_gpus
            FROM workers wk JOIN jobs j ON j.id = wk.job_id
           WHERE j.status = ANY($1::text[]) AND wk.attempt = j.attempt
             AND wk.cluster = n.cluster AND wk.node = n.name
      ) w ON true
"""


def _node(row: asyncpg.Record) -> NodeRow:
    return NodeRow(
        cluster=row["cluster"],
        name=row["name"],
        ready=row["ready"],
        schedulable=row["schedulable"],
        gone=row["gone"],
        gpu_allocatable=row["gpu_allocatable"],
        gpu_allocated=row["gpu_allocated"],
        labels=dict(row["labels"]),
        addresses=list(row["addresses"]),
        present_gpus=int(row["present_gpus"]),
        held_gpus=int(row["held_gpus"]),
        gpu_allocated_foreign=row["gpu_allocated_foreign"],
        gpu_model=row["gpu_model"] or "",
    )


async def upsert_node(
    conn: Connection,
    *,
    cluster: str,
    name: str,
    ready: bool,
    schedulable: bool,
    gone: bool,
    gpu_count: int,
    gpu_model: str,
    gpu_allocatable: int,
    gpu_allocated: int,
    labels: Mapping[str, str],
    addresses: Sequence[str],
    observed_at: datetime | None = None,
    gpu_allocated_foreign: int = 0,
) -> None:
    await conn.execute(
        """INSERT INTO nodes (cluster, name, ready, schedulable, gone, gpu_count, gpu_model,
                              gpu_allocatable, gpu_allocated, labels, addresses, changed_at, observed_at,
                              gpu_allocated_foreign)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now(), $12, $13)
           ON CONFLICT (cluster, name) DO UPDATE SET ready = EXCLUDED.ready,
               schedulable = EXCLUDED.schedulable, gone = EXCLUDED.gone, gpu_count = EXCLUDED.gpu_count,
               gpu_model = EXCLUDED.gpu_model, gpu_allocatable = EXCLUDED.gpu_allocatable,
               gpu_allocated = EXCLUDED.gpu_allocated, gpu_allocated_foreign = EXCLUDED.gpu_allocated_foreign,
               labels = EXCLUDED.labels, addresses = EXCLUDED.addresses, changed_at = now(),
               observed_at = EXCLUDED.observed_at""",
        cluster,
        name,
        ready,
        schedulable,
        gone,
        gpu_count,
        gpu_model,
        gpu_allocatable,
        gpu_allocated,
        dict(labels),
        list(addresses),
        observed_at,
        gpu_allocated_foreign,
    )


async def all_nodes(conn: Connection) -> list[NodeRow]:
    return [_node(r) for r in await conn.fetch(_NODE_SELECT, HOLDING_VALUES)]


async def nodes_of_clusters(conn: Connection, clusters: Sequence[str]) -> list[NodeRow]:
    rows = await conn.fetch(
        _NODE_SELECT + " WHERE n.cluster = ANY($2::text[])", HOLDING_VALUES, list(clusters)
    )
    return [_node(r) for r in rows]


async def nodes_by_key(conn: Connection, keys: Sequence[tuple[str, str]]) -> list[NodeRow]:
    rows = await conn.fetch(
        _NODE_SELECT + " WHERE (n.cluster, n.name) IN (SELECT * FROM unnest($2::text[], $3::text[]))",  # noqa: S608
        HOLDING_VALUES,
        [k[0] for k in keys],
        [k[1] for k in keys],
    )
    return [_node(r) for r in rows]


async def nodes_of_jobs(conn: Connection, job_ids: Sequence[str]) -> list[NodeRow]:
    """The nodes the workers of these jobs were placed on."""
    rows = await conn.fetch(
        _NODE_SELECT  # noqa: S608
        + """ WHERE (n.cluster, n.name) IN (
                SELECT cluster, node FROM workers WHERE job_id = ANY($2::text[]))""",
        HOLDING_VALUES,
        list(job_ids),
    )
    return [_node(r) for r in rows]


# ------------------------------------------------------------------------------------------- ssh keys


@dataclass(frozen=True)
class KeyRow:
    key_id: str
    owner: str
    name: str
    fingerprint: str
    public_key: str


def _key(row: asyncpg.Record) -> KeyRow:
    return KeyRow(row["key_id"], row["owner"], row["name"], row["fingerprint"], row["public_key"])


async def upsert_key(
    conn: Connection,
    *,
    key_id: str,
    owner: str,
    name: str,
    key_type: str,
    fingerprint: str,
    public_key: str,
) -> None:
    await conn.execute(
        """INSERT INTO ssh_keys (key_id, owner, name, key_type, fingerprint, public_key)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (key_id) DO UPDATE SET owner = EXCLUDED.owner, name = EXCLUDED.name,
               key_type = EXCLUDED.key_type, fingerprint = EXCLUDED.fingerprint,
               public_key = EXCLUDED.public_key""",
        key_id,
        owner,
        name,
        key_type,
        fingerprint,
        public_key,
    )


async def delete_key(conn: Connection, key_id: str) -> None:
    await conn.execute("DELETE FROM ssh_keys WHERE key_id = $1", key_id)


async def keys_of(conn: Connection, owner: str) -> list[KeyRow]:
    rows = await conn.fetch(
        "SELECT key_id, owner, name, fingerprint, public_key FROM ssh_keys WHERE owner = $1 "
        "ORDER BY name, key_id",
        owner,
    )
    return [_key(r) for r in rows]


# ------------------------------------------------------------------------------------------- secrets


async def upsert_secret_name(
    conn: Connection, secret_id: str, scope: str, owner: str, name: str, version: int
) -> None:
    """The keys service's secret as the scheduler knows it; an older version never replaces a newer one."""
    await conn.execute(
        """INSERT INTO secret_names (secret_id, scope, owner, name, version) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (secret_id) DO UPDATE SET version = EXCLUDED.version
            WHERE secret_names.version < EXCLUDED.version""",
        secret_id,
        scope,
        owner,
        name,
        version,
    )


async def delete_secret_name(conn: Connection, secret_id: str) -> None:
    await conn.execute("DELETE FROM secret_names WHERE secret_id = $1", secret_id)


async def secret_owners(conn: Connection, owner: str, project: str | None) -> dict[str, tuple[str, str]]:
    """The secrets a job of ``owner`` (charged to ``project``, when one) may name: name → (scope, owner) — the
    owner's own first, then the project's."""
    rows = await conn.fetch(
        """SELECT scope, owner, name FROM secret_names
            WHERE (scope = 'user' AND owner = $1) OR (scope = 'project' AND owner = $2)""",
        owner,
        project,
    )
    found: dict[str, tuple[str, str]] = {}
    for row in sorted(rows, key=lambda r: r["scope"] != "user"):
        found.setdefault(row["name"], (row["scope"], row["owner"]))
    return found


# ---------------------------------------------------------------------------------------- net domains


async def upsert_domain(conn: Connection, name: str, cidr: str, clusters: Sequence[str] = ()) -> None:
    """Store a domain; ``clusters`` are the clusters it joins (empty: every cluster)."""
    await conn.execute(
        """INSERT INTO network_domains (name, cidr, clusters) VALUES ($1, $2, $3)
           ON CONFLICT (name) DO UPDATE SET cidr = EXCLUDED.cidr, clusters = EXCLUDED.clusters""",
        name,
        cidr,
        sorted(set(clusters)),
    )


async def delete_domain(conn: Connection, name: str) -> None:
    await conn.execute("DELETE FROM network_domains WHERE name = $1", name)


async def domains(conn: Connection) -> dict[str, str]:
    """Network domain name → CIDR."""
    rows = await conn.fetch("SELECT name, cidr FROM network_domains ORDER BY name")
    return {r["name"]: r["cidr"] for r in rows}


async def domain_clusters(conn: Connection) -> dict[str, tuple[str, ...] | None]:
    """Network domain name → the clusters it joins (None: every cluster), what the placer spans through."""
    rows = await conn.fetch("SELECT name, clusters FROM network_domains ORDER BY name")
    return {r["name"]: tuple(r["clusters"]) or None for r in rows}
