"""All SQL of the scheduler service. Every function takes the connection first and uses ``$n`` parameters.

Tables (migrations/0001_scheduler.sql): read models of other services' public state (``clusters``,
``nodes``, ``ssh_keys``, ``network_domains``), the scheduler's own ``jobs``, ``workers``,
``job_events`` (the timeline), ``worker_logs``, ``job_outputs``, and ``capacity_changes`` (the queue
of changes the placement loop has not applied to its in-memory model yet).

Dynamic parts of queries (the job list's filters) are assembled only from fixed fragments in this
module; user input always travels as a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from rlark_contracts.messages import Text
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.jobs import HOLDING, JobStatus, WorkerFacts
from rlark_scheduler.domain.tunnels import LinkObservation

CHANGES_CHANNEL = "scheduler_changes"
"""NOTIFY channel that wakes the placement loop (payload unused)."""
ACTIVITY_CHANNEL = "scheduler_job_activity"
"""NOTIFY channel with a job id as payload: something a follower of that job may want happened."""

_HOLDING = [status.value for status in HOLDING]

# ------------------------------------------------------------------------------------------ notifications


async def add_change(conn: Connection, kind: str, key: str) -> None:
    """Queue a change for the placement loop and wake it (NOTIFY is delivered at commit)."""
    await conn.execute("INSERT INTO capacity_changes (kind, key) VALUES ($1, $2)", kind, key)
    await conn.execute("SELECT pg_notify($1, '')", CHANGES_CHANNEL)


async def add_changes(conn: Connection, kind: str, keys: Iterable[str]) -> None:
    keys = list(keys)
    if not keys:
        return
    await conn.execute(
        "INSERT INTO capacity_changes (kind, key) SELECT $1, k FROM unnest($2::text[]) AS k", kind, keys
    )
    await conn.execute("SELECT pg_notify($1, '')", CHANGES_CHANNEL)


async def notify_activity(conn: Connection, job_id: str) -> None:
    await conn.execute("SELECT pg_notify($1, $2)", ACTIVITY_CHANNEL, job_id)


@dataclass(frozen=True)
class Change:
    id: int
    kind: str
    key: str


async def pending_changes(conn: Connection, limit: int) -> list[Change]:
    rows = await conn.fetch("SELECT id, kind, key FROM capacity_changes ORDER BY id LIMIT $1", limit)
    return [Change(r["id"], r["kind"], r["key"]) for r in rows]


async def delete_changes(conn: Connection, ids: Sequence[int]) -> None:
    await conn.execute("DELETE FROM capacity_changes WHERE id = ANY($1::bigint[])", list(ids))


async def clear_changes(conn: Connection) -> None:
    await conn.execute("DELETE FROM capacity_changes")


# ------------------------------------------------------------------------------------------- clusters


@dataclass(frozen=True)
class ClusterRow:
    name: str
    runtime: str
    online: bool
    deleted: bool
    hostpath_allow: tuple[str, ...] = ()


def _cluster(row: asyncpg.Record) -> ClusterRow:
    return ClusterRow(
        row["name"], row["runtime"], row["online"], row["deleted"], tuple(row["hostpath_allow"])
    )


async def get_cluster(conn: Connection, name: str) -> ClusterRow | None:
    row = await conn.fetchrow(
        "SELECT name, runtime, online, deleted, hostpath_allow FROM clusters WHERE name = $1", name
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
) -> ClusterRow | None:
    """Store a cluster's state; returns the previous row (None when new)."""
    previous = await conn.fetchrow(
        "SELECT name, runtime, online, deleted, hostpath_allow FROM clusters WHERE name = $1 FOR UPDATE",
        name,
    )
    await conn.execute(
        """INSERT INTO clusters (name, runtime, online, pod_cidrs, service_cidrs, deleted, hostpath_allow,
               changed_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, now())
           ON CONFLICT (name) DO UPDATE SET runtime = EXCLUDED.runtime, online = EXCLUDED.online,
               pod_cidrs = EXCLUDED.pod_cidrs, service_cidrs = EXCLUDED.service_cidrs,
               deleted = EXCLUDED.deleted, hostpath_allow = EXCLUDED.hostpath_allow, changed_at = now()""",
        name,
        runtime,
        online,
        list(pod_cidrs),
        list(service_cidrs),
        deleted,
        list(hostpath_allow),
    )
    return _cluster(previous) if previous else None


