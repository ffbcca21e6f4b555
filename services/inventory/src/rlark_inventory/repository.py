"""All SQL of the inventory service. Every function takes the connection first and uses ``$n`` parameters.

Bulk writes (node observations) go through one statement per report — ``jsonb_to_recordset`` turns a
whole batch into rows — so ingest cost does not grow with a round trip per node.

Dynamic parts of queries (filters, sort order) are assembled only from the fixed fragments in this
module; user input always travels as a parameter.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg
from rlark_contracts.events.inventory import ClusterState, NodeState
from rlark_platform.db.pages import page_and_total
from rlark_platform.db.pool import Connection, mark_session_state

from rlark_inventory.domain.clusters import ClusterSpec
from rlark_inventory.domain.nodes import STATE_FIELDS, MatchedNode, NodeDocument, search_text

# ---------------------------------------------------------------------------------------------- clusters


@dataclass(frozen=True)
class ClusterRow:
    """A cluster as stored, without its credential hash."""

    spec: ClusterSpec
    online: bool
    last_seen: datetime | None
    agent_version: str
    not_enforced: tuple[str, ...]
    """What the agent said, with its latest heartbeat, it cannot enforce on its workers."""
    unmountable: tuple[str, ...]
    """Mount types the agent said, with its latest heartbeat, it is not set up for."""
    credential_rotated_at: datetime
    last_session_at: datetime | None
    created_by: str
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.spec.name

    def state(self, *, deleted: bool = False) -> ClusterState:
        """The public state carried by ``inventory.cluster.*`` events (never the credential)."""
        return ClusterState(
            name=self.spec.name,
            display_name=self.spec.display_name,
            category=self.spec.category,
            region=self.spec.region,
            runtime=self.spec.runtime,
            pod_cidrs=list(self.spec.pod_cidrs),
            service_cidrs=list(self.spec.service_cidrs),
            labels=dict(self.spec.labels),
            hostpath_allow=list(self.spec.hostpath_allow),
            unmountable=list(self.unmountable),
            online=self.online,
            last_seen=self.last_seen,
            deleted=deleted,
        )


@dataclass(frozen=True)
class ClusterSummary:
    nodes_total: int
    nodes_online: int
    nodes_offline: int
    gpus_total: int
    gpus_free: int
    running_jobs: int
    running_workers: int
    gpus_allocatable: int = 0
    gpus_allocated: int = 0
    gpus_allocated_foreign: int = 0

    @property
    def online_rate(self) -> float:
        return round(self.nodes_online / self.nodes_total, 4) if self.nodes_total else 0.0


_CLUSTER_COLUMNS = """c.name, c.display_name, c.category, c.region, c.runtime, c.pod_cidrs, c.service_cidrs,
    c.labels, c.hostpath_allow, c.online, c.last_seen, c.agent_version, c.not_enforced, c.unmountable,
    c.credential_rotated_at,
    c.last_session_at,
    c.created_by, c.created_at, c.updated_at"""

# Node counts: "online" means ready in a cluster whose agent is alive; free GPUs count only where a
# worker could land now (ready, schedulable, cluster online); total, allocatable and allocated GPUs count
# every node that is not gone.
_SUMMARY_JOINS = """
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE NOT n.gone) AS nodes_total,
           count(*) FILTER (WHERE NOT n.gone AND n.ready AND c.online) AS nodes_online,
           coalesce(sum(n.gpu_count) FILTER (WHERE NOT n.gone), 0) AS gpus_total,
           coalesce(sum(n.gpu_allocatable) FILTER (WHERE NOT n.gone), 0) AS gpus_allocatable,
           coalesce(sum(n.gpu_allocated) FILTER (WHERE NOT n.gone), 0) AS gpus_allocated,
           coalesce(sum(n.gpu_allocated_foreign) FILTER (WHERE NOT n.gone), 0) AS gpus_allocated_foreign,
           coalesce(sum(greatest(n.gpu_allocatable - n.gpu_allocated, 0))
               FILTER (WHERE NOT n.gone AND n.ready AND n.schedulable AND c.online), 0) AS gpus_free
    FROM nodes n WHERE n.cluster = c.name
) s ON true
LEFT JOIN LATERAL (
    SELECT count(DISTINCT w.job_id) AS running_jobs, count(*) AS running_workers
    FROM workers w WHERE w.cluster = c.name AND w.active
) w ON true"""

_SUMMARY_COLUMNS = (
    "s.nodes_total, s.nodes_online, s.gpus_total, s.gpus_allocatable, s.gpus_allocated, "
    "s.gpus_allocated_foreign, s.gpus_free, w.running_jobs, w.running_workers"
)

CLUSTER_SORTS: dict[str, str] = {
    "name": "c.name",
    "category": "c.category",
    "region": "c.region",
    "runtime": "c.runtime",
    "online": "c.online",
    "last_seen": "c.last_seen",
    "created_at": "c.created_at",
    "nodes": "s.nodes_total",
    "gpus": "s.gpus_total",
    "gpus_free": "s.gpus_free",
    "gpus_allocated": "s.gpus_allocated",
}


def _cluster(row: asyncpg.Record) -> ClusterRow:
    return ClusterRow(
        spec=ClusterSpec(
            name=row["name"],
            runtime=row["runtime"],
            display_name=row["display_name"],
            category=row["category"],
            region=row["region"],
            pod_cidrs=tuple(row["pod_cidrs"]),
            service_cidrs=tuple(row["service_cidrs"]),
            labels=dict(row["labels"]),
            hostpath_allow=tuple(row["hostpath_allow"]),
        ),
        online=row["online"],
        last_seen=row["last_seen"],
        agent_version=row["agent_version"],
        not_enforced=tuple(row["not_enforced"]),
        unmountable=tuple(row["unmountable"]),
        credential_rotated_at=row["credential_rotated_at"],
        last_session_at=row["last_session_at"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _summary(row: asyncpg.Record) -> ClusterSummary:
    total, online = int(row["nodes_total"]), int(row["nodes_online"])
    return ClusterSummary(
        nodes_total=total,
        nodes_online=online,
        nodes_offline=total - online,
        gpus_total=int(row["gpus_total"]),
        gpus_free=int(row["gpus_free"]),
        running_jobs=int(row["running_jobs"]),
        running_workers=int(row["running_workers"]),
        gpus_allocatable=int(row["gpus_allocatable"]),
        gpus_allocated=int(row["gpus_allocated"]),
        gpus_allocated_foreign=int(row["gpus_allocated_foreign"]),
    )


async def insert_cluster(
    conn: Connection, spec: ClusterSpec, credential_hash: bytes, created_by: str
) -> ClusterRow | None:
    """Insert a new cluster; None when the name is taken."""
    row = await conn.fetchrow(
        f"""INSERT INTO clusters AS c (name, display_name, category, region, runtime, pod_cidrs,
                service_cidrs, labels, credential_hash, created_by, hostpath_allow)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11)
            ON CONFLICT (name) DO NOTHING
            RETURNING {_CLUSTER_COLUMNS}""",
        spec.name,
        spec.display_name,
        spec.category,
        spec.region,
        spec.runtime,
        list(spec.pod_cidrs),
        list(spec.service_cidrs),
        spec.labels,
        credential_hash,
        created_by,
        list(spec.hostpath_allow),
    )
    return _cluster(row) if row else None


async def get_cluster(conn: Connection, name: str, *, for_update: bool = False) -> ClusterRow | None:
    lock = " FOR UPDATE" if for_update else ""
    row = await conn.fetchrow(f"SELECT {_CLUSTER_COLUMNS} FROM clusters c WHERE c.name = $1{lock}", name)
    return _cluster(row) if row else None


async def cluster_exists(conn: Connection, name: str) -> bool:
    return bool(await conn.fetchval("SELECT 1 FROM clusters WHERE name = $1", name))


async def lock_cluster_for_ingest(conn: Connection, name: str) -> bool:
    """Hold the cluster row FOR KEY SHARE until the transaction ends, so it cannot be deleted while a
    report for it is applied (what a foreign key would check per node). False when it does not exist."""
    return bool(await conn.fetchval("SELECT 1 FROM clusters WHERE name = $1 FOR KEY SHARE", name))


async def update_cluster_spec(conn: Connection, spec: ClusterSpec) -> ClusterRow:
    row = await conn.fetchrow(
        f"""UPDATE clusters AS c SET display_name = $2, category = $3, region = $4, pod_cidrs = $5,
                service_cidrs = $6, labels = $7::jsonb, hostpath_allow = $8, updated_at = now()
            WHERE c.name = $1 RETURNING {_CLUSTER_COLUMNS}""",
        spec.name,
        spec.display_name,
        spec.category,
        spec.region,
        list(spec.pod_cidrs),
        list(spec.service_cidrs),
        spec.labels,
        list(spec.hostpath_allow),
    )
    assert row is not None, "update_cluster_spec on a cluster that is not locked"
    return _cluster(row)


async def delete_cluster(conn: Connection, name: str) -> None:
    """Delete the cluster and its nodes (worker rows go by ON DELETE CASCADE)."""
    await conn.execute("DELETE FROM nodes WHERE cluster = $1", name)
    await conn.execute("DELETE FROM clusters WHERE name = $1", name)


async def set_credential(conn: Connection, name: str, credential_hash: bytes) -> ClusterRow | None:
    row = await conn.fetchrow(
        f"""UPDATE clusters AS c SET credential_hash = $2, credential_rotated_at = now(), updated_at = now()
            WHERE c.name = $1 RETURNING {_CLUSTER_COLUMNS}""",
        name,
        credential_hash,
    )
    return _cluster(row) if row else None


class CredentialHolder(NamedTuple):
    cluster: str
    credential_hash: bytes
    credential_rotated_at: datetime


async def credential_hash_of(conn: Connection, credential_hash: bytes) -> CredentialHolder | None:
    """The cluster holding this credential hash, if any, with the stored hash and its rotation time."""
    row = await conn.fetchrow(
        "SELECT name, credential_hash, credential_rotated_at FROM clusters WHERE credential_hash = $1",
        credential_hash,
    )
    return (
        CredentialHolder(row["name"], bytes(row["credential_hash"]), row["credential_rotated_at"])
        if row
        else None
    )


@asynccontextmanager
async def agent_kafka_lock(conn: Connection, cluster: str) -> AsyncIterator[None]:
    """Serialise the broker work of one cluster's agent principal (sessions and rotations) across the
    inventory's replicas: a session-level advisory lock, held without a transaction while the caller
    talks to the broker. (The pool's reset on release also unlocks, should ``finally`` never run.)"""
    key = f"rlark-inventory-agent-kafka:{cluster}"
    mark_session_state(conn)  # the pool's reset unlocks it on release, should ``finally`` never run
    await conn.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", key)
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)


