"""The ``workers`` table: each placed worker and what its agent reported; the allocations that every
job holding capacity holds (what the placement loop's model is rebuilt from).

Every attempt's workers stay (ADR 0014); "a job's workers" are those of its current attempt
(``jobs.attempt``) unless a function says otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.jobs import WorkerFacts
from rlark_scheduler.repository.jobs import HOLDING_VALUES


@dataclass(frozen=True)
class WorkerRow:
    facts: WorkerFacts
    job_id: str
    virtual_ip: str | None
    updated_at: datetime


_WORKER_COLUMNS = """id, job_id, role, index, rank, is_header, cluster, node, gpus, virtual_ip, address,
    phase, exit_code, reason, ray_joined, present, updated_at, attempt"""


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
        attempt=row["attempt"],
    )


async def insert_workers(
    conn: Connection, workers_by_job: Mapping[str, Sequence[WorkerFacts]], now: datetime
) -> None:
    """The workers of each job (its id → its workers), in one pipelined round trip."""
    await conn.executemany(
        """INSERT INTO workers (id, job_id, role, index, rank, is_header, cluster, node, gpus, updated_at,
                               attempt)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)""",
        [
            (
                w.worker_id,
                job_id,
                w.role,
                w.index,
                w.rank,
                w.is_header,
                w.cluster,
                w.node,
                w.gpus,
                now,
                w.attempt,
            )
            for job_id, workers in workers_by_job.items()
            for w in workers
        ],
    )


def _row(r: asyncpg.Record) -> WorkerRow:
    return WorkerRow(_worker(r), r["job_id"], r["virtual_ip"], r["updated_at"])


async def workers_of(conn: Connection, job_id: str, attempt: int | None = None) -> list[WorkerRow]:
    """The workers of ``attempt`` of the job (its current attempt when None), in rank order."""
    rows = await conn.fetch(
        f"""SELECT {_WORKER_COLUMNS} FROM workers
             WHERE job_id = $1
               AND attempt = COALESCE($2::integer, (SELECT attempt FROM jobs WHERE id = $1))
             ORDER BY rank""",  # noqa: S608
        job_id,
        attempt,
    )
    return [_row(r) for r in rows]


async def earlier_attempts_present(conn: Connection, job_id: str) -> int:
    """Workers of the job's earlier attempts that their agent has not reported ended yet."""
    count = await conn.fetchval(
        """SELECT count(*) FROM workers w JOIN jobs j ON j.id = w.job_id
            WHERE w.job_id = $1 AND w.attempt < j.attempt AND w.present""",
        job_id,
    )
    return int(count)


async def get_worker(conn: Connection, worker_id: str) -> WorkerRow | None:
    row = await conn.fetchrow(f"SELECT {_WORKER_COLUMNS} FROM workers WHERE id = $1", worker_id)  # noqa: S608
    return _row(row) if row else None


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
    """Forget the current attempt's workers (never created: the placement is given back)."""
    await conn.execute(
        "DELETE FROM workers WHERE job_id = $1 AND attempt = (SELECT attempt FROM jobs WHERE id = $1)", job_id
    )


async def allocations(
    conn: Connection, clusters: Sequence[str] | None = None
) -> dict[str, list[tuple[tuple[str, str], int]]]:
    """What every job that holds capacity holds: job id → [((cluster, node), gpus)]; only what it
    holds in ``clusters`` when given."""
    rows = await conn.fetch(
        """SELECT w.job_id, w.cluster, w.node, w.gpus FROM workers w JOIN jobs j ON j.id = w.job_id
            WHERE j.status = ANY($1::text[]) AND w.attempt = j.attempt AND ($2::text[] IS NULL OR w.cluster = ANY($2::text[]))
            ORDER BY w.job_id, w.rank""",
        HOLDING_VALUES,
        None if clusters is None else list(clusters),
    )
    held: dict[str, list[tuple[tuple[str, str], int]]] = {}
    for r in rows:
        held.setdefault(r["job_id"], []).append(((r["cluster"], r["node"]), r["gpus"]))
    return held
