"""Routes of the scheduler API: templates, preview, submit, list, show, cancel, SSH keys, logs, events.

Jobs are visible to their owner and to admins; anyone else gets 404, never 403, so job ids do not
leak. Job documents are read from the raw body (YAML or JSON); every refusal is a 4xx with the
first problem as the main error and all of them in ``details.errors``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal
from urllib.parse import quote

import asyncpg
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from rlark_contracts.messages import text
from rlark_contracts.relay import SERVICE_RAY_DASHBOARD, SERVICE_TENSORBOARD, TOOL_OPEN_PATH
from rlark_contracts.workers import LOCAL_WORKER_USER
from rlark_platform.db import transaction
from rlark_platform.errors import ApiError
from rlark_platform.http import CallerDep
from rlark_platform.identity import Caller
from rlark_platform.openapi import error_responses
from rlark_platform.paging import PageNumber, PageSize, cursor
from sse_starlette import EventSourceResponse, ServerSentEvent

from rlark_scheduler import submission
from rlark_scheduler.api.models import (
    AttemptOut,
    EventOut,
    JobDetail,
    JobList,
    JobSummary,
    LogLineOut,
    RayNodesOut,
    SshKeysRequest,
    TemplateList,
    TemplateOut,
    TemplateRenderRequest,
    WorkerOut,
)
from rlark_scheduler.api.streams import JobActivity
from rlark_scheduler.domain.document.errors import SpecParseError
from rlark_scheduler.domain.idempotency import HEADER as IDEMPOTENCY_HEADER
from rlark_scheduler.domain.idempotency import IdempotencyKeyInvalid, check_key
from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.render import render_yaml
from rlark_scheduler.domain.restarts import attempt_history
from rlark_scheduler.domain.templates import TEMPLATES, Template
from rlark_scheduler.handlers.lifecycle import visible
from rlark_scheduler.handlers.requests import cancel_job, requeue_job, update_job_keys
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository import workers as workers_repo
from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.settings import SchedulerSettings

MAX_BODY_BYTES = 1_000_000
STREAM_END_GRACE = timedelta(seconds=3)
"""Logs may trail a job's end a little (agents ship the last lines after the exit): a follow stream
ends once the job has been over this long and nothing new came."""

_DOCUMENT_BODY = {
    "requestBody": {
        "required": True,
        "description": 'A job document (see docs/api.md), or {"yaml": "..."}',
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "object"}},
        },
    }
}

EXAMPLE_PARAMS: dict[str, dict[str, Any]] = {
    # No cluster: the scheduler chooses (ADR 0026).
    "single-node": {"image": "registry.example.com/rlinf/rlinf:v0.3.0"},
    "rl-actor-rollout": {"rolloutNodes": 2, "image": "registry.example.com/rlinf/rlinf:v0.3.0"},
    "rl-actor-rollout-env": {"image": "registry.example.com/rlinf/rlinf:v0.3.0"},
}


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, "document_too_large", text("document_too_large", max=MAX_BODY_BYTES))
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, "document_too_large", text("document_too_large", max=MAX_BODY_BYTES))
    return body


def _template_out(template: Template[Any]) -> TemplateOut:
    example = template.build(EXAMPLE_PARAMS.get(template.id, {}))
    return TemplateOut(
        id=template.id,
        title_en=template.title_en,
        title_zh=template.title_zh,
        description_en=template.description_en,
        description_zh=template.description_zh,
        params_schema=template.params_schema(),
        example_yaml=render_yaml(example),
    )


async def job_detail(conn: Any, job: JobRow, settings: SchedulerSettings) -> JobDetail:
    workers = await workers_repo.workers_of(conn, job.id)
    # Status changes, and a cluster of the job gone offline and back (ADR 0029): what the job page lists.
    timeline = await timeline_repo.events_of(conn, job.id, kinds=["status", "cluster"])
    outputs = await timeline_repo.outputs_of(conn, job.id)
    said = await timeline_repo.reasons_said(conn, [job.id])
    worker_said = await timeline_repo.worker_reasons_said(conn, job.id)
    spec = job.spec.get("spec", {})
    header = next((w for w in workers if w.facts.is_header), None)
    address = (header.virtual_ip or header.facts.address) if header else ""
    login_users: dict[str, str] = {}
    for name in sorted({w.facts.cluster for w in workers}):
        cluster = await read_models.get_cluster(conn, name)
        login_users[name] = LOCAL_WORKER_USER if cluster and cluster.runtime == "local" else settings.ssh_user
    ssh = None
    if header is not None and address and job.status.holds_capacity:
        ssh = f"ssh {login_users[header.facts.cluster]}@{address}"
    ray = None
    if job.ray_nodes_joined is not None and job.ray_nodes_expected is not None:
        ray = RayNodesOut(joined=job.ray_nodes_joined, expected=job.ray_nodes_expected)
    restart_rows = [
        e for e in timeline if e.to_status == JobStatus.PENDING.value and "failed_attempt" in e.details
    ]
    restarts_seen = [
        (e.at, int(e.details["failed_attempt"]), str(e.details.get("reason", e.reason))) for e in restart_rows
    ]
    attempts = attempt_history(job.created_at, restarts_seen, job.attempt, job.ended_at, job.reason)
    # How each attempt's end can be said in another language (ADR 0011): its failure's key, kept by the
    # restart row; the job's own reason for an attempt that ended the job.
    attempt_said = {int(e.details["failed_attempt"]): e.details.get("reason_said") for e in restart_rows}
    if job.ended_at is not None:
        attempt_said[job.attempt] = said.get(job.id)
    return JobDetail(
        **JobSummary.fields_of(job),
        reason_said=said.get(job.id),
        details=job.details,
        pending=job.pending if job.status is JobStatus.PENDING else None,
        warnings=job.warnings,
        ray_nodes=ray,
        workers=[
            WorkerOut.of(w, login_users[w.facts.cluster], worker_said.get(w.facts.worker_id)) for w in workers
        ],
        timeline=[EventOut.of(e) for e in timeline],
        attempts=[AttemptOut(**asdict(a), reason_said=attempt_said.get(a.number)) for a in attempts],
        outputs=outputs,
        tensorboard_dir=spec.get("tensorboardDir"),
        tensorboard_url=tool_url(job.id, SERVICE_TENSORBOARD) if spec.get("tensorboardDir") else None,
        ray_dashboard_url=(
            tool_url(job.id, SERVICE_RAY_DASHBOARD)
            if job.status is JobStatus.RUNNING and header is not None
            else None
        ),
        ssh_keys=job.ssh_key_names,
        ssh_command=ssh,
        spec=job.spec,
        yaml=job.spec_yaml,
    )


def tool_url(job_id: str, tool: str) -> str:
    """Where the gateway opens a job's tool for a browser (ADR 0012)."""
    return TOOL_OPEN_PATH.format(job_id=quote(job_id, safe=""), tool=tool)