async def record_session(conn: Connection, name: str) -> None:
    await conn.execute("UPDATE clusters SET last_session_at = now() WHERE name = $1", name)


class LeaseGrant(NamedTuple):
    """A cluster's agent lease after an attempt to take or renew it: who holds it, its epoch, and how long
    it has left by the database's clock (``held`` says whether the asking holder is the one)."""

    cluster: str
    held: bool
    holder: str
    epoch: int
    expires_in_s: float


async def take_agent_lease(conn: Connection, cluster: str, holder: str, ttl_s: float) -> LeaseGrant:
    """Take or renew ``cluster``'s agent lease for ``holder`` for ``ttl_s`` seconds (ADR 0018).

    One statement, so two agents racing for it are serialised by the row: a renewal by the holder keeps
    the epoch; a lease that expired (``now()`` of this database, never an agent's clock) goes to the asker
    with the epoch plus one; a live lease of another holder is left alone and returned."""
    row = await conn.fetchrow(
        """INSERT INTO agent_leases AS l (cluster, holder, epoch, expires_at)
           VALUES ($1, $2, 1, now() + make_interval(secs => $3))
           ON CONFLICT (cluster) DO UPDATE SET
               epoch = CASE WHEN l.holder = EXCLUDED.holder THEN l.epoch ELSE l.epoch + 1 END,
               holder = EXCLUDED.holder,
               expires_at = EXCLUDED.expires_at
           WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
           RETURNING holder, epoch, extract(epoch FROM expires_at - now())::float8 AS left_s""",
        cluster,
        holder,
        ttl_s,
    )
    if row is None:  # another holder's lease is live
        found = await agent_lease_of(conn, cluster, holder)
        assert found is not None  # the conflicting row exists; clusters are deleted with their leases
        return found
    return LeaseGrant(cluster, row["holder"] == holder, row["holder"], row["epoch"], max(row["left_s"], 0.0))


