"""``GET /api/v1/jobs/{id}/usage``: each worker's CPU, memory and GPU use over time (issue 19 item 1).

Visible like the job itself (its owner and admins; anyone else 404). ``since`` and ``step`` are bounded
seconds (out of bounds: 422 naming the field); each worker's samples — raw within the raw retention,
minute averages before it (ADR 0017) — are averaged into ``step``-second buckets.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Annotated

import asyncpg
from fastapi import APIRouter, Query
from pydantic import BaseModel
from rlark_platform.http import CallerDep
from rlark_platform.openapi import error_responses

from rlark_scheduler.handlers.lifecycle import visible
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import usage as usage_repo

MAX_SINCE_S = 7 * 86400


class UsagePointOut(BaseModel):
    at: datetime
    cpu_cores_used: float
    memory_bytes: int
    gpu_count: int
    gpu_util_pct: float | None
    """The mean over the worker's GPUs; null when it holds none (or its agent cannot see them)."""
    gpu_memory_used_bytes: int
    gpu_memory_total_bytes: int


class WorkerUsageSeries(BaseModel):
    worker_id: str
    role: str
    index: int
    attempt: int
    points: list[UsagePointOut]


class JobUsage(BaseModel):
    job_id: str
    since: datetime
    step_s: int
    workers: list[WorkerUsageSeries]


def build_usage_router(pool: asyncpg.Pool) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=error_responses(401))

    @router.get("/jobs/{job_id}/usage", response_model=JobUsage, responses=error_responses(404))
    async def usage(
        job_id: str,
        caller: CallerDep,
        since: Annotated[int, Query(ge=60, le=MAX_SINCE_S, description="Seconds back from now")] = 3600,
        step: Annotated[int, Query(ge=15, le=86400, description="Seconds per averaged point")] = 60,
    ) -> JobUsage:
        """The job's workers' usage (every attempt's), one series per worker in ``step``-second points."""
        start = datetime.now(UTC) - timedelta(seconds=since)
        async with pool.acquire() as conn:
            job = visible(await jobs_repo.get_job(conn, job_id), caller)
            points = await usage_repo.series(conn, job.id, since=start, step_s=step)
        workers = [
            WorkerUsageSeries(
                worker_id=first.worker_id,
                role=first.role,
                index=first.index,
                attempt=first.attempt,
                points=[UsagePointOut(**_fields(p)) for p in [first, *rest]],
            )
            for _, group in groupby(points, key=lambda p: p.worker_id)
            for first, *rest in [list(group)]
        ]
        return JobUsage(job_id=job.id, since=start, step_s=step, workers=workers)

    return router


def _fields(p: usage_repo.SeriesPoint) -> dict[str, object]:
    return {name: getattr(p, name) for name in UsagePointOut.model_fields}