def build_router(pool: asyncpg.Pool, settings: SchedulerSettings, activity: JobActivity) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=error_responses(401))

    async def load(caller: Caller, job_id: str) -> JobRow:
        async with pool.acquire() as conn:
            return visible(await jobs_repo.get_job(conn, job_id), caller)

    async def detail(job: JobRow) -> JobDetail:
        async with pool.acquire() as conn:
            return await job_detail(conn, job, settings)

    @router.get("/templates", response_model=TemplateList)
    async def list_templates(caller: CallerDep) -> TemplateList:
        """Ready-made job documents to start from, with their parameters and an example."""
        return TemplateList(items=[_template_out(t) for t in TEMPLATES.values()])

    @router.post("/templates/{template_id}:render", responses=error_responses(404))
    async def render_template(
        template_id: str, body: TemplateRenderRequest, caller: CallerDep
    ) -> dict[str, str]:
        """The job document a template builds from ``params`` (as YAML, to edit and submit)."""
        template = TEMPLATES.get(template_id)
        if template is None:
            raise ApiError(
                404, "template_not_found", text("template_not_found", name=repr(template_id)), "template_id"
            )
        try:
            doc = template.build(body.params)
        except SpecParseError as exc:
            first = exc.errors[0]
            errors = [e.to_dict() for e in exc.errors]
            raise ApiError(422, first.code, first.message, first.field or None, {"errors": errors}) from None
        return {"yaml": render_yaml(doc)}

    @router.post("/jobs:preview", openapi_extra=_DOCUMENT_BODY)
    async def preview(request: Request, caller: CallerDep) -> dict[str, Any]:
        """The normalised YAML, every error and warning, and what each cluster's agent will create.

        Always 200: problems are in ``errors`` (the same ones submit would refuse with).
        """
        body = await _body(request)
        async with pool.acquire() as conn:
            checked = await submission.check(conn, caller.user, submission.read_document(body))
        return submission.preview_body(checked)

    @router.post(
        "/jobs",
        status_code=201,
        response_model=JobDetail,
        openapi_extra=_DOCUMENT_BODY,
        responses={
            200: {"description": "A repeat of an Idempotency-Key submission: the job created first"},
            **error_responses(409, 413),
        },
    )
    async def submit(
        request: Request,
        response: Response,
        caller: CallerDep,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias=IDEMPOTENCY_HEADER,
                description="Makes retries safe: a repeat with the same key and document returns the "
                "job created first (200); the same key with another document is 409",
            ),
        ] = None,
    ) -> JobDetail:
        """Submit a job: validated, stored as Pending, queued for gang placement.

        422 with every problem when refused (``job_cannot_fit`` when no amount of waiting could place it).
        With ``Idempotency-Key``: 201 when this request created the job, 200 with the same job for a
        repeat, 409 ``idempotency_key_reused`` when the key came with another document before.
        """
        key = None
        if idempotency_key is not None:
            try:
                key = check_key(idempotency_key)
            except IdempotencyKeyInvalid as exc:
                raise ApiError(422, "idempotency_key_invalid", str(exc), IDEMPOTENCY_HEADER) from None
        body = await _body(request)
        submitted = await submission.submit(pool, caller, body, datetime.now(UTC), key)
        if not submitted.created:
            response.status_code = 200
        return await detail(submitted.job)

    @router.get("/jobs", response_model=JobList)
    async def list_jobs(
        caller: CallerDep,
        status: Annotated[str | None, Query(description="One status or several, comma-separated")] = None,
        q: Annotated[str | None, Query(max_length=200, description="Part of the name or id")] = None,
        owner: Annotated[str | None, Query(max_length=200, description="Admins: one user's jobs")] = None,
        ssh_key: Annotated[
            str | None, Query(max_length=200, description="Jobs that put this SSH key (its id) on workers")
        ] = None,
        page: PageNumber = 1,
        page_size: PageSize = 50,
    ) -> JobList:
        """Your jobs, newest first (admins: everyone's, or ``owner``'s); ``ssh_key`` asks which jobs use
        a key (the gateway asks before a key is deleted)."""
        statuses = [s.strip() for s in (status or "").split(",") if s.strip()]
        known = {s.value.lower(): s.value for s in JobStatus}
        for value in statuses:
            if value.lower() not in known:
                raise ApiError(
                    422,
                    "status_invalid",
                    text("status_invalid", value=repr(value), statuses=", ".join(s.value for s in JobStatus)),
                    "status",
                )
        scope = (owner or None) if caller.is_admin else caller.user
        if not caller.is_admin and owner and owner != caller.user:
            return JobList(items=[], total=0, page=page, page_size=page_size)
        async with pool.acquire() as conn:
            rows, total = await jobs_repo.list_jobs(
                conn,
                owner=scope,
                statuses=[known[s.lower()] for s in statuses],
                query=q or None,
                ssh_key_id=ssh_key or None,
                page=page,
                page_size=page_size,
            )
            said = await timeline_repo.reasons_said(conn, [r.id for r in rows])
        items = [JobSummary(**JobSummary.fields_of(r), reason_said=said.get(r.id)) for r in rows]
        return JobList(items=items, total=total, page=page, page_size=page_size)

    @router.get("/jobs/{job_id}", response_model=JobDetail, responses=error_responses(404))
    async def get_job(job_id: str, caller: CallerDep) -> JobDetail:
        """Status, reason, pending explanation, workers, timeline, outputs and the ssh hint of a job."""
        return await detail(await load(caller, job_id))

    @router.post("/jobs/{job_id}:cancel", response_model=JobDetail, responses=error_responses(404, 409))
    async def cancel(job_id: str, caller: CallerDep) -> JobDetail:
        """Cancel a job: every worker is stopped and its capacity and addresses released."""
        async with transaction(pool) as conn:
            job = await cancel_job(conn, caller, job_id, datetime.now(UTC))
        return await detail(job)

    @router.post("/jobs/{job_id}:requeue", response_model=JobDetail, responses=error_responses(404, 409))
    async def requeue(job_id: str, caller: CallerDep) -> JobDetail:
        """Stop the job's running attempt on purpose and place its next one (the run script gets SIGTERM and
        its termination grace to checkpoint; the next attempt resumes per ``spec.resume``)."""
        async with transaction(pool) as conn:
            job = await requeue_job(conn, caller, job_id, datetime.now(UTC), settings.restart_teardown_s)
        return await detail(job)

    @router.put("/jobs/{job_id}/ssh-keys", response_model=JobDetail, responses=error_responses(404, 409))
    async def set_ssh_keys(job_id: str, body: SshKeysRequest, caller: CallerDep) -> JobDetail:
        """Replace the job's SSH keys; running workers get them without a restart."""
        async with transaction(pool) as conn:
            job = await update_job_keys(conn, caller, job_id, body.ssh_keys, datetime.now(UTC))
        return await detail(job)

    @router.get("/jobs/{job_id}/logs", response_model=None, responses=error_responses(404))
    async def logs(
        job_id: str,
        caller: CallerDep,
        worker: Annotated[str | None, Query(max_length=200, description="One worker's lines")] = None,
        attempt: Annotated[
            int | None,
            Query(ge=1, description="The lines of this attempt's workers (default: the current attempt)"),
        ] = None,
        since_seq: Annotated[int | None, cursor("Lines after this line number")] = None,
        after: Annotated[int, cursor("Lines after this cursor")] = 0,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
        follow: Annotated[bool, Query(description="Stream new lines (server-sent events)")] = False,
        format: Annotated[Literal["jsonl", "text"], Query(description="jsonl (default) or text")] = "jsonl",
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> Response:
        """A job's output lines, kept after its workers are gone: JSON lines, plain text, or a live
        stream with ``follow=true`` (``event: log``, id = cursor; ``event: end`` once the job ended)."""
        job = await load(caller, job_id)
        if attempt is not None and attempt > job.attempt:
            raise ApiError(
                404,
                "attempt_not_found",
                text("attempt_not_found", attempt=attempt, attempts=job.attempt),
                "attempt",
            )
        # A worker named explicitly is its own filter, whatever its attempt.
        of_attempt = None if worker else (attempt or job.attempt)
        cursor = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
        if not follow:
            async with pool.acquire() as conn:
                rows = await timeline_repo.logs_of(
                    conn,
                    job.id,
                    worker_id=worker,
                    since_seq=since_seq,
                    after_cursor=cursor,
                    limit=limit,
                    attempt=of_attempt,
                )
            if format == "text":
                return PlainTextResponse("".join(f"{r.line}\n" for r in rows))
            body = "".join(LogLineOut.of(r).model_dump_json() + "\n" for r in rows)
            return Response(body, media_type="application/x-ndjson")

        position = {"cursor": cursor}

        async def fetch() -> tuple[list[Any], bool]:
            async with pool.acquire() as conn:
                current = await jobs_repo.get_job(conn, job.id)
                # Following the current attempt goes on into the next one when the job restarts.
                following = of_attempt if attempt or worker or current is None else current.attempt
                rows = await timeline_repo.logs_of(
                    conn,
                    job.id,
                    worker_id=worker,
                    since_seq=since_seq,
                    after_cursor=position["cursor"],
                    limit=500,
                    attempt=following,
                )
            if rows:
                position["cursor"] = rows[-1].cursor
            return rows, _finished(current)

        async def stream() -> AsyncIterator[ServerSentEvent]:
            async for row in activity.follow(job.id, fetch, settings.stream_poll_s):
                yield ServerSentEvent(
                    event="log", id=str(row.cursor), data=LogLineOut.of(row).model_dump_json()
                )
            yield ServerSentEvent(event="end", data=json.dumps(await _status_of(job.id)))

        return EventSourceResponse(stream(), ping=15, headers={"Cache-Control": "no-cache"})

    @router.get("/jobs/{job_id}/events", response_model=None, responses=error_responses(404))
    async def events(
        job_id: str,
        caller: CallerDep,
        after: Annotated[int, cursor("Events after this sequence number")] = 0,
        follow: Annotated[bool, Query(description="Stream new events (server-sent events)")] = False,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> Response:
        """The job's timeline: status changes, worker phases, pending reasons. ``follow=true`` streams
        them (``event: <kind>``, id = seq) and ends with ``event: end`` once the job ended."""
        job = await load(caller, job_id)
        start = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
        if not follow:
            async with pool.acquire() as conn:
                rows = await timeline_repo.events_of(conn, job.id, after=start)
            return JSONResponse({"items": [EventOut.of(r).model_dump(mode="json") for r in rows]})

        position = {"seq": start}

        async def fetch() -> tuple[list[Any], bool]:
            async with pool.acquire() as conn:
                rows = await timeline_repo.events_of(conn, job.id, after=position["seq"], limit=500)
                current = await jobs_repo.get_job(conn, job.id)
            if rows:
                position["seq"] = rows[-1].seq
            return rows, current is None or current.status.terminal

        async def stream() -> AsyncIterator[ServerSentEvent]:
            async for row in activity.follow(job.id, fetch, settings.stream_poll_s):
                out = EventOut.of(row)
                yield ServerSentEvent(event=row.kind, id=str(row.seq), data=out.model_dump_json())
            yield ServerSentEvent(event="end", data=json.dumps(await _status_of(job.id)))

        return EventSourceResponse(stream(), ping=15, headers={"Cache-Control": "no-cache"})

    async def _status_of(job_id: str) -> dict[str, Any]:
        async with pool.acquire() as conn:
            job = await jobs_repo.get_job(conn, job_id)
        if job is None:
            return {"job_id": job_id}
        return {
            "job_id": job_id,
            "status": job.status.value,
            "reason": job.reason,
            "exit_code": job.exit_code,
        }

    return router


def _finished(job: JobRow | None) -> bool:
    if job is None:
        return True
    if not job.status.terminal or job.ended_at is None:
        return False
    return datetime.now(UTC) - job.ended_at > STREAM_END_GRACE
