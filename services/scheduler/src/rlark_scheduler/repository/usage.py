"""Workers' usage samples (``worker_usage``, issue 19 item 1) and the job's idle-GPU mark.

Raw samples (``step_s`` 0) are folded into per-minute averages (``step_s`` 60) once older than the raw
retention, whole minutes at a time (a sample arriving late for a minute already folded is weighed into it by
``samples``), and minutes are deleted after the retention; ``compact`` does both for
every worker under a transaction-scoped advisory lock (a consumer that finds it taken skips: the next
round compacts).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rlark_contracts.events.agent import WorkerUsage
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.usage import GpuWindow, usage_point

MINUTE_S = 60
_COMPACT_LOCK = 0x7573_6167  # "usag": one compaction at a time


async def insert_samples(conn: Connection, samples: Sequence[WorkerUsage]) -> int:
    """Keep raw samples (a redelivered one is kept once); returns how many were new."""
    rows = []
    for s in samples:
        p = usage_point(s)
        gpus = json.dumps([g.model_dump() for g in s.gpus])
        rows.append(
            (s.worker_id, s.at, s.job_id, p.cpu_cores_used, p.memory_bytes, p.gpu_count, p.gpu_util_pct,
             p.gpu_memory_used_bytes, p.gpu_memory_total_bytes, gpus)
        )  # fmt: skip
    added = await conn.fetchval(
        """WITH new AS (
             INSERT INTO worker_usage (worker_id, step_s, at, job_id, cpu_cores_used, memory_bytes, gpu_count,
                                       gpu_util_pct, gpu_memory_used_bytes, gpu_memory_total_bytes, gpus)
             SELECT w, 0, a, j, c, m, n, u, mu, mt, g::jsonb
               FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::real[], $5::bigint[], $6::int[],
                           $7::real[], $8::bigint[], $9::bigint[], $10::text[]) AS t(w, a, j, c, m, n, u, mu, mt, g)
             ON CONFLICT DO NOTHING RETURNING 1)
           SELECT count(*) FROM new""",
        *([list(col) for col in zip(*rows, strict=True)] if rows else [[]] * 10),
    )
    return int(added or 0)


async def compact(conn: Connection, *, raw_before: datetime, keep_after: datetime) -> bool:
    """Fold raw samples of whole minutes before ``raw_before`` into minute averages and delete minutes
    before ``keep_after``; False when another transaction is compacting."""
    if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _COMPACT_LOCK):
        return False
    await conn.execute(
        """WITH old AS (
             DELETE FROM worker_usage WHERE step_s = 0 AND at < date_trunc('minute', $1::timestamptz)
             RETURNING *)
           INSERT INTO worker_usage AS m (worker_id, step_s, at, job_id, cpu_cores_used, memory_bytes, gpu_count,
                                          gpu_util_pct, gpu_memory_used_bytes, gpu_memory_total_bytes, samples)
           SELECT worker_id, 60, date_trunc('minute', at), min(job_id), avg(cpu_cores_used),
                  avg(memory_bytes)::bigint, max(gpu_count), avg(gpu_util_pct),
                  avg(gpu_memory_used_bytes)::bigint, max(gpu_memory_total_bytes), count(*)
             FROM old GROUP BY worker_id, date_trunc('minute', at)
           ON CONFLICT (worker_id, step_s, at) DO UPDATE SET
             cpu_cores_used = (m.cpu_cores_used * m.samples + EXCLUDED.cpu_cores_used * EXCLUDED.samples)
                              / (m.samples + EXCLUDED.samples),
             memory_bytes = (m.memory_bytes * m.samples + EXCLUDED.memory_bytes * EXCLUDED.samples)
                            / (m.samples + EXCLUDED.samples),
             gpu_count = greatest(m.gpu_count, EXCLUDED.gpu_count),
             gpu_util_pct = CASE WHEN m.gpu_util_pct IS NULL THEN EXCLUDED.gpu_util_pct
                                 WHEN EXCLUDED.gpu_util_pct IS NULL THEN m.gpu_util_pct
                                 ELSE (m.gpu_util_pct * m.samples + EXCLUDED.gpu_util_pct * EXCLUDED.samples)
                                      / (m.samples + EXCLUDED.samples) END,
             gpu_memory_used_bytes = (m.gpu_memory_used_bytes * m.samples
                                      + EXCLUDED.gpu_memory_used_bytes * EXCLUDED.samples)
                                     / (m.samples + EXCLUDED.samples),
             gpu_memory_total_bytes = greatest(m.gpu_memory_total_bytes, EXCLUDED.gpu_memory_total_bytes),
             samples = m.samples + EXCLUDED.samples""",
        raw_before,
    )
    await conn.execute("DELETE FROM worker_usage WHERE step_s = 60 AND at < $1", keep_after)
    return True


async def gpu_window(conn: Connection, job_id: str, attempt: int, since: datetime) -> GpuWindow:
    """The GPU samples of the job's current attempt's workers: their mean utilization since ``since`` and
    when the first of them was taken."""
    row = await conn.fetchrow(
        """SELECT avg(u.gpu_util_pct) FILTER (WHERE u.at >= $3) AS mean, min(u.at) AS first
             FROM worker_usage u JOIN workers w ON w.id = u.worker_id AND w.attempt = $2
            WHERE u.job_id = $1 AND u.gpu_count > 0""",
        job_id,
        attempt,
        since,
    )
    mean = row["mean"] if row is not None else None
    return GpuWindow(None if mean is None else float(mean), row["first"] if row is not None else None)


async def set_gpus_idle_since(conn: Connection, job_id: str, since: datetime | None) -> None:
    await conn.execute("UPDATE jobs SET gpus_idle_since = $2 WHERE id = $1", job_id, since)


async def gpus_idle_since(conn: Connection, job_id: str) -> datetime | None:
    value: datetime | None = await conn.fetchval("SELECT gpus_idle_since FROM jobs WHERE id = $1", job_id)
    return value


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    worker_id: str
    role: str
    index: int
    attempt: int
    at: datetime
    cpu_cores_used: float
    memory_bytes: int
    gpu_count: int
    gpu_util_pct: float | None
    gpu_memory_used_bytes: int
    gpu_memory_total_bytes: int


async def series(conn: Connection, job_id: str, *, since: datetime, step_s: int) -> list[SeriesPoint]:
    """The job's workers' usage since ``since`` averaged in ``step_s`` buckets (raw samples and minute
    averages alike), by worker then time."""
    rows = await conn.fetch(
        """SELECT u.worker_id, w.role, w.index, w.attempt,
                  to_timestamp(floor(extract(epoch FROM u.at) / $3) * $3) AS bucket,
                  avg(u.cpu_cores_used) AS cpu, avg(u.memory_bytes)::bigint AS mem, max(u.gpu_count) AS n,
                  avg(u.gpu_util_pct) AS util, avg(u.gpu_memory_used_bytes)::bigint AS gmu,
                  max(u.gpu_memory_total_bytes) AS gmt
             FROM worker_usage u JOIN workers w ON w.id = u.worker_id
            WHERE u.job_id = $1 AND u.at >= $2
            GROUP BY u.worker_id, w.role, w.index, w.attempt, bucket
            ORDER BY w.attempt, w.role, w.index, bucket""",
        job_id,
        since,
        step_s,
    )
    return [
        SeriesPoint(
            worker_id=r["worker_id"],
            role=r["role"],
            index=r["index"],
            attempt=r["attempt"],
            at=r["bucket"],
            cpu_cores_used=round(float(r["cpu"]), 3),
            memory_bytes=int(r["mem"]),
            gpu_count=int(r["n"]),
            gpu_util_pct=None if r["util"] is None else round(float(r["util"]), 1),
            gpu_memory_used_bytes=int(r["gmu"]),
            gpu_memory_total_bytes=int(r["gmt"]),
        )
        for r in rows
    ]
