"""Use cases behind ``POST /api/v1/jobs:preview`` and ``POST /api/v1/jobs``: read, check, store a job.

The submitted text (YAML, or JSON — which YAML reads too) is parsed once per request by
``domain.document.parsing`` (:func:`read_document`), and the parsed form travels: the idempotency
fingerprint and the checks both take it. The network domain default is filled (the first domain by name, when the
spec names none and domains exist); the document is validated against a :class:`ValidationContext`
gathered from the tables (the capacity model of the job's clusters — the one the placement loop
decides on, ``repository.capacity``, built once per check — the known clusters with their hostPath
policies, the owner's key names, the domain names); and a job that no amount of waiting could place
(``reasons.can_ever_fit`` asked of the same model) is refused.

Gathering reads happen before the one short write transaction: the job row, its first timeline row,
``scheduler.job.submitted.v1`` and the first ``scheduler.job.status_changed.v1`` in the outbox, and a
``capacity_changes`` row whose NOTIFY wakes the placement loop at commit.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import structlog
from rlark_contracts.events.scheduler import JobStatusChanged, JobSubmitted
from rlark_contracts.messages import text
from rlark_platform.db import transaction
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller
from rlark_platform.messaging import add_events

from rlark_scheduler.domain.document.errors import SpecError, SpecParseError
from rlark_scheduler.domain.document.facts import fill_network_domain_default, fill_project_default
from rlark_scheduler.domain.document.model import MAX_REPLICAS, JobDocument
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.reader import check_nesting
from rlark_scheduler.domain.document.redaction import redact_issue
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job
from rlark_scheduler.domain.idempotency import HEADER, document_fingerprint
from rlark_scheduler.domain.jobs import JobStatus, job_request
from rlark_scheduler.domain.layouts import layout_view
from rlark_scheduler.domain.placement import Placement, place
from rlark_scheduler.domain.reasons import PendingReason, can_ever_fit, explain_pending, pending_view
from rlark_scheduler.domain.render import (
    AgentPlan,
    normalized_document,
    plan_preview,
    redact_plan,
    render_yaml,
)
from rlark_scheduler.envelopes import Meta, envelope
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import projects as projects_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository.capacity import capacity_model
from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.repository.read_models import KeyRow

log = structlog.get_logger(__name__)


def new_job_id() -> str:
    """A system id ``job-<12 hex>``: short enough that ``<job_id>-<role>-<index>`` stays a DNS label."""
    return f"job-{secrets.token_hex(6)}"


@dataclass
class Checked:
    """A document read and checked: what preview shows and what submit stores."""

    doc: JobDocument | None
    errors: list[SpecError] = field(default_factory=list)
    warnings: list[SpecError] = field(default_factory=list)
    plan: list[AgentPlan] = field(default_factory=list)
    never_fits: PendingReason | None = None
    keys: list[KeyRow] = field(default_factory=list)
    layout: dict[str, Any] | None = None
    """The layout the placer would choose now (``layouts.layout_view``); None when it would wait."""
    waits: PendingReason | None = None
    """Why it would wait now, when it could fit some day."""

    @property
    def ok(self) -> bool:
        return self.doc is not None and not self.errors and self.never_fits is None

    def error_dicts(self) -> list[dict[str, Any]]:
        errors = [e.to_dict() for e in self.errors]
        if self.never_fits is not None:
            errors.append(
                {
                    "code": "job_cannot_fit",
                    "message": f"the job can never be placed: {self.never_fits.message}",
                    "field": "spec.tasks",
                    "line": None,
                    "column": None,
                    "severity": "error",
                }
            )
        return errors


def _document_text(body: bytes) -> str | bytes:
    """The job document inside a request body: the body itself, or the ``yaml`` string of a JSON
    object ``{"yaml": "..."}`` (what a browser form naturally sends)."""
    stripped = body.lstrip()
    if stripped.startswith(b"{"):
        try:
            check_nesting(body.decode("utf-8"))
            wrapper = json.loads(body)
        except (ValueError, SpecParseError):  # parse_job_document says what is wrong with the body itself
            return body
        if isinstance(wrapper, dict) and set(wrapper) == {"yaml"} and isinstance(wrapper["yaml"], str):
            return str(wrapper["yaml"])
    return body


@dataclass(frozen=True)
class Received:
    """A request's job document, read once: the text inside the body, and the parsed document or
    why it could not be read."""

    text: str | bytes
    doc: JobDocument | None
    errors: tuple[SpecError, ...] = ()


def read_document(body: bytes) -> Received:
    """Parse the job document of a request body (see :func:`_document_text`); errors are kept, not raised."""
    text = _document_text(body)
    try:
        return Received(text, parse_job_document(text))
    except SpecParseError as exc:
        return Received(text, None, tuple(exc.errors))


async def check(conn: Connection, owner: str, received: Received) -> Checked:
    """Check a read document against the current state; a document that could not be read is
    returned with its parse errors."""
    if received.doc is None:
        return Checked(doc=None, errors=list(received.errors))
    domains = await read_models.domains(conn)
    member_of = [p.name for p in await projects_repo.list_projects(conn, owner)]
    doc = fill_project_default(fill_network_domain_default(received.doc, domains), member_of)
    keys = await read_models.keys_of(conn, owner)
    # A job whose clusters the scheduler chooses may go to any cluster (ADR 0026): checked against them all.
    names = None if doc.spec.chooses_clusters else sorted({r.cluster for r in doc.spec.tasks if r.cluster})
    clusters = await read_models.known_clusters(conn, names)
    model = await capacity_model(conn, names)
    # A project's secrets only for its members (whether it exists at all is said below, once).
    charged = doc.spec.project if doc.spec.project in member_of else None
    ctx = ValidationContext.build(
        model,
        {c.name: c.hostpath_allow for c in clusters},
        [k.name for k in keys],
        domains,
        runtimes={c.name: c.runtime for c in clusters},
        unmountable={c.name: c.unmountable for c in clusters},
        secrets=await read_models.secret_owners(conn, owner, charged),
    )
    report = validate_job(doc, ctx)
    checked = Checked(doc=doc, errors=list(report.errors), warnings=list(report.warnings), keys=keys)
    # A secret found anywhere in the document is never shown back, not even to its author: the report's
    # issues come redacted, and what is added here (a project name, the plan's images) is redacted below.
    added = len(checked.errors)
    if doc.spec.project is not None:
        project = await projects_repo.get_project(conn, doc.spec.project)
        if project is None or owner not in project.members:  # one answer: whether it exists is not said
            said = text("project_not_member", project=doc.spec.project[:100])
            checked.errors.append(SpecError("project_not_member", said, "spec.project"))
        elif project.max_priority is not None and doc.spec.priority > project.max_priority:
            said = text(
                "priority_above_cap",
                priority=doc.spec.priority,
                project=project.name,
                cap=project.max_priority,
            )
            checked.errors.append(SpecError("priority_above_cap", said, "spec.priority"))
    elif len(member_of) > 1:  # a member of several projects says which one pays
        said = text("project_required", projects=", ".join(member_of[:20]))
        checked.errors.append(SpecError("project_required", said, "spec.project"))
    checked.errors[added:] = [redact_issue(e, report.secrets) for e in checked.errors[added:]]
    placement: Placement | None = None
    if report.ok:
        request = job_request("preview", doc.spec, 0)
        fits, reason = can_ever_fit(model, request)
        if not fits:
            checked.never_fits = reason
        else:
            # The plan the placer would make now, and why (ADR 0026); or why it would wait.
            now = place(model, request)
            if isinstance(now, Placement):
                placement = now
                checked.layout = layout_view(now)
            else:
                checked.waits = explain_pending(model, request)
    if all(1 <= role.replicas <= MAX_REPLICAS for role in doc.spec.tasks):
        checked.plan = [redact_plan(p, report.secrets) for p in plan_preview(doc, ctx, placement)]
    return checked


def preview_body(checked: Checked) -> dict[str, Any]:
    """``{yaml, errors, warnings, plan, layout, pending}`` of ``POST /api/v1/jobs:preview``: ``layout`` is the
    placement the scheduler would make now and why (ADR 0026), ``pending`` why it would wait instead.

    The YAML is left empty when the document could not be read, and when it holds a secret: the
    errors name the field and line, and a secret is never sent back, not even to its author.
    """
    leaks = any(e.code == "secret_detected" for e in checked.errors)
    return {
        "yaml": render_yaml(checked.doc) if checked.doc is not None and not leaks else "",
        "errors": checked.error_dicts(),
        "warnings": [w.to_dict() for w in checked.warnings],
        "plan": [plan_dict(p) for p in checked.plan],
        "layout": checked.layout,
        "pending": pending_view(checked.waits) if checked.waits is not None else None,
    }


def plan_dict(plan: AgentPlan) -> dict[str, Any]:
    return {
        "cluster": plan.cluster,
        "known": plan.known,
        "online": plan.online,
        "gpus": plan.gpus,
        "roles": list(plan.roles),
        "workers": [
            {
                "role": w.role,
                "index": w.index,
                "rank": w.rank,
                "gpus": w.gpus,
                "image": w.image,
                "is_header": w.is_header,
            }
            for w in plan.workers
        ],
    }


def refusal(checked: Checked) -> ApiError:
    """The 422 for a document with errors: the first error is the main one, all are in details."""
    errors = checked.error_dicts()
    first = errors[0]
    details: dict[str, Any] = {"errors": errors, "warnings": [w.to_dict() for w in checked.warnings]}
    if checked.never_fits is not None and not checked.errors:
        details["pending"] = pending_view(checked.never_fits)
    main = checked.errors[0].message if checked.errors else str(first["message"])
    return ApiError(422, str(first["code"]), main, str(first["field"]) or None, details)


def fingerprint(received: Received) -> str:
    """The fingerprint of a request's document that an idempotent repeat must match."""
    canonical = normalized_document(received.doc) if received.doc is not None else None
    return document_fingerprint(canonical, received.text)


