"""``POST /api/v1/workers/{worker_id}/credentials``: what a placed worker needs that no event may carry
(issue 31, ADR 0022).

Only an agent reaches it: the gateway checks the agent's token (and that its cluster's credential was not
rotated since), then signs the call as ``Caller(<cluster>, Role.AGENT)`` — it never signs that role for a
user, and no user route is forwarded here. The worker must be placed on the caller's cluster (another
cluster's worker is 404, as an unknown one) and belong to its job's current attempt while the job has not
ended (else 409): a token is never handed out for a worker that can no longer start.

The answer holds the attempt's Ray token (``rlark_platform.identity.ray_token``), derived again on each
call and never stored; nothing of it is logged. ``Cache-Control: no-store``.
"""

from __future__ import annotations

import asyncpg
from fastapi import APIRouter, Response
from pydantic import BaseModel
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError
from rlark_platform.http import CallerDep
from rlark_platform.identity import Role, ray_token
from rlark_platform.openapi import error_responses

from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import workers as workers_repo


class WorkerCredentials(BaseModel):
    worker_id: str
    job_id: str
    attempt: int
    ray_token: str
    """The attempt's Ray authentication token: every worker of the attempt gets the same one."""


def build_credentials_router(pool: asyncpg.Pool, internal_secret: str) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["agents"], responses=error_responses(401))

    @router.post(
        "/workers/{worker_id}/credentials",
        response_model=WorkerCredentials,
        responses=error_responses(403, 404, 409),
    )
    async def credentials(worker_id: str, caller: CallerDep, response: Response) -> WorkerCredentials:
        """A placed worker's credentials, for the agent of its cluster only."""
        if caller.role is not Role.AGENT:
            raise ApiError(403, "agent_only", text("agent_only"))
        async with pool.acquire() as conn:
            row = await workers_repo.get_worker(conn, worker_id)
            job = await jobs_repo.get_job(conn, row.job_id) if row is not None else None
        if row is None or job is None or row.facts.cluster != caller.user:
            raise ApiError(404, "worker_not_found", text("worker_not_found", worker=worker_id))
        if job.status.terminal or row.facts.attempt != job.attempt:
            raise ApiError(
                409,
                "worker_ended",
                text("worker_ended", worker=worker_id, job=job.id, status=job.status.value),
            )
        response.headers["Cache-Control"] = "no-store"
        return WorkerCredentials(
            worker_id=worker_id,
            job_id=job.id,
            attempt=job.attempt,
            ray_token=ray_token(internal_secret, job.id, job.attempt),
        )

    return router
