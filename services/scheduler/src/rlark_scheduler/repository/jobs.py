"""The ``jobs`` table: the job rows, their status and pending explanation, holds, keys, idempotency."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from rlark_platform.db.pages import TOTAL, page_and_total
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.jobs import HOLDING, TERMINAL, JobStatus

HOLDING_VALUES = [status.value for status in HOLDING]
"""The statuses of jobs that hold capacity, as stored (a query parameter)."""


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
    attempt: int = 1
    restarts: int = 0
    restart_at: datetime | None = None

    @property
    def not_before(self) -> datetime | None:
        """When the placement loop may place this Pending job: the later of its address hold and its
        restart's wait (ADR 0014); None: now."""
        holds = [t for t in (self.hold_until, self.restart_at) if t is not None]
        return max(holds) if holds else None

    @property
    def project(self) -> str:
        """The project the job is charged to (``spec.project``); "" for none."""
        return str(self.spec.get("spec", {}).get("project") or "")

    @property
    def facts(self) -> JobFacts:
        return JobFacts(self.project, self.priority, self.submitted_seq, self.scheduled_at)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the placement loop keeps of each job it holds or queues (projects, fair share, preemption)."""

    project: str
    """``spec.project``; "" for none."""
    priority: int
    submitted_seq: int
    placed_at: datetime | None
    """When its current attempt was placed (``scheduled_at``); None before."""


_JOB_COLUMNS = """id, owner, name, spec, spec_yaml, warnings, status, reason, details, priority,
    submitted_seq, network_domain, domain_cidr, address_request_id, hold_until, pending, ssh_key_ids,
    ssh_key_names, ssh_public_keys, exit_code, ray_nodes_joined, ray_nodes_expected, created_at,
    updated_at, scheduled_at, started_at, ended_at, attempt, restarts, restart_at"""


def _job(row: asyncpg.Record | Mapping[str, Any]) -> JobRow:
    data = dict(row)
    data.pop(TOTAL, None)
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


async def get_jobs(conn: Connection, job_ids: Sequence[str], *, for_update: bool = False) -> list[JobRow]:
    """The jobs of ``job_ids`` that exist; ``for_update`` locks their rows, in id order (as every batch
    that locks several jobs does, so two never wait on each other)."""
    lock = " ORDER BY id FOR UPDATE" if for_update else ""
    rows = await conn.fetch(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ANY($1::text[]){lock}",  # noqa: S608
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
    rows, total = await page_and_total(
        conn,
        _JOB_COLUMNS,
        f"FROM jobs{clause} ORDER BY created_at DESC, submitted_seq DESC",
        f"SELECT count(*) FROM jobs{clause}",  # noqa: S608 - fixed text, values are parameters
        params,
        limit=page_size,
        offset=(page - 1) * page_size,
    )
    return [_job(r) for r in rows], total


@dataclass(frozen=True)
class NewStatus:
    """One status change of a job's row (see :func:`set_statuses`)."""

    job_id: str
    status: JobStatus
    reason: str
    details: dict[str, Any]
    exit_code: int | None = None


_TERMINAL_VALUES = sorted(s.value for s in TERMINAL)


async def set_statuses(conn: Connection, changes: Sequence[NewStatus], now: datetime) -> None:
    """Move each job to its status, in the order given, in one pipelined round trip; the time columns of
    the states a job enters are set once."""
    if not changes:
        return
    await conn.executemany(
        """UPDATE jobs SET status = $2, reason = $3, details = $4,
               exit_code = COALESCE($5, exit_code), updated_at = $6,
               pending = CASE WHEN $2 = 'Pending' THEN pending ELSE NULL END,
               scheduled_at = CASE WHEN $2 = 'Scheduled' THEN $6 ELSE scheduled_at END,
               started_at = CASE WHEN $2 = 'Running' AND started_at IS NULL THEN $6 ELSE started_at END,
               ended_at = CASE WHEN $2 = ANY($7::text[]) THEN $6 ELSE ended_at END
         WHERE id = $1""",
        [
            (c.job_id, c.status.value, c.reason, c.details, c.exit_code, now, _TERMINAL_VALUES)
            for c in changes
        ],
    )


async def set_pending_reasons(
    conn: Connection, reasons: Sequence[tuple[str, dict[str, Any], str]], now: datetime
) -> set[str]:
    """Store Pending jobs' explanations (job id, pending view, message) in one statement: the ids of the
    jobs whose row changed (others are not Pending any more, or already said exactly that)."""
    if not reasons:
        return set()
    rows = await conn.fetch(
        """UPDATE jobs SET pending = r.pending::jsonb, reason = r.message, updated_at = $4
             FROM unnest($1::text[], $2::text[], $3::text[]) AS r(id, pending, message)
            WHERE jobs.id = r.id AND jobs.status = 'Pending'
              AND (jobs.reason IS DISTINCT FROM r.message OR jobs.pending IS DISTINCT FROM r.pending::jsonb)
           RETURNING jobs.id""",
        [job_id for job_id, _, _ in reasons],
        [json.dumps(pending) for _, pending, _ in reasons],
        [message for _, _, message in reasons],
        now,
    )
    return {row["id"] for row in rows}