async def agent_lease_of(conn: Connection, cluster: str, asker: str) -> LeaseGrant | None:
    """``cluster``'s agent lease as it stands (``held``: live and held by ``asker``); None when never taken."""
    row = await conn.fetchrow(
        """SELECT holder, epoch, extract(epoch FROM expires_at - now())::float8 AS left_s
           FROM agent_leases WHERE cluster = $1""",
        cluster,
    )
    if row is None:
        return None
    left = max(row["left_s"], 0.0)
    return LeaseGrant(cluster, row["holder"] == asker and left > 0, row["holder"], row["epoch"], left)


async def release_agent_lease(conn: Connection, cluster: str, holder: str) -> bool:
    """End ``holder``'s lease now (an agent stopping cleanly), so a standby takes over at its next poll;
    the epoch stays (the next holder's is one more). False when ``holder`` did not hold it."""
    done = await conn.execute(
        "UPDATE agent_leases SET expires_at = now() WHERE cluster = $1 AND holder = $2 AND expires_at > now()",
        cluster,
        holder,
    )
    return done.endswith(" 1")


async def record_heartbeat(
    conn: Connection,
    name: str,
    seen_at: datetime,
    agent_version: str,
    *,
    bring_online: bool,
    not_enforced: Sequence[str] = (),
    unmountable: Sequence[str] = (),
) -> tuple[ClusterRow, ClusterRow] | None:
    """Advance ``last_seen`` (never backwards) and optionally set ``online``; return (before, after)."""
    before = await get_cluster(conn, name, for_update=True)
    if before is None:
        return None
    row = await conn.fetchrow(
        f"""UPDATE clusters AS c SET
                last_seen = CASE WHEN c.last_seen IS NULL OR c.last_seen < $2 THEN $2 ELSE c.last_seen END,
                agent_version = CASE WHEN $3 = '' THEN c.agent_version ELSE $3 END,
                online = c.online OR $4,
                not_enforced = $5,
                unmountable = $6
            WHERE c.name = $1 RETURNING {_CLUSTER_COLUMNS}""",
        name,
        seen_at,
        agent_version,
        bring_online,
        list(not_enforced),
        sorted(set(unmountable)),
    )
    assert row is not None
    return before, _cluster(row)


