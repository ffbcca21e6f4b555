"""``/api/v1/projects``: projects, their members and GPU quotas (issue 20 item 1, ADR 0020).

Admins create, change and delete projects; a user lists and reads only the projects she belongs to (any
other is "not found", never "forbidden"). A quota is checked by ``domain.quotas.ProjectQuota``: a refused
one is a 422 naming each offending field (``quota.clusters["gpu-a"]``), and nothing is written. The gateway
audits every change; a quota change reaches the placement loop at once (a ``quotas`` change row), whose
admission then keeps each project within its quota plus borrowing limit (ADR 0020). Each change also puts the
project as it now is in the outbox, in the change's transaction: ``scheduler.project.changed.v1`` on
``scheduler.projects`` (``deleted`` for a removal).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

import asyncpg
from fastapi import APIRouter, Response
from pydantic import BaseModel, Field, StringConstraints
from rlark_contracts.events.scheduler import ProjectChanged
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.http import AdminDep, CallerDep
from rlark_platform.messaging.outbox import add_event
from rlark_platform.openapi import error_responses

from rlark_scheduler.domain.quotas import ProjectId, ProjectQuota, QuotaError
from rlark_scheduler.envelopes import Meta, envelope
from rlark_scheduler.repository import projects as repo

USERNAME = r"^[a-z][a-z0-9._-]{0,63}$"
"""The gateway's user name rule (members are named, not checked against the gateway's accounts)."""
_USERNAME = re.compile(USERNAME)
MAX_MEMBERS = 1000


Name = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""A cluster or GPU model name: printable (PostgreSQL text holds no NUL), at most a DNS name long."""


class QuotaIn(BaseModel):
    gpus: int = Field(description="GPUs the project may hold overall, in every cluster")
    clusters: dict[Name, int] = Field(
        default_factory=dict, max_length=1000, description="GPUs per cluster (cluster → GPUs)"
    )
    models: dict[Name, int] = Field(
        default_factory=dict, max_length=1000, description="GPUs per GPU model (model → GPUs)"
    )
    borrowing_limit: int = Field(0, description="GPUs beyond the quota it may use while they are idle")
    max_priority: int | None = Field(
        None,
        ge=-100,
        le=100,
        description="The highest spec.priority the project's jobs may ask (-100..100); null: no cap. "
        "A job asking more is refused at submission (422 priority_above_cap at spec.priority)",
    )


class MembersIn(BaseModel):
    members: list[str] = Field(
        max_length=MAX_MEMBERS, description="User names; the list replaces the old one"
    )


class ProjectIn(BaseModel):
    name: str = Field(description="1-63 lower-case letters, digits and '-'")
    description: str = Field("", max_length=500, pattern=r"^[^\x00]*$")
    members: list[str] = Field(default_factory=list, max_length=MAX_MEMBERS)
    quota: QuotaIn


class UsageOut(BaseModel):
    gpus: int = Field(description="GPUs the project's jobs hold now, in every cluster")
    clusters: dict[str, int] = Field(description="GPUs held per cluster")
    models: dict[str, int] = Field(description="GPUs held per GPU model, as inventory reports each node's")
    running_jobs: int = Field(
        description="The project's jobs holding capacity (Scheduled, Starting, Running)"
    )
    waiting_jobs: int = Field(description="The project's Pending jobs")


class ProjectOut(BaseModel):
    name: str
    description: str
    members: list[str]
    quota: QuotaIn
    usage: UsageOut
    created_at: datetime
    updated_at: datetime
    updated_by: str


class ProjectList(BaseModel):
    items: list[ProjectOut]


def _usage(load: repo.ProjectLoad) -> UsageOut:
    clusters: dict[str, int] = {}
    models: dict[str, int] = {}
    for (cluster, model), gpus in load.usage.pools.items():
        clusters[cluster] = clusters.get(cluster, 0) + gpus
        if model:
            models[model] = models.get(model, 0) + gpus
    return UsageOut(
        gpus=load.usage.total,
        clusters=clusters,
        models=models,
        running_jobs=load.running_jobs,
        waiting_jobs=load.waiting_jobs,
    )


async def _outs(conn: Connection, rows: list[repo.ProjectRow]) -> list[ProjectOut]:
    loads = await repo.project_loads(conn, [row.name for row in rows])
    return [_out(row, loads[row.name]) for row in rows]