async def set_address_request(conn: Connection, job_id: str, request_id: str | None) -> None:
    await conn.execute("UPDATE jobs SET address_request_id = $2 WHERE id = $1", job_id, request_id)


async def set_network_domain(
    conn: Connection, job_id: str, domain: str | None, request_id: str | None
) -> None:
    """Set a job's network domain and its address request: the placer chose its clusters, and it joins a domain
    only when they span (ADR 0026)."""
    await conn.execute(
        "UPDATE jobs SET network_domain = $2, address_request_id = $3 WHERE id = $1",
        job_id,
        domain,
        request_id,
    )


async def set_domain_cidr(conn: Connection, job_id: str, cidr: str) -> None:
    await conn.execute("UPDATE jobs SET domain_cidr = $2 WHERE id = $1", job_id, cidr)


async def set_hold(conn: Connection, job_id: str, until: datetime | None) -> None:
    await conn.execute("UPDATE jobs SET hold_until = $2 WHERE id = $1", job_id, until)


async def start_attempt(
    conn: Connection, job_id: str, attempt: int, restarts: int, restart_at: datetime | None
) -> None:
    """The job's current attempt is now ``attempt`` (``restarts`` used), not placed before ``restart_at``."""
    await conn.execute(
        "UPDATE jobs SET attempt = $2, restarts = $3, restart_at = $4, ray_nodes_joined = NULL,"
        " ray_nodes_expected = NULL WHERE id = $1",
        job_id,
        attempt,
        restarts,
        restart_at,
    )


async def set_restart_at(conn: Connection, job_id: str, restart_at: datetime | None) -> None:
    await conn.execute("UPDATE jobs SET restart_at = $2 WHERE id = $1", job_id, restart_at)


async def release_holds(conn: Connection, domain: str) -> list[str]:
    """Pending jobs of ``domain`` waiting for free addresses: no longer held; returns their ids. A
    restarting job still waiting for its earlier attempt's workers to end keeps its hold (ADR 0014)."""
    rows = await conn.fetch(
        """UPDATE jobs SET hold_until = NULL
            WHERE status = 'Pending' AND network_domain = $1 AND hold_until IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM workers w
                               WHERE w.job_id = jobs.id AND w.attempt < jobs.attempt AND w.present)
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
        [JobStatus.PENDING.value, *HOLDING_VALUES],
    )
    return [_job(r) for r in rows]


async def holding_jobs_on_cluster(conn: Connection, cluster: str) -> list[JobRow]:
    rows = await conn.fetch(
        f"""SELECT {_JOB_COLUMNS} FROM jobs
             WHERE status = ANY($2::text[])
               AND EXISTS (SELECT 1 FROM workers w WHERE w.job_id = jobs.id AND w.attempt = jobs.attempt
                                                     AND w.cluster = $1)
             ORDER BY submitted_seq FOR UPDATE""",  # noqa: S608
        cluster,
        HOLDING_VALUES,
    )
    return [_job(r) for r in rows]


async def holding_facts(conn: Connection) -> dict[str, JobFacts]:
    """The facts of every job that holds capacity, by job id."""
    rows = await conn.fetch(
        """SELECT id, coalesce(spec -> 'spec' ->> 'project', '') AS project, priority, submitted_seq, scheduled_at
             FROM jobs WHERE status = ANY($1::text[])""",
        HOLDING_VALUES,
    )
    return {
        r["id"]: JobFacts(r["project"], r["priority"], r["submitted_seq"], r["scheduled_at"]) for r in rows
    }


async def typical_runtimes(
    conn: Connection, recent: int = 1000
) -> tuple[dict[str, timedelta], timedelta | None]:
    """How long the ``recent`` last ended jobs ran once placed: the median per job name, and over all of them
    (None without history); an estimate's basis (``domain.forecast``)."""
    rows = await conn.fetch(
        """WITH ended AS (
               SELECT name, ended_at - scheduled_at AS took FROM jobs
                WHERE ended_at IS NOT NULL AND scheduled_at IS NOT NULL AND ended_at >= scheduled_at
                ORDER BY ended_at DESC LIMIT $1)
           SELECT name, percentile_disc(0.5) WITHIN GROUP (ORDER BY took) AS took FROM ended GROUP BY ROLLUP (name)""",
        recent,
    )
    by_name = {r["name"]: r["took"] for r in rows if r["name"] is not None}
    overall = next((r["took"] for r in rows if r["name"] is None), None)
    return by_name, overall