async def mark_offline(conn: Connection, seen_before: datetime) -> list[ClusterRow]:
    """Set ``online = false`` on clusters not seen since ``seen_before``; return the ones changed now.

    Row locks make concurrent sweepers safe: the second one finds the row already offline.
    """
    rows = await conn.fetch(
        f"""UPDATE clusters AS c SET online = false
            WHERE c.online AND (c.last_seen IS NULL OR c.last_seen < $1)
            RETURNING {_CLUSTER_COLUMNS}""",
        seen_before,
    )
    return [_cluster(r) for r in rows]


async def list_clusters(
    conn: Connection, *, sort: str, descending: bool, limit: int, offset: int
) -> tuple[list[tuple[ClusterRow, ClusterSummary]], int]:
    order = f"{CLUSTER_SORTS[sort]} {'DESC' if descending else 'ASC'} NULLS LAST, c.name"
    rows = await conn.fetch(
        f"""SELECT {_CLUSTER_COLUMNS}, {_SUMMARY_COLUMNS}, count(*) OVER () AS total
            FROM clusters c {_SUMMARY_JOINS}
            ORDER BY {order} LIMIT $1 OFFSET $2""",
        limit,
        offset,
    )
    if rows or offset == 0:
        total = int(rows[0]["total"]) if rows else 0
    else:
        total = int(await conn.fetchval("SELECT count(*) FROM clusters"))
    return [(_cluster(r), _summary(r)) for r in rows], total