def _repeat(found: tuple[JobRow, str], key: str, body_fingerprint: str) -> JobRow:
    """The job a repeated submission gets back, or the 409 when its key came with another document."""
    job, stored = found
    if stored != body_fingerprint:
        log.info("idempotency key reused with another document", job_id=job.id)
        raise ApiError(
            409,
            "idempotency_key_reused",
            f"{HEADER} {key!r} was already used for job {job.id} with a different document; "
            "use a new key for a new job",
            HEADER,
            {"job_id": job.id},
        )
    log.info("job submission repeated", job_id=job.id)
    return job


@dataclass(frozen=True)
class Submitted:
    """What ``submit`` did: the job, and whether this request created it (False: an idempotent repeat)."""

    job: JobRow
    created: bool


async def submit(
    pool: asyncpg.Pool, caller: Caller, body: bytes, now: datetime, idempotency_key: str | None = None
) -> Submitted:
    """Check and store a job as Pending owned by ``caller``; 422 (nothing stored) when refused.

    With ``idempotency_key`` (already checked by :func:`check_key`): when ``caller`` submitted that key
    before, the job stored then is returned (``created`` False) without checking anything again — a retry
    gets the first answer even if the fleet changed meanwhile — or 409 when the document differs. Two
    concurrent first submissions with one key race on the unique constraint; the loser's transaction
    rolls back whole and it answers as a repeat.
    """
    received = read_document(body)
    body_fingerprint = fingerprint(received) if idempotency_key is not None else None
    async with pool.acquire() as conn:
        if idempotency_key is not None:
            found = await jobs_repo.job_by_idempotency_key(conn, caller.user, idempotency_key)
            if found is not None:
                assert body_fingerprint is not None
                return Submitted(_repeat(found, idempotency_key, body_fingerprint), created=False)
        checked = await check(conn, caller.user, received)
    if not checked.ok:
        log.info("job refused", code=checked.error_dicts()[0]["code"], errors=len(checked.error_dicts()))
        raise refusal(checked)
    try:
        job = await _store(pool, caller, checked, now, idempotency_key, body_fingerprint)
    except asyncpg.UniqueViolationError as exc:
        if idempotency_key is None or exc.constraint_name != jobs_repo.IDEMPOTENCY_CONSTRAINT:
            raise
        async with pool.acquire() as conn:
            found = await jobs_repo.job_by_idempotency_key(conn, caller.user, idempotency_key)
        assert found is not None  # the row that won the race commits before the violation is raised
        assert body_fingerprint is not None
        return Submitted(_repeat(found, idempotency_key, body_fingerprint), created=False)
    assert checked.doc is not None
    log.info("job submitted", job_id=job.id, workers=sum(r.replicas for r in checked.doc.spec.tasks))
    return Submitted(job, created=True)


