"""``/api/v1/queue``: the waiting jobs in the order rounds try them, and for one of yours where it stands, when
it may start and what would make it fit now (issue 20 item 4; ``domain.forecast``).

Everyone sees every waiting job's position, priority, GPUs and clusters, so a user knows how long the queue
is; only their own jobs (every job for admins) carry id, name, owner and reason, and a project is named only
to its members. Positions follow the round order (priority, then submission); with project quotas a job
waiting for its project's quota is tried in that order too but waits for its project, not its turn
(``waits_for: quota``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from rlark_contracts.messages import Text, text
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.http import CallerDep
from rlark_platform.identity import Caller
from rlark_platform.openapi import error_responses

from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.forecast import (
    Ahead,
    Hint,
    RunningEnd,
    ahead_of,
    estimate_start,
    expected_end,
    fit_hints,
)
from rlark_scheduler.domain.jobs import JobStatus, job_request
from rlark_scheduler.domain.placement import JobRequest
from rlark_scheduler.handlers.lifecycle import visible
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import projects as projects_repo
from rlark_scheduler.repository.capacity import capacity_model
from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.repository.workers import allocations

QUOTA_CODES = ("quota", "borrowing_limit")


class QueuedJob(BaseModel):
    position: int = Field(description="1 for the job rounds try first")
    mine: bool = Field(description="Whether it is the caller's job")
    job_id: str | None = Field(description="Only for your jobs (every job for admins)")
    name: str | None = None
    owner: str | None = None
    project: str | None = Field(None, description="Only when you are a member (or an admin)")
    priority: int
    gpus: int = Field(description="GPUs the whole gang asks for")
    clusters: list[str] = Field(
        description="The clusters its roles name; empty when the scheduler chooses them all"
    )
    any_cluster: bool = Field(
        False, description="Whether the scheduler chooses a cluster for some role (ADR 0026)"
    )
    waiting_since: datetime
    waits_for: str = Field(
        description="capacity | quota (its project's quota or borrowing limit) | hold "
        "(a restart's backoff and teardown, or network addresses)"
    )
    ahead: int = Field(description="Waiting jobs tried before it that ask for one of its clusters")
    reason: str | None = Field(None, description="Why it waits (your jobs only)")


class QueueList(BaseModel):
    items: list[QueuedJob]
    total: int = Field(description="Every waiting job")


class HintOut(BaseModel):
    kind: str = Field(description="cluster | gpus | job_ends | span | domain")
    message: str
    message_key: str
    params: dict[str, Any]


class QueueDetail(BaseModel):
    job: QueuedJob
    jobs_ahead: list[QueuedJob] = Field(description="The waiting jobs tried before it in its clusters")
    estimated_start: datetime | None = Field(
        description="When it is expected to start (the loop's rounds replayed over running jobs' expected "
        "ends); null when unknown or when it waits for quota"
    )
    estimate_basis: str = Field(description="How the estimate was made, or why there is none")
    estimate_basis_said: dict[str, Any] = Field(description="The same as message_key and params (ADR 0011)")
    hints: list[HintOut] = Field(description="What would make it fit now")


def _request(row: JobRow) -> JobRequest | None:
    try:
        return job_request(row.id, JobDocument.model_validate(row.spec).spec, row.submitted_seq)
    except (ValueError, AssertionError):
        return None


def _waits_for(row: JobRow, now: datetime) -> str:
    if (row.pending or {}).get("code") in QUOTA_CODES:
        return "quota"
    if row.not_before is not None and row.not_before > now:
        return "hold"
    return "capacity"


def _order(rows: list[JobRow]) -> list[tuple[JobRow, JobRequest]]:
    pairs = [(row, request) for row in rows if (request := _request(row)) is not None]
    return sorted(pairs, key=lambda p: p[1].queue_key)


def _ahead_counts(ordered: list[tuple[JobRow, JobRequest]]) -> dict[str, int]:
    """Per job, the earlier jobs that may take one of its clusters (one pass; a set union for multi-cluster
    jobs). A job whose clusters the placer chooses may go anywhere (ADR 0026): every earlier job is ahead of
    it, and it is ahead of every later one."""
    seen: dict[str, list[str]] = {}
    anywhere: list[str] = []
    counts: dict[str, int] = {}
    for position, (_, request) in enumerate(ordered):
        clusters = request.clusters
        if not request.named:
            counts[request.job_id] = position
            anywhere.append(request.job_id)
            continue
        if len(clusters) == 1:
            counts[request.job_id] = len(seen.get(clusters[0], ())) + len(anywhere)
        else:
            counts[request.job_id] = len({j for c in clusters for j in seen.get(c, ())}) + len(anywhere)
        for cluster in clusters:
            seen.setdefault(cluster, []).append(request.job_id)
    return counts


def _queued(
    row: JobRow,
    request: JobRequest,
    position: int,
    ahead: int,
    caller: Caller,
    member_of: set[str],
    now: datetime,
) -> QueuedJob:
    shown = caller.is_admin or row.owner == caller.user
    project = request.project or None
    return QueuedJob(
        position=position,
        mine=row.owner == caller.user,
        job_id=row.id if shown else None,
        name=row.name if shown else None,
        owner=row.owner if shown else None,
        project=project if project and (caller.is_admin or project in member_of) else None,
        priority=request.priority,
        gpus=sum(role.replicas * role.gpus_per_worker for role in request.roles),
        clusters=list(request.clusters),
        any_cluster=not request.named,
        waiting_since=row.updated_at if row.attempt > 1 else row.created_at,
        waits_for=_waits_for(row, now),
        ahead=ahead,
        reason=row.reason if shown else None,
    )


def _hint(hint: Hint, owners: dict[str, str], caller: Caller) -> HintOut:
    said: Text
    when = hint.expected_end.isoformat(timespec="minutes") if hint.expected_end else ""
    if hint.kind == "cluster":
        said = text("queue.hint.cluster", role=hint.role, cluster=hint.cluster)
    elif hint.kind in ("span", "domain"):
        said = text(f"queue.hint.{hint.kind}", clusters=hint.cluster, domain=hint.domain)
    elif hint.kind == "gpus":
        said = text("queue.hint.gpus", gpus=hint.gpus_per_worker)
    elif caller.is_admin or owners.get(hint.job_id) == caller.user:
        said = text("queue.hint.job_ends" + ("" if when else ".unknown"), job=hint.job_id, at=when)
    else:
        said = text("queue.hint.other_job_ends" + ("" if when else ".unknown"), at=when)
    return HintOut(kind=hint.kind, message=said.english, **said.wire())


def build_queue_router(pool: asyncpg.Pool) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["queue"], responses=error_responses(401))

    async def snapshot(
        conn: Connection, caller: Caller
    ) -> tuple[list[tuple[JobRow, JobRequest]], dict[str, int], set[str]]:
        rows = await jobs_repo.jobs_with_status(conn, [JobStatus.PENDING])
        member_of = {p.name for p in await projects_repo.list_projects(conn, caller.user)}
        ordered = _order(rows)
        return ordered, _ahead_counts(ordered), member_of

    @router.get("/queue", response_model=QueueList)
    async def list_queue(
        caller: CallerDep,
        mine: Annotated[
            bool, Query(description="Only your jobs (positions stay those of the whole queue)")
        ] = False,
        limit: Annotated[int, Query(ge=1, le=1000, description="At most this many jobs, first first")] = 200,
    ) -> QueueList:
        """Every waiting job in the order rounds try them; others' jobs without id, name, owner or reason."""
        now = datetime.now(UTC)
        async with pool.acquire() as conn:
            ordered, ahead, member_of = await snapshot(conn, caller)
        items = [
            _queued(row, request, position, ahead[request.job_id], caller, member_of, now)
            for position, (row, request) in enumerate(ordered, 1)
            if not mine or row.owner == caller.user
        ]
        return QueueList(items=items[:limit], total=len(ordered))

    @router.get("/queue/{job_id}", response_model=QueueDetail, responses=error_responses(404, 409))
    async def explain(job_id: str, caller: CallerDep) -> QueueDetail:
        """Where your waiting job stands: the jobs ahead of it, its estimated start and what would make it fit now."""
        now = datetime.now(UTC)
        async with pool.acquire() as conn:
            job = visible(await jobs_repo.get_job(conn, job_id), caller)
            if job.status is not JobStatus.PENDING:
                raise ApiError(
                    409,
                    "job_not_waiting",
                    text("job_not_waiting", job=job.id, status=job.status.value),
                    "job_id",
                )
            ordered, ahead_count, member_of = await snapshot(conn, caller)
            position = next((i for i, (row, _) in enumerate(ordered, 1) if row.id == job.id), None)
            request = _request(job)
            if position is None or request is None:
                raise ApiError(
                    409,
                    "job_not_waiting",
                    text("job_not_waiting", job=job.id, status=job.status.value),
                    "job_id",
                )
            # A job whose clusters the placer chooses is judged on every cluster (ADR 0026).
            clusters = request.clusters if request.named else None
            model = await capacity_model(conn, clusters)
            held = await allocations(conn, clusters)
            running_rows = await jobs_repo.get_jobs(conn, sorted(held))
            by_name, overall = await jobs_repo.typical_runtimes(conn)

        def typical(name: str) -> timedelta | None:
            return by_name.get(name, overall)

        rows_by_id = {row.id: row for row, _ in ordered}
        positions = {row.id: i for i, (row, _) in enumerate(ordered, 1)}
        ahead = ahead_of(request, [req for _, req in ordered])
        ahead_out = [
            _queued(
                rows_by_id[a.job_id], a, positions[a.job_id], ahead_count[a.job_id], caller, member_of, now
            )
            for a in ahead
        ]
        running = [RunningEnd(r.id, expected_end(r.scheduled_at, typical(r.name), now)) for r in running_rows]
        me = _queued(job, request, position, ahead_count[job.id], caller, member_of, now)
        if me.waits_for == "quota":
            estimated, basis, hints = None, text("queue.basis.quota"), []
        else:
            plans = [Ahead(a, typical(rows_by_id[a.job_id].name)) for a in ahead]
            estimated = estimate_start(model, request, plans, running, now)
            known = sum(1 for r in running if r.expected_end is not None)
            basis = text("queue.basis", running=len(running), known=known, ahead=len(ahead))
            hints = fit_hints(model, request, running)
        owners = {r.id: r.owner for r in running_rows}
        return QueueDetail(
            job=me,
            jobs_ahead=ahead_out,
            estimated_start=estimated,
            estimate_basis=basis.english,
            estimate_basis_said=basis.wire(),
            hints=[_hint(h, owners, caller) for h in hints],
        )

    return router