@dataclass(frozen=True)
class Totals:
    """Every cluster together (the overview): the clusters' summaries summed, jobs counted once."""

    clusters: int
    clusters_online: int
    summary: ClusterSummary


async def totals(conn: Connection) -> Totals:
    """Sums of the per-cluster summaries over all clusters; a job with workers in several clusters
    counts once."""
    row = await conn.fetchrow(
        f"""SELECT count(*) AS clusters, count(*) FILTER (WHERE c.online) AS clusters_online,
                   coalesce(sum(s.nodes_total), 0) AS nodes_total,
                   coalesce(sum(s.nodes_online), 0) AS nodes_online,
                   coalesce(sum(s.gpus_total), 0) AS gpus_total,
                   coalesce(sum(s.gpus_allocatable), 0) AS gpus_allocatable,
                   coalesce(sum(s.gpus_allocated), 0) AS gpus_allocated,
                   coalesce(sum(s.gpus_allocated_foreign), 0) AS gpus_allocated_foreign,
                   coalesce(sum(s.gpus_free), 0) AS gpus_free,
                   (SELECT count(DISTINCT job_id) FROM workers WHERE active) AS running_jobs,
                   (SELECT count(*) FROM workers WHERE active) AS running_workers
            FROM clusters c {_SUMMARY_JOINS}"""
    )
    assert row is not None
    return Totals(int(row["clusters"]), int(row["clusters_online"]), _summary(row))


async def cluster_with_summary(conn: Connection, name: str) -> tuple[ClusterRow, ClusterSummary] | None:
    row = await conn.fetchrow(
        f"SELECT {_CLUSTER_COLUMNS}, {_SUMMARY_COLUMNS} FROM clusters c {_SUMMARY_JOINS} WHERE c.name = $1",
        name,
    )
    return (_cluster(row), _summary(row)) if row else None


# ------------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class NodeRow:
    """A node as the API shows it: its state plus what only the inventory knows."""

    state: NodeState
    cordon_requested: bool | None
    changed_at: datetime
    category: str = ""
    running_workers: int = 0


_NODE_COLUMNS = """n.cluster, n.name, n.ready, n.schedulable, n.gone, n.cordon_requested, n.gpu_count,
    n.gpu_model, n.gpu_allocatable, n.gpu_allocated, n.gpu_allocated_foreign, n.cpu_millis,
    n.cpu_allocatable_millis, n.cpu_allocated_millis, n.memory_bytes, n.memory_allocatable_bytes, n.memory_allocated_bytes,
    n.labels, n.addresses, n.observed_at, n.changed_at"""


def _state(row: asyncpg.Record) -> NodeState:
    return NodeState.model_validate({f: row[f] for f in STATE_FIELDS})


def _node(row: asyncpg.Record) -> NodeRow:
    return NodeRow(
        state=_state(row),
        cordon_requested=row["cordon_requested"],
        changed_at=row["changed_at"],
        category=row.get("category") or "",
        running_workers=int(row.get("running_workers") or 0),
    )


def _document(row: asyncpg.Record) -> NodeDocument:
    return {f: row[f] for f in STATE_FIELDS}


async def node_documents(conn: Connection, cluster: str, names: list[str] | None) -> dict[str, NodeDocument]:
    """Current states of ``names`` in ``cluster`` (every node of it when ``names`` is None)."""
    if names is None:
        rows = await conn.fetch(f"SELECT {_NODE_COLUMNS} FROM nodes n WHERE n.cluster = $1", cluster)
    else:
        rows = await conn.fetch(
            f"SELECT {_NODE_COLUMNS} FROM nodes n WHERE n.cluster = $1 AND n.name = ANY($2::text[])",
            cluster,
            names,
        )
    return {r["name"]: _document(r) for r in rows}


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot encode {type(value).__name__}")


