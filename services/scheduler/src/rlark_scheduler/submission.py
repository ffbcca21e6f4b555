"""Use cases behind ``POST /api/v1/jobs:preview`` and ``POST /api/v1/jobs``: read, check, store a job.

The submitted text (YAML, or JSON — which YAML reads too) is parsed by ``domain.spec``; the network
domain default is filled (the first domain by name, when the spec names none and domains exist);
the document is validated against a :class:`ValidationContext` gathered from the read models (the
job's clusters with their nodes and free GPUs, the owner's key names, the domain names); and a job
that no amount of waiting could place (``reasons.can_ever_fit`` on an idealised fleet) is refused.

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

from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.idempotency import HEADER, document_fingerprint
from rlark_scheduler.domain.jobs import JobStatus, job_request
from rlark_scheduler.domain.reasons import PendingReason, can_ever_fit, pending_view
from rlark_scheduler.domain.render import AgentPlan, normalized_document, plan_preview, render_yaml
from rlark_scheduler.domain.spec import (
    MAX_REPLICAS,
    JobDocument,
    SpecError,
    SpecParseError,
    fill_network_domain_default,
    parse_job_document,
)
from rlark_scheduler.domain.validation import ClusterView, NodeView, ValidationContext, validate_job
from rlark_scheduler.envelopes import Meta, envelope
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.repository.read_models import KeyRow, capacity_node, free_gpus

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
            wrapper = json.loads(body)
        except ValueError:
            return body
        if isinstance(wrapper, dict) and set(wrapper) == {"yaml"} and isinstance(wrapper["yaml"], str):
            return str(wrapper["yaml"])
    return body


async def check(conn: Connection, owner: str, body: bytes) -> Checked:
    """Read ``body`` and check it against the current state; parse errors are returned, not raised."""
    try:
        doc = parse_job_document(_document_text(body))
    except SpecParseError as exc:
        return Checked(doc=None, errors=list(exc.errors))
    domains = await read_models.domains(conn)
    doc = fill_network_domain_default(doc, domains)
    keys = await read_models.keys_of(conn, owner)
    names = sorted({role.cluster for role in doc.spec.tasks})
    clusters = await read_models.known_clusters(conn, names)
    nodes = [n for n in await read_models.nodes_of_clusters(conn, names) if not n.gone]
    views = []
    for cluster in clusters:
        mine = tuple(
            NodeView(
                name=n.name,
                cluster=n.cluster,
                labels=n.labels,
                ready=n.ready,
                schedulable=n.schedulable,
                gpu_total=n.gpu_allocatable,
                gpu_free=free_gpus(n),
            )
            for n in nodes
            if n.cluster == cluster.name
        )
        views.append(ClusterView(cluster.name, cluster.online, mine, cluster.hostpath_allow))
    ctx = ValidationContext.build(views, [k.name for k in keys], domains)
    report = validate_job(doc, ctx)
    checked = Checked(doc=doc, errors=list(report.errors), warnings=list(report.warnings), keys=keys)
    if all(1 <= role.replicas <= MAX_REPLICAS for role in doc.spec.tasks):
        checked.plan = plan_preview(doc, ctx)
    if report.ok:
        model = CapacityModel.from_nodes(capacity_node(n) for n in nodes)
        fits, reason = can_ever_fit(model, job_request("preview", doc.spec, 0))
        if not fits:
            checked.never_fits = reason
    return checked


def preview_body(checked: Checked) -> dict[str, Any]:
    """``{yaml, errors, warnings, plan}`` of ``POST /api/v1/jobs:preview``.

    The YAML is left empty when the document could not be read, and when it holds a secret: the
    errors name the field and line, and a secret is never sent back, not even to its author.
    """
    leaks = any(e.code == "secret_detected" for e in checked.errors)
    return {
        "yaml": render_yaml(checked.doc) if checked.doc is not None and not leaks else "",
        "errors": checked.error_dicts(),
        "warnings": [w.to_dict() for w in checked.warnings],
        "plan": [plan_dict(p) for p in checked.plan],
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


def fingerprint(body: bytes) -> str:
    """The fingerprint of the document in ``body`` that an idempotent repeat must match."""
    text = _document_text(body)
    try:
        canonical: dict[str, Any] | None = normalized_document(parse_job_document(text))
    except SpecParseError:
        canonical = None
    return document_fingerprint(canonical, text)


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
    body_fingerprint = fingerprint(body) if idempotency_key is not None else None
    async with pool.acquire() as conn:
        if idempotency_key is not None:
            found = await jobs_repo.job_by_idempotency_key(conn, caller.user, idempotency_key)
            if found is not None:
                assert body_fingerprint is not None
                return Submitted(_repeat(found, idempotency_key, body_fingerprint), created=False)
        checked = await check(conn, caller.user, body)
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