def _out(row: repo.ProjectRow, load: repo.ProjectLoad) -> ProjectOut:
    q = row.quota
    return ProjectOut(
        name=row.name,
        description=row.description,
        members=list(row.members),
        quota=QuotaIn(
            gpus=q.gpus,
            clusters=dict(q.clusters),
            models=dict(q.models),
            borrowing_limit=q.borrowing_limit,
            max_priority=row.max_priority,
        ),
        usage=_usage(load),
        created_at=row.created_at,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


def _quota(name: str, body: QuotaIn, prefix: str = "quota.") -> ProjectQuota:
    try:
        return ProjectQuota(
            project=ProjectId(name),
            gpus=body.gpus,
            clusters=body.clusters,
            models=body.models,
            borrowing_limit=body.borrowing_limit,
        )
    except QuotaError as exc:
        first = exc.problems[0].field
        raise ApiError(
            422, "invalid_quota", str(exc), "name" if first == "project" else prefix + first
        ) from exc


def _members(members: list[str]) -> list[str]:
    for index, member in enumerate(members):
        if not _USERNAME.fullmatch(member):
            raise ApiError(
                422, "invalid_member", f"{member!r} is not a user name ({USERNAME})", f"members[{index}]"
            )
    return sorted(set(members))


async def _published(conn: Connection, name: str, by: str) -> repo.ProjectRow | None:
    """The project as this transaction leaves it, put in the outbox (``deleted`` when it is gone)."""
    row = await repo.get_project(conn, name)
    at = row.updated_at if row is not None else await conn.fetchval("SELECT now()")
    if row is None:
        changed = ProjectChanged(project=name, gpus=0, deleted=True, by=by, at=at)
    else:
        q = row.quota
        changed = ProjectChanged(
            project=name,
            gpus=q.gpus,
            clusters=dict(q.clusters),
            models=dict(q.models),
            borrowing_limit=q.borrowing_limit,
            max_priority=row.max_priority,
            members=list(row.members),
            by=by,
            at=at,
        )
    await add_event(conn, envelope(changed, name, Meta.from_request()))
    return row


def _not_found(name: str) -> ApiError:
    return ApiError(404, "project_not_found", f'no project "{name}"', "name")


def build_projects_router(pool: asyncpg.Pool) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["projects"], responses=error_responses(401))

    @router.get("/projects", response_model=ProjectList)
    async def list_projects(caller: CallerDep) -> ProjectList:
        """Every project for an admin; the projects she belongs to for a user."""
        async with pool.acquire() as conn:
            rows = await repo.list_projects(conn, None if caller.is_admin else caller.user)
            return ProjectList(items=await _outs(conn, rows))

    @router.get("/projects/{name}", response_model=ProjectOut, responses=error_responses(404))
    async def show_project(name: str, caller: CallerDep) -> ProjectOut:
        async with pool.acquire() as conn:
            row = await repo.get_project(conn, name)
            if row is None or not (caller.is_admin or caller.user in row.members):
                raise _not_found(name)
            return (await _outs(conn, [row]))[0]

    @router.post(
        "/projects", status_code=201, response_model=ProjectOut, responses=error_responses(403, 409, 422)
    )
    async def create_project(body: ProjectIn, caller: AdminDep) -> ProjectOut:
        quota, members = _quota(body.name, body.quota), _members(body.members)
        async with pool.acquire() as conn:
            async with conn.transaction():
                if not await repo.create_project(
                    conn, quota, body.description, members, caller.user, max_priority=body.quota.max_priority
                ):
                    raise ApiError(409, "project_exists", f'project "{body.name}" exists', "name")
                row = await _published(conn, body.name, caller.user)
            assert row is not None
            return (await _outs(conn, [row]))[0]

    @router.put("/projects/{name}/quota", response_model=ProjectOut, responses=error_responses(403, 404, 422))
    async def set_quota(name: str, body: QuotaIn, caller: AdminDep) -> ProjectOut:
        quota = _quota(name, body, prefix="")
        async with pool.acquire() as conn:
            async with conn.transaction():
                if not await repo.set_quota(conn, quota, caller.user, max_priority=body.max_priority):
                    raise _not_found(name)
                row = await _published(conn, name, caller.user)
            assert row is not None
            return (await _outs(conn, [row]))[0]

    @router.put(
        "/projects/{name}/members", response_model=ProjectOut, responses=error_responses(403, 404, 422)
    )
    async def set_members(name: str, body: MembersIn, caller: AdminDep) -> ProjectOut:
        members = _members(body.members)
        async with pool.acquire() as conn:
            async with conn.transaction():
                if not await repo.set_members(conn, name, members, caller.user):
                    raise _not_found(name)
                row = await _published(conn, name, caller.user)
            assert row is not None
            return (await _outs(conn, [row]))[0]

    @router.delete("/projects/{name}", status_code=204, responses=error_responses(403, 404))
    async def delete_project(name: str, caller: AdminDep) -> Response:
        async with pool.acquire() as conn, conn.transaction():
            if not await repo.delete_project(conn, name):
                raise _not_found(name)
            await _published(conn, name, caller.user)
        return Response(status_code=204)

    return router