async def offline_clusters(conn: Connection) -> list[str]:
    rows = await conn.fetch("SELECT name FROM clusters WHERE NOT online OR deleted")
    return [r["name"] for r in rows]


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


_NODE_SELECT = """
    SELECT n.cluster, n.name, n.ready, n.schedulable, n.gone, n.gpu_allocatable, n.gpu_allocated,
           n.gpu_allocated_foreign, n.labels, n.addresses,
           COALESCE(w.present_gpus, 0) AS present_gpus, COALESCE(w.held_gpus, 0) AS held_gpus
      FROM nodes n
      LEFT JOIN LATERAL (
          SELECT sum(wk.gpus) FILTER (
                     WHERE wk.present
                       AND (n.observed_at IS NULL OR wk.present_since IS NULL OR wk.present_since <= n.observed_at)
                 ) AS present_gpus,
                 sum(wk.gpus) AS held_gpus
            FROM workers wk JOIN jobs j ON j.id = wk.job_id
           WHERE j.status = ANY($1::text[]) AND wk.cluster = n.cluster AND wk.node = n.name
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
    return [_node(r) for r in await conn.fetch(_NODE_SELECT, _HOLDING)]


async def nodes_of_clusters(conn: Connection, clusters: Sequence[str]) -> list[NodeRow]:
    rows = await conn.fetch(_NODE_SELECT + " WHERE n.cluster = ANY($2::text[])", _HOLDING, list(clusters))
    return [_node(r) for r in rows]


async def nodes_by_key(conn: Connection, keys: Sequence[tuple[str, str]]) -> list[NodeRow]:
    rows = await conn.fetch(
        _NODE_SELECT + " WHERE (n.cluster, n.name) IN (SELECT * FROM unnest($2::text[], $3::text[]))",  # noqa: S608
        _HOLDING,
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
        _HOLDING,
        list(job_ids),
    )
    return [_node(r) for r in rows]


async def node_address(conn: Connection, cluster: str, name: str) -> str:
    """The first address inventory knows for a node ("" when none)."""
    addresses = await conn.fetchval(
        "SELECT addresses FROM nodes WHERE cluster = $1 AND name = $2", cluster, name
    )
    return str(addresses[0]) if addresses else ""


async def known_clusters(conn: Connection, names: Sequence[str]) -> list[ClusterRow]:
    """Clusters among ``names`` that exist (not deleted) as clusters or through their nodes.

    Node and cluster events travel on different topics: a cluster whose nodes arrived first is
    known, and online until its own state says otherwise; until then it allows no hostPath.
    """
    rows = await conn.fetch(
        """SELECT c.name, c.runtime, c.online, c.deleted, c.hostpath_allow FROM clusters c
            WHERE c.name = ANY($1::text[]) AND NOT c.deleted
           UNION ALL
           SELECT DISTINCT n.cluster, 'kubernetes', true, false, '{}'::text[] FROM nodes n
            WHERE n.cluster = ANY($1::text[])
              AND NOT EXISTS (SELECT 1 FROM clusters c WHERE c.name = n.cluster)""",
        list(names),
    )
    return [_cluster(r) for r in rows]


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


# ---------------------------------------------------------------------------------------- net domains


async def upsert_domain(conn: Connection, name: str, cidr: str) -> None:
    await conn.execute(
        """INSERT INTO network_domains (name, cidr) VALUES ($1, $2)
           ON CONFLICT (name) DO UPDATE SET cidr = EXCLUDED.cidr""",
        name,
        cidr,
    )


async def delete_domain(conn: Connection, name: str) -> None:
    await conn.execute("DELETE FROM network_domains WHERE name = $1", name)


async def domains(conn: Connection) -> dict[str, str]:
    """Network domain name → CIDR."""
    rows = await conn.fetch("SELECT name, cidr FROM network_domains ORDER BY name")
    return {r["name"]: r["cidr"] for r in rows}


# ----------------------------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class JobRow:
    id: str
    owner: str
    name: str
    spec: dict[str, Any]
    spec_yaml: str
    warnings: list[dict[str, Any]]
    status: JobStatus
    reason: str
    details: dict[str, Any]
    priority: int
    submitted_seq: int
    network_domain: str | None
    domain_cidr: str | None
    address_request_id: str | None
    hold_until: datetime | None
    pending: dict[str, Any] | None
    ssh_key_ids: list[str]
    ssh_key_names: list[str]
    ssh_public_keys: list[str]
    exit_code: int | None
    ray_nodes_joined: int | None
    ray_nodes_expected: int | None
    created_at: datetime
    updated_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None


_JOB_COLUMNS = """id, owner, name, spec, spec_yaml, warnings, status, reason, details, priority,
    submitted_seq, network_domain, domain_cidr, address_request_id, hold_until, pending, ssh_key_ids,
    ssh_key_names, ssh_public_keys, exit_code, ray_nodes_joined, ray_nodes_expected, created_at,
    updated_at, scheduled_at, started_at, ended_at"""


def _job(row: asyncpg.Record | Mapping[str, Any]) -> JobRow:
    data = dict(row)
    data["status"] = JobStatus(data["status"])
    for name in ("ssh_key_ids", "ssh_key_names", "ssh_public_keys"):
        data[name] = list(data[name])
    return JobRow(**data)


async def insert_job(
    conn: Connection,
    *,
    job_id: str,
    owner: str,
    name: str,
    spec: dict[str, Any],
    spec_yaml: str,
    warnings: list[dict[str, Any]],
    priority: int,
    network_domain: str | None,
    ssh_key_ids: Sequence[str],
    ssh_key_names: Sequence[str],
    ssh_public_keys: Sequence[str],
    now: datetime,
    idempotency_key: str | None = None,
    idempotency_fingerprint: str | None = None,
) -> JobRow:
    """Store a new Pending job. With an idempotency key already used by ``owner``, raises
    ``asyncpg.UniqueViolationError`` on the constraint :data:`IDEMPOTENCY_CONSTRAINT`."""
    row = await conn.fetchrow(
        f"""INSERT INTO jobs (id, owner, name, spec, spec_yaml, warnings, status, reason, priority,
                              network_domain, ssh_key_ids, ssh_key_names, ssh_public_keys,
                              created_at, updated_at, idempotency_key, idempotency_fingerprint)
            VALUES ($1, $2, $3, $4, $5, $6, $7, 'submitted', $8, $9, $10, $11, $12, $13, $13, $14, $15)
            RETURNING {_JOB_COLUMNS}""",  # noqa: S608
        job_id,
        owner,
        name,
        spec,
        spec_yaml,
        warnings,
        JobStatus.PENDING.value,
        priority,
        network_domain,
        list(ssh_key_ids),
        list(ssh_key_names),
        list(ssh_public_keys),
        now,
        idempotency_key,
        idempotency_fingerprint,
    )
    assert row is not None
    return _job(row)


IDEMPOTENCY_CONSTRAINT = "jobs_owner_idempotency_key"
"""The unique (owner, idempotency_key) constraint of ``jobs`` (migration 0004)."""


async def job_by_idempotency_key(conn: Connection, owner: str, key: str) -> tuple[JobRow, str] | None:
    """``owner``'s job submitted with ``key``, and the fingerprint of the document it came with."""
    row = await conn.fetchrow(
        f"""SELECT {_JOB_COLUMNS}, idempotency_fingerprint FROM jobs
            WHERE owner = $1 AND idempotency_key = $2""",  # noqa: S608
        owner,
        key,
    )
    if row is None:
        return None
    data = dict(row)
    fingerprint = str(data.pop("idempotency_fingerprint") or "")
    return _job(data), fingerprint