async def upsert_nodes(
    conn: Connection, cluster: str, docs: list[NodeDocument], observed_at: datetime
) -> None:
    """Write changed nodes of one cluster in one statement (insert or replace; gone nodes come back).

    The batch travels as one JSON array that ``jsonb_to_recordset`` turns into rows. A pending cordon
    request is cleared when the reported schedulability is what was asked.
    """
    if not docs:
        return
    batch = json.dumps(
        [{**d, "search": search_text(d["name"], d["addresses"], d["labels"])} for d in docs],
        default=_json_default,
    )
    await conn.execute(
        """INSERT INTO nodes AS n (cluster, name, ready, schedulable, gone, gpu_count, gpu_model,
               gpu_allocatable, gpu_allocated, gpu_allocated_foreign, cpu_millis, cpu_allocatable_millis,
               cpu_allocated_millis, memory_bytes, memory_allocatable_bytes, memory_allocated_bytes, labels,
               addresses, search, observed_at, changed_at)
           SELECT $1, r.name, r.ready, r.schedulable, false, r.gpu_count, r.gpu_model, r.gpu_allocatable,
               r.gpu_allocated, r.gpu_allocated_foreign, r.cpu_millis, r.cpu_allocatable_millis,
               r.cpu_allocated_millis, r.memory_bytes, r.memory_allocatable_bytes, r.memory_allocated_bytes,
               coalesce(r.labels, '{}'::jsonb), coalesce(r.addresses, '[]'::jsonb), r.search, $3, now()
           FROM jsonb_to_recordset($2::text::jsonb) AS r(name text, ready boolean, schedulable boolean,
               gpu_count integer, gpu_model text, gpu_allocatable integer, gpu_allocated integer,
               gpu_allocated_foreign integer, cpu_millis bigint, cpu_allocatable_millis bigint,
               cpu_allocated_millis bigint,
               memory_bytes bigint, memory_allocatable_bytes bigint, memory_allocated_bytes bigint,
               labels jsonb, addresses jsonb, search text)
           ON CONFLICT (cluster, name) DO UPDATE SET
               ready = EXCLUDED.ready, schedulable = EXCLUDED.schedulable, gone = false,
               gpu_count = EXCLUDED.gpu_count, gpu_model = EXCLUDED.gpu_model,
               gpu_allocatable = EXCLUDED.gpu_allocatable, gpu_allocated = EXCLUDED.gpu_allocated,
               gpu_allocated_foreign = EXCLUDED.gpu_allocated_foreign, cpu_millis = EXCLUDED.cpu_millis,
               cpu_allocatable_millis = EXCLUDED.cpu_allocatable_millis,
               cpu_allocated_millis = EXCLUDED.cpu_allocated_millis, memory_bytes = EXCLUDED.memory_bytes,
               memory_allocatable_bytes = EXCLUDED.memory_allocatable_bytes,
               memory_allocated_bytes = EXCLUDED.memory_allocated_bytes, labels = EXCLUDED.labels,
               addresses = EXCLUDED.addresses, search = EXCLUDED.search,
               observed_at = EXCLUDED.observed_at, changed_at = now(),
               cordon_requested = CASE WHEN n.cordon_requested = NOT EXCLUDED.schedulable THEN NULL
                                       ELSE n.cordon_requested END""",
        cluster,
        batch,
        observed_at,
    )


async def touch_nodes(conn: Connection, cluster: str, names: list[str], observed_at: datetime) -> None:
    """Record that unchanged nodes were observed again (no event: ``observed_at`` alone is not news)."""
    if names:
        await conn.execute(
            """UPDATE nodes SET observed_at = $3
               WHERE cluster = $1 AND name = ANY($2::text[]) AND observed_at < $3""",
            cluster,
            names,
            observed_at,
        )


async def mark_gone(
    conn: Connection, cluster: str, present: list[str], observed_at: datetime
) -> list[NodeDocument]:
    """Mark the cluster's nodes missing from a complete observation as gone; return those changed now."""
    rows = await conn.fetch(
        f"""UPDATE nodes AS n SET gone = true, changed_at = now(), observed_at = $3,
                cordon_requested = NULL
            WHERE n.cluster = $1 AND NOT n.gone AND NOT (n.name = ANY($2::text[]))
            RETURNING {_NODE_COLUMNS}""",
        cluster,
        present,
        observed_at,
    )
    return [_document(r) for r in rows]


