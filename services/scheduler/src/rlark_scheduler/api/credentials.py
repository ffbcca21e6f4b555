"""``POST /api/v1/workers/{worker_id}/credentials``: what a placed worker needs that no event may carry
(issue 31, ADR 0022).

Only an agent reaches it: the gateway checks the agent's token (and that its cluster's credential was not
rotated since), then signs the call as ``Caller(<cluster>, Role.AGENT)`` — it never signs that role for a
user, and no user route is forwarded here. The worker must be placed on the caller's cluster (another
cluster's worker is 404, as an unknown one) and belong to its job's current attempt while the job has not
ended (else 409): a token is never handed out for a worker that can no longer start.

The answer holds the attempt's Ray token (``rlark_platform.identity.ray_token``), derived again on each
call and never stored, and the named secrets the worker's role gets, resolved now to whose they are (the
owner's, else the job's project's; a secret deleted since the submission is 404 naming it). Nothing of it is
logged. ``Cache-Control: no-store``.
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

from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import projects as projects_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import workers as workers_repo


class SecretRefOut(BaseModel):
    scope: str
    owner: str
    name: str


class WorkerCredentials(BaseModel):
    worker_id: str
    job_id: str
    attempt: int
    ray_token: str
    """The attempt's Ray authentication token: every worker of the attempt gets the same one."""
    secrets: list[SecretRefOut] = []
    """The named secrets the worker gets, resolved now (the owner's, else the job's project's): the gateway
    asks the keys service for their values (ADR 0025)."""


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
            spec = JobDocument.model_validate(job.spec).spec
            role = next(r for r in spec.tasks if r.name == row.facts.role)
            names = role.secret_names()
            members = [p.name for p in await projects_repo.list_projects(conn, job.owner)] if names else []
            charged = spec.project if spec.project in members else None
            owners = await read_models.secret_owners(conn, job.owner, charged) if names else {}
        missing = [name for name in names if name not in owners]
        if missing:
            raise ApiError(
                404, "secret_not_found", text("secret_gone", name=missing[0], owner=job.owner), "secrets"
            )
        response.headers["Cache-Control"] = "no-store"
        return WorkerCredentials(
            worker_id=worker_id,
            job_id=job.id,
            attempt=job.attempt,
            ray_token=ray_token(internal_secret, job.id, job.attempt),
            secrets=[SecretRefOut(scope=owners[n][0], owner=owners[n][1], name=n) for n in names],
        )

    return router