async def get_job(conn: Connection, job_id: str, *, for_update: bool = False) -> JobRow | None:
    lock = " FOR UPDATE" if for_update else ""
    row = await conn.fetchrow(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = $1{lock}", job_id)  # noqa: S608
    return _job(row) if row else None


async def get_jobs(conn: Connection, job_ids: Sequence[str]) -> list[JobRow]:
    rows = await conn.fetch(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ANY($1::text[])",  # noqa: S608
        list(job_ids),
    )
    return [_job(r) for r in rows]


async def jobs_with_status(conn: Connection, statuses: Sequence[JobStatus]) -> list[JobRow]:
    rows = await conn.fetch(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE status = ANY($1::text[]) ORDER BY submitted_seq",  # noqa: S608
        [s.value for s in statuses],
    )
    return [_job(r) for r in rows]


async def list_jobs(
    conn: Connection,
    *,
    owner: str | None,
    statuses: Sequence[str],
    query: str | None,
    page: int,
    page_size: int,
    ssh_key_id: str | None = None,
) -> tuple[list[JobRow], int]:
    """A page of jobs, newest first, with the total matching the filters."""
    where: list[str] = []
    params: list[Any] = []
    if owner is not None:
        params.append(owner)
        where.append(f"owner = ${len(params)}")
    if statuses:
        params.append(list(statuses))
        where.append(f"status = ANY(${len(params)}::text[])")
    if query:
        params.append("%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        where.append(f"(name ILIKE ${len(params)} OR id ILIKE ${len(params)})")
    if ssh_key_id:
        params.append(ssh_key_id)
        where.append(f"${len(params)} = ANY(ssh_key_ids)")
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    total = await conn.fetchval(f"SELECT count(*) FROM jobs{clause}", *params)  # noqa: S608
    params += [page_size, (page - 1) * page_size]
    rows = await conn.fetch(
        f"SELECT {_JOB_COLUMNS} FROM jobs{clause} ORDER BY created_at DESC, submitted_seq DESC "  # noqa: S608
        f"LIMIT ${len(params) - 1} OFFSET ${len(params)}",
        *params,
    )
    return [_job(r) for r in rows], int(total)


async def set_status(
    conn: Connection,
    job_id: str,
    status: JobStatus,
    reason: str,
    *,
    details: dict[str, Any],
    exit_code: int | None,
    now: datetime,
) -> None:
    """Move a job to ``status``; the time columns of the states it enters are set once."""
    await conn.execute(
        """UPDATE jobs SET status = $2, reason = $3, details = $4,
               exit_code = COALESCE($5, exit_code), updated_at = $6,
               pending = CASE WHEN $2 = 'Pending' THEN pending ELSE NULL END,
               scheduled_at = CASE WHEN $2 = 'Scheduled' THEN $6 ELSE scheduled_at END,
               started_at = CASE WHEN $2 = 'Running' AND started_at IS NULL THEN $6 ELSE started_at END,
               ended_at = CASE WHEN $2 = ANY($7::text[]) THEN $6 ELSE ended_at END
         WHERE id = $1""",
        job_id,
        status.value,
        reason,
        details,
        exit_code,
        now,
        ["Succeeded", "Failed", "Cancelled", "Lost"],
    )


async def set_pending_reason(
    conn: Connection, job_id: str, pending: dict[str, Any], message: str, now: datetime
) -> bool:
    """Store a Pending job's explanation; False when the job is not Pending or nothing changed."""
    row = await conn.fetchval(
        """UPDATE jobs SET pending = $2, reason = $3, updated_at = $4
            WHERE id = $1 AND status = 'Pending' AND (reason IS DISTINCT FROM $3
                  OR pending IS DISTINCT FROM $2::jsonb)
           RETURNING id""",
        job_id,
        pending,
        message,
        now,
    )
    return row is not None


async def set_address_request(conn: Connection, job_id: str, request_id: str | None) -> None:
    await conn.execute("UPDATE jobs SET address_request_id = $2 WHERE id = $1", job_id, request_id)


async def set_domain_cidr(conn: Connection, job_id: str, cidr: str) -> None:
    await conn.execute("UPDATE jobs SET domain_cidr = $2 WHERE id = $1", job_id, cidr)


async def set_hold(conn: Connection, job_id: str, until: datetime | None) -> None:
    await conn.execute("UPDATE jobs SET hold_until = $2 WHERE id = $1", job_id, until)


async def release_holds(conn: Connection, domain: str) -> list[str]:
    """Pending jobs of ``domain`` waiting for free addresses: no longer held; returns their ids."""
    rows = await conn.fetch(
        """UPDATE jobs SET hold_until = NULL
            WHERE status = 'Pending' AND network_domain = $1 AND hold_until IS NOT NULL
           RETURNING id""",
        domain,
    )
    return [r["id"] for r in rows]


async def set_ray_progress(conn: Connection, job_id: str, joined: int, expected: int) -> None:
    await conn.execute(
        "UPDATE jobs SET ray_nodes_joined = $2, ray_nodes_expected = $3 WHERE id = $1",
        job_id,
        joined,
        expected,
    )


async def set_keys(
    conn: Connection,
    job_id: str,
    *,
    key_ids: Sequence[str],
    names: Sequence[str],
    public_keys: Sequence[str],
    now: datetime,
) -> None:
    await conn.execute(
        """UPDATE jobs SET ssh_key_ids = $2, ssh_key_names = $3, ssh_public_keys = $4, updated_at = $5
            WHERE id = $1""",
        job_id,
        list(key_ids),
        list(names),
        list(public_keys),
        now,
    )


async def active_jobs_with_key(conn: Connection, key_id: str) -> list[JobRow]:
    rows = await conn.fetch(
        f"""SELECT {_JOB_COLUMNS} FROM jobs
             WHERE $1 = ANY(ssh_key_ids) AND status = ANY($2::text[]) FOR UPDATE""",  # noqa: S608
        key_id,
        [JobStatus.PENDING.value, *_HOLDING],
    )
    return [_job(r) for r in rows]


async def holding_jobs_on_cluster(conn: Connection, cluster: str) -> list[JobRow]:
    rows = await conn.fetch(
        f"""SELECT {_JOB_COLUMNS} FROM jobs
             WHERE status = ANY($2::text[])
               AND EXISTS (SELECT 1 FROM workers w WHERE w.job_id = jobs.id AND w.cluster = $1)
             ORDER BY submitted_seq FOR UPDATE""",  # noqa: S608
        cluster,
        _HOLDING,
    )
    return [_job(r) for r in rows]


# ------------------------------------------------------------------------------------------- workers


def _worker(row: asyncpg.Record) -> WorkerFacts:
    return WorkerFacts(
        worker_id=row["id"],
        role=row["role"],
        index=row["index"],
        rank=row["rank"],
        is_header=row["is_header"],
        cluster=row["cluster"],
        node=row["node"],
        gpus=row["gpus"],
        phase=row["phase"],
        exit_code=row["exit_code"],
        reason=row["reason"],
        ray_joined=row["ray_joined"],
        present=row["present"],
        address=row["address"],
    )


@dataclass(frozen=True)
class WorkerRow:
    facts: WorkerFacts
    job_id: str
    virtual_ip: str | None
    updated_at: datetime


_WORKER_COLUMNS = """id, job_id, role, index, rank, is_header, cluster, node, gpus, virtual_ip, address,
    phase, exit_code, reason, ray_joined, present, updated_at"""


async def insert_workers(
    conn: Connection, job_id: str, workers: Sequence[WorkerFacts], now: datetime
) -> None:
    await conn.executemany(
        """INSERT INTO workers (id, job_id, role, index, rank, is_header, cluster, node, gpus, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)""",
        [
            (w.worker_id, job_id, w.role, w.index, w.rank, w.is_header, w.cluster, w.node, w.gpus, now)
            for w in workers
        ],
    )


async def workers_of(conn: Connection, job_id: str) -> list[WorkerRow]:
    rows = await conn.fetch(
        f"SELECT {_WORKER_COLUMNS} FROM workers WHERE job_id = $1 ORDER BY rank",  # noqa: S608
        job_id,
    )
    return [WorkerRow(_worker(r), r["job_id"], r["virtual_ip"], r["updated_at"]) for r in rows]


async def get_worker(conn: Connection, worker_id: str) -> WorkerRow | None:
    row = await conn.fetchrow(f"SELECT {_WORKER_COLUMNS} FROM workers WHERE id = $1", worker_id)  # noqa: S608
    return WorkerRow(_worker(row), row["job_id"], row["virtual_ip"], row["updated_at"]) if row else None


async def update_worker(
    conn: Connection, worker: WorkerFacts, now: datetime, reported_at: datetime | None = None
) -> None:
    """``reported_at``: the agent's time of the report (see migration 0002 for why it is kept)."""
    await conn.execute(
        """UPDATE workers SET phase = $2, exit_code = $3, reason = $4, ray_joined = $5, present = $6,
               address = $7, updated_at = $8,
               present_since = CASE WHEN NOT $6 THEN NULL
                                    WHEN present THEN present_since
                                    ELSE $9 END
            WHERE id = $1""",
        worker.worker_id,
        worker.phase,
        worker.exit_code,
        worker.reason,
        worker.ray_joined,
        worker.present,
        worker.address,
        now,
        reported_at,
    )


async def set_virtual_ips(conn: Connection, addresses: Mapping[str, str]) -> None:
    await conn.executemany("UPDATE workers SET virtual_ip = $2 WHERE id = $1", list(addresses.items()))


async def delete_workers(conn: Connection, job_id: str) -> None:
    await conn.execute("DELETE FROM workers WHERE job_id = $1", job_id)


async def allocations(conn: Connection) -> dict[str, list[tuple[tuple[str, str], int]]]:
    """What every job that holds capacity holds: job id → [((cluster, node), gpus)]."""
    rows = await conn.fetch(
        """SELECT w.job_id, w.cluster, w.node, w.gpus FROM workers w JOIN jobs j ON j.id = w.job_id
            WHERE j.status = ANY($1::text[]) ORDER BY w.job_id, w.rank""",
        _HOLDING,
    )
    held: dict[str, list[tuple[tuple[str, str], int]]] = {}
    for r in rows:
        held.setdefault(r["job_id"], []).append(((r["cluster"], r["node"]), r["gpus"]))
    return held


# ---------------------------------------------------------------------------------------- job events


@dataclass(frozen=True)
class EventRow:
    seq: int
    job_id: str
    kind: str
    from_status: str
    to_status: str
    worker_id: str | None
    phase: str | None
    reason: str
    details: dict[str, Any]
    at: datetime


async def reasons_said(conn: Connection, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """How each job's current reason can be said in another language (ADR 0011): the ``said``
    (``{"message_key", "params"}``) or ``parts`` kept by the latest timeline row that wrote that
    reason; jobs whose reason no row keyed are absent."""
    rows = await conn.fetch(
        """SELECT DISTINCT ON (e.job_id) e.job_id, e.details
             FROM job_events e JOIN jobs j ON j.id = e.job_id AND e.reason = j.reason
            WHERE e.job_id = ANY($1::text[]) AND (e.details ? 'said' OR e.details ? 'parts')
            ORDER BY e.job_id, e.seq DESC""",
        list(job_ids),
    )
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        details = row["details"]
        found[row["job_id"]] = {"parts": details["parts"]} if "parts" in details else details["said"]
    return found


async def worker_reasons_said(conn: Connection, job_id: str) -> dict[str, dict[str, Any]]:
    """Like :func:`reasons_said`, for each worker of ``job_id``: its reason's key and params."""
    rows = await conn.fetch(
        """SELECT DISTINCT ON (e.worker_id) e.worker_id, e.details
             FROM job_events e JOIN workers w ON w.id = e.worker_id AND e.reason = w.reason
            WHERE e.job_id = $1 AND e.kind = 'worker' AND e.details ? 'said'
            ORDER BY e.worker_id, e.seq DESC""",
        job_id,
    )
    return {row["worker_id"]: row["details"]["said"] for row in rows}


async def insert_event(
    conn: Connection,
    job_id: str,
    kind: str,
    *,
    at: datetime,
    from_status: str = "",
    to_status: str = "",
    worker_id: str | None = None,
    phase: str | None = None,
    reason: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """One timeline row. A ``reason`` that is a catalogue sentence keeps its key and params in
    ``details.said`` (``{"message_key", "params"}``, ADR 0011) so clients can say it in their language."""
    if isinstance(reason, Text):
        details = {**(details or {}), "said": reason.wire()}
    await conn.execute(
        """INSERT INTO job_events (job_id, kind, from_status, to_status, worker_id, phase, reason,
                                   details, at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)""",
        job_id,
        kind,
        from_status,
        to_status,
        worker_id,
        phase,
        reason,
        details or {},
        at,
    )


async def events_of(
    conn: Connection, job_id: str, *, after: int = 0, kinds: Sequence[str] = (), limit: int = 1000
) -> list[EventRow]:
    rows = await conn.fetch(
        """SELECT seq, job_id, kind, from_status, to_status, worker_id, phase, reason, details, at
             FROM job_events
            WHERE job_id = $1 AND seq > $2 AND (cardinality($3::text[]) = 0 OR kind = ANY($3::text[]))
            ORDER BY seq LIMIT $4""",
        job_id,
        after,
        list(kinds),
        limit,
    )
    return [EventRow(**dict(r)) for r in rows]


# ---------------------------------------------------------------------------------------------- logs


@dataclass(frozen=True)
class LogRow:
    cursor: int
    worker_id: str
    seq: int
    line: str


async def insert_logs(
    conn: Connection, job_id: str, worker_id: str, first_seq: int, lines: Sequence[str]
) -> int:
    """Store lines ``first_seq, first_seq + 1, ...``; lines already stored are skipped. Returns how
    many were new."""
    result = await conn.execute(
        """INSERT INTO worker_logs (job_id, worker_id, seq, line)
           SELECT $1, $2, $3 + l.n - 1, l.line FROM unnest($4::text[]) WITH ORDINALITY AS l(line, n)
           ON CONFLICT (worker_id, seq) DO NOTHING""",
        job_id,
        worker_id,
        first_seq,
        list(lines),
    )
    return int(result.rsplit(" ", 1)[-1])


async def logs_of(
    conn: Connection,
    job_id: str,
    *,
    worker_id: str | None,
    since_seq: int | None,
    after_cursor: int,
    limit: int,
) -> list[LogRow]:
    rows = await conn.fetch(
        """SELECT cursor, worker_id, seq, line FROM worker_logs
            WHERE job_id = $1 AND ($2::text IS NULL OR worker_id = $2)
              AND ($3::bigint IS NULL OR seq > $3) AND cursor > $4
            ORDER BY cursor LIMIT $5""",
        job_id,
        worker_id,
        since_seq,
        after_cursor,
        limit,
    )
    return [LogRow(r["cursor"], r["worker_id"], r["seq"], r["line"]) for r in rows]


async def last_lines(conn: Connection, worker_id: str, count: int) -> list[str]:
    rows = await conn.fetch(
        "SELECT line FROM worker_logs WHERE worker_id = $1 ORDER BY seq DESC LIMIT $2", worker_id, count
    )
    return [r["line"] for r in reversed(rows)]


# ------------------------------------------------------------------------------------------- outputs


async def upsert_outputs(
    conn: Connection, job_id: str, worker_id: str, files: list[dict[str, Any]], truncated: bool
) -> None:
    await conn.execute(
        """INSERT INTO job_outputs (job_id, worker_id, files, truncated) VALUES ($1, $2, $3, $4)
           ON CONFLICT (job_id, worker_id) DO UPDATE SET files = EXCLUDED.files,
               truncated = EXCLUDED.truncated, listed_at = now()""",
        job_id,
        worker_id,
        files,
        truncated,
    )


async def outputs_of(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT worker_id, files, truncated FROM job_outputs WHERE job_id = $1 ORDER BY worker_id", job_id
    )
    return [{"worker_id": r["worker_id"], "files": r["files"], "truncated": r["truncated"]} for r in rows]


# ------------------------------------------------------------------------------------ tunnel links


async def upsert_tunnel_link(
    conn: Connection,
    *,
    domain: str,
    cluster: str,
    peer: str,
    up: bool,
    last_error: str,
    rtt_ms: float | None,
    bytes_sent: int,
    bytes_received: int,
    at: datetime,
) -> bool:
    """Store one agent's report on one link; ``since`` moves only when the state changes. A report
    older than the stored one changes nothing (returns False)."""
    row = await conn.fetchval(
        """INSERT INTO tunnel_links (domain, cluster, peer, up, since, last_error, rtt_ms, bytes_sent,
                                     bytes_received, reported_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $5)
           ON CONFLICT (domain, cluster, peer) DO UPDATE SET
               since = CASE WHEN tunnel_links.up = EXCLUDED.up THEN tunnel_links.since
                            ELSE EXCLUDED.since END,
               up = EXCLUDED.up, last_error = EXCLUDED.last_error, rtt_ms = EXCLUDED.rtt_ms,
               bytes_sent = EXCLUDED.bytes_sent, bytes_received = EXCLUDED.bytes_received,
               reported_at = EXCLUDED.reported_at
            WHERE tunnel_links.reported_at <= EXCLUDED.reported_at
           RETURNING 1""",
        domain,
        cluster,
        peer,
        up,
        at,
        last_error,
        rtt_ms,
        bytes_sent,
        bytes_received,
    )
    return row is not None


async def delete_tunnel_link(conn: Connection, domain: str, cluster: str, peer: str, at: datetime) -> bool:
    """Forget a closed link, unless a newer report on it arrived first (False: nothing changed)."""
    row = await conn.fetchval(
        """DELETE FROM tunnel_links
            WHERE domain = $1 AND cluster = $2 AND peer = $3 AND reported_at <= $4
           RETURNING 1""",
        domain,
        cluster,
        peer,
        at,
    )
    return row is not None


async def tunnel_links(conn: Connection, domain: str) -> list[LinkObservation]:
    rows = await conn.fetch(
        "SELECT domain, cluster, peer, up, since, last_error, reported_at FROM tunnel_links WHERE domain = $1",
        domain,
    )
    return [
        LinkObservation(
            r["domain"], r["cluster"], r["peer"], r["up"], r["since"], r["last_error"], r["reported_at"]
        )
        for r in rows
    ]


async def tunnel_judged_jobs(conn: Connection, domain: str | None) -> list[str]:
    """Starting/Running jobs whose tunnels need judging: in a domain with a link reported down, or
    carrying a tunnel reason; only ``domain``'s when given."""
    rows = await conn.fetch(
        """SELECT id FROM jobs j
            WHERE status = ANY($1::text[]) AND network_domain IS NOT NULL
              AND ($2::text IS NULL OR network_domain = $2)
              AND (tunnel_reason IS NOT NULL OR EXISTS (
                   SELECT 1 FROM tunnel_links t WHERE t.domain = j.network_domain AND NOT t.up))
            ORDER BY submitted_seq""",
        [JobStatus.STARTING.value, JobStatus.RUNNING.value],
        domain,
    )
    return [r["id"] for r in rows]


async def tunnel_reason(conn: Connection, job_id: str) -> str | None:
    value = await conn.fetchval("SELECT tunnel_reason FROM jobs WHERE id = $1", job_id)
    return None if value is None else str(value)


async def mark_tunnel_reason(conn: Connection, job_id: str, reason: str, now: datetime) -> None:
    """Show ``reason`` as the job's reason, remembering the one it replaces (unless that is an
    earlier tunnel reason still shown)."""
    await conn.execute(
        """UPDATE jobs SET reason_before_tunnel = CASE
                               WHEN tunnel_reason IS NULL OR reason <> tunnel_reason THEN reason
                               ELSE reason_before_tunnel END,
                           reason = $2, tunnel_reason = $2, updated_at = $3
            WHERE id = $1""",
        job_id,
        reason,
        now,
    )


async def clear_tunnel_reason(conn: Connection, job_id: str, now: datetime) -> str:
    """Drop the tunnel reason; the job's earlier reason comes back unless a status change replaced
    it meanwhile. Returns the reason now shown."""
    value = await conn.fetchval(
        """UPDATE jobs SET reason = CASE WHEN reason = tunnel_reason
                                         THEN COALESCE(reason_before_tunnel, '') ELSE reason END,
                           tunnel_reason = NULL, reason_before_tunnel = NULL, updated_at = $2
            WHERE id = $1
           RETURNING reason""",
        job_id,
        now,
    )
    return str(value or "")