async def live_node_documents(conn: Connection, cluster: str) -> list[NodeDocument]:
    rows = await conn.fetch(
        f"SELECT {_NODE_COLUMNS} FROM nodes n WHERE n.cluster = $1 AND NOT n.gone", cluster
    )
    return [_document(r) for r in rows]


@dataclass(frozen=True)
class NodeFilter:
    cluster: str | None = None
    status: str | None = None
    category: str | None = None
    selector: dict[str, str] | None = None
    q: str | None = None


_STATUS_CONDITIONS: dict[str, str] = {
    "ready": "NOT n.gone AND n.ready AND n.schedulable",
    "not_ready": "NOT n.gone AND NOT n.ready",
    "cordoned": "NOT n.gone AND NOT n.schedulable",
    "gone": "n.gone",
}

_STATUS_ORDER = "CASE WHEN n.gone THEN 3 WHEN NOT n.ready THEN 2 WHEN NOT n.schedulable THEN 1 ELSE 0 END"

NODE_SORTS: dict[str, str] = {
    "name": "n.name",
    "cluster": "n.cluster",
    "status": _STATUS_ORDER,
    "gpu_count": "n.gpu_count",
    "gpu_free": "greatest(n.gpu_allocatable - n.gpu_allocated, 0)",
    "gpu_allocated": "n.gpu_allocated",
    "gpu_model": "n.gpu_model",
    "cpu": "n.cpu_allocatable_millis",
    "memory": "n.memory_allocatable_bytes",
    "observed_at": "n.observed_at",
    "changed_at": "n.changed_at",
}


def _node_where(flt: NodeFilter, args: list[Any]) -> str:
    """The WHERE clause for ``flt``; appends its parameters to ``args`` (fragments are fixed text)."""
    conditions = ["true"]
    if flt.cluster:
        args.append(flt.cluster)
        conditions.append(f"n.cluster = ${len(args)}")
    if flt.status:
        conditions.append(_STATUS_CONDITIONS[flt.status])
    if flt.category:
        args.append(flt.category)
        conditions.append(f"c.category = ${len(args)}")
    if flt.selector:
        args.append(flt.selector)
        conditions.append(f"n.labels @> ${len(args)}::jsonb")
    if flt.q:
        args.append(flt.q.lower())
        conditions.append(f"strpos(n.search, ${len(args)}) > 0")
    return " AND ".join(conditions)


async def list_nodes(
    conn: Connection, flt: NodeFilter, *, sort: str, descending: bool, limit: int, offset: int
) -> tuple[list[NodeRow], int]:
    """One page of nodes and the number matching, from one snapshot (``page_and_total``).

    The count touches no row data but labels, and the page query can stop early (walking the primary key for
    the default sort)."""
    args: list[Any] = []
    where = _node_where(flt, args)
    direction = "DESC" if descending else "ASC"
    # Ties always break by cluster then name, ascending, so pages are stable whatever the sort.
    order = f"{NODE_SORTS[sort]} {direction}, n.cluster, n.name"
    join = "JOIN clusters c ON c.name = n.cluster"
    rows, total = await page_and_total(
        conn,
        f"{_NODE_COLUMNS}, c.category",
        f"FROM nodes n {join} WHERE {where} ORDER BY {order}",
        f"SELECT count(*) FROM nodes n {join if flt.category else ''} WHERE {where}",
        args,
        limit=limit,
        offset=offset,
    )
    return [_node(r) for r in rows], total


async def get_node(conn: Connection, cluster: str, name: str, *, for_update: bool = False) -> NodeRow | None:
    lock = " FOR UPDATE OF n" if for_update else ""
    row = await conn.fetchrow(
        f"""SELECT {_NODE_COLUMNS}, c.category FROM nodes n JOIN clusters c ON c.name = n.cluster
            WHERE n.cluster = $1 AND n.name = $2{lock}""",
        cluster,
        name,
    )
    return _node(row) if row else None