async def _store(
    pool: asyncpg.Pool,
    caller: Caller,
    checked: Checked,
    now: datetime,
    idempotency_key: str | None,
    body_fingerprint: str | None,
) -> JobRow:
    """The one write transaction of a submission: job row, first timeline row, outbox events, wake-up."""
    doc = checked.doc
    assert doc is not None
    by_name: dict[str, KeyRow] = {}
    for key in checked.keys:
        by_name.setdefault(key.name, key)
    chosen = [by_name[name] for name in dict.fromkeys(doc.spec.ssh_keys)]
    job_id = new_job_id()
    spec = normalized_document(doc)
    meta = Meta.from_request()
    async with transaction(pool) as conn:
        job = await jobs_repo.insert_job(
            conn,
            job_id=job_id,
            owner=caller.user,
            name=doc.metadata.name.strip(),
            spec=spec,
            spec_yaml=render_yaml(doc),
            warnings=[w.to_dict() for w in checked.warnings],
            priority=doc.spec.priority,
            network_domain=doc.spec.joined_domain,
            ssh_key_ids=[k.key_id for k in chosen],
            ssh_key_names=[k.name for k in chosen],
            ssh_public_keys=[k.public_key for k in chosen],
            now=now,
            idempotency_key=idempotency_key,
            idempotency_fingerprint=body_fingerprint,
        )
        await timeline_repo.insert_event(
            conn, job_id, "status", at=now, to_status=JobStatus.PENDING.value, reason=text("job.submitted")
        )
        await add_events(
            conn,
            [
                envelope(
                    JobSubmitted(
                        job_id=job_id, owner=caller.user, name=job.name, spec=spec, submitted_at=now
                    ),
                    job_id,
                    meta,
                ),
                envelope(
                    JobStatusChanged(
                        job_id=job_id,
                        owner=caller.user,
                        from_status="",
                        to_status=JobStatus.PENDING.value,
                        reason="submitted",
                        at=now,
                    ),
                    job_id,
                    meta,
                ),
            ],
        )
        await changes_repo.add_change(conn, "job", job_id)
    return job