async def set_cordon_requested(conn: Connection, cluster: str, name: str, requested: bool | None) -> None:
    await conn.execute(
        "UPDATE nodes SET cordon_requested = $3 WHERE cluster = $1 AND name = $2", cluster, name, requested
    )


@dataclass(frozen=True)
class LabelCount:
    key: str
    value: str
    nodes: int


async def label_catalog(conn: Connection, cluster: str | None) -> list[LabelCount]:
    """Every label key and value on nodes that are not gone, with how many nodes carry each pair."""
    rows = await conn.fetch(
        """SELECT l.key, l.value, count(*) AS nodes
           FROM nodes n, jsonb_each_text(n.labels) AS l(key, value)
           WHERE NOT n.gone AND ($1::text IS NULL OR n.cluster = $1)
           GROUP BY l.key, l.value ORDER BY l.key, l.value""",
        cluster,
    )
    return [LabelCount(r["key"], r["value"], int(r["nodes"])) for r in rows]


async def cluster_node_count(conn: Connection, cluster: str) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM nodes WHERE cluster = $1 AND NOT gone", cluster))


async def matching_nodes(conn: Connection, cluster: str, selector: dict[str, str]) -> list[MatchedNode]:
    """Nodes of ``cluster`` (not gone) whose labels contain every pair of ``selector``."""
    rows = await conn.fetch(
        """SELECT name, ready, schedulable, gpu_model, gpu_allocatable, gpu_allocated, gpu_allocated_foreign,
                  greatest(gpu_allocatable - gpu_allocated, 0) AS gpu_free
           FROM nodes WHERE cluster = $1 AND NOT gone AND labels @> $2::jsonb ORDER BY name""",
        cluster,
        selector,
    )
    return [
        MatchedNode(
            r["name"],
            r["ready"],
            r["schedulable"],
            r["gpu_model"],
            int(r["gpu_free"]),
            gpu_allocatable=r["gpu_allocatable"],
            gpu_allocated=r["gpu_allocated"],
            gpu_allocated_foreign=r["gpu_allocated_foreign"],
        )
        for r in rows
    ]


# ----------------------------------------------------------------------------------------------- workers


@dataclass(frozen=True)
class WorkerRow:
    worker_id: str
    job_id: str
    node: str
    phase: str
    reported_at: datetime


async def upsert_worker(
    conn: Connection,
    *,
    cluster: str,
    worker_id: str,
    job_id: str,
    node: str,
    phase: str,
    active: bool,
    reported_at: datetime,
) -> None:
    """Record a worker report unless a newer one for the same worker is already stored."""
    await conn.execute(
        """INSERT INTO workers AS w (cluster, worker_id, job_id, node, phase, active, reported_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (cluster, worker_id) DO UPDATE SET
               job_id = EXCLUDED.job_id,
               node = CASE WHEN EXCLUDED.node = '' THEN w.node ELSE EXCLUDED.node END,
               phase = EXCLUDED.phase, active = EXCLUDED.active, reported_at = EXCLUDED.reported_at
           WHERE w.reported_at <= EXCLUDED.reported_at""",
        cluster,
        worker_id,
        job_id,
        node,
        phase,
        active,
        reported_at,
    )


async def active_workers_on(conn: Connection, cluster: str, node: str) -> list[WorkerRow]:
    rows = await conn.fetch(
        """SELECT worker_id, job_id, node, phase, reported_at FROM workers
           WHERE cluster = $1 AND node = $2 AND active ORDER BY job_id, worker_id""",
        cluster,
        node,
    )
    return [WorkerRow(r["worker_id"], r["job_id"], r["node"], r["phase"], r["reported_at"]) for r in rows]


async def active_worker_count(conn: Connection, cluster: str) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM workers WHERE cluster = $1 AND active", cluster))


async def purge_inactive_workers(conn: Connection, before: datetime) -> int:
    status = await conn.execute("DELETE FROM workers WHERE NOT active AND reported_at < $1", before)
    return int(status.split()[-1])
