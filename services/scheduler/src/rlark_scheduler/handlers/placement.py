"""Placing a job: the placement loop's decision stored, netdomain asked for addresses and its answers
applied, each worker's placement sent to its cluster's agent; Pending jobs' explanations.

Saga steps (ARCHITECTURE §3): :func:`commit_placements` — Pending → Scheduled with the workers
stored and the layout said in the timeline (ADR 0026: a job whose clusters the placer chose joins the
domain of its layout, one only when it spans); a job with a network domain asks netdomain for
addresses, one without gets its worker placements at once (→ Starting). :func:`apply_addresses_allocated` /
:func:`apply_allocation_failed` — netdomain's answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import structlog
from rlark_contracts import Envelope
from rlark_contracts.events.netdomain import AddressAllocationFailed, AddressesAllocated, AddressesReleased
from rlark_contracts.events.scheduler import AddressesReleaseRequested, AddressesRequested, AddressRequest
from rlark_contracts.messages import text
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import add_events

from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.document.validation import hostpath_refusals, mount_type_refusals
from rlark_scheduler.domain.jobs import JobStatus, WorkerFacts, domain_capacity, placed_workers
from rlark_scheduler.domain.layouts import layout_view, placed_text
from rlark_scheduler.domain.placed import DomainAddresses, PlacedJob, worker_placements
from rlark_scheduler.domain.placement import Placement
from rlark_scheduler.domain.reasons import PendingReason, pending_view
from rlark_scheduler.envelopes import Meta, envelope
from rlark_scheduler.handlers.lifecycle import (
    StatusChange,
    back_to_pending,
    end_job,
    record_changes,
    transition,
)
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository import workers as workers_repo
from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.repository.timeline import NewEvent
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)


FATAL_ALLOCATION_CODES = frozenset({"domain_not_found", "job_in_other_domain"})
"""netdomain refusals that waiting cannot cure: the job fails instead of going back to Pending."""


# ---------------------------------------------------------------------------------------- placement


async def commit_placements(
    conn: Connection, placements: Sequence[Placement], settings: SchedulerSettings, now: datetime
) -> set[str]:
    """Store gang placements decided by the placement loop, in the caller's transaction and in a few
    statements whatever their number: the ids of the jobs placed. A job no longer Pending (cancelled
    meanwhile) is skipped, and so is one whose mounts its cluster does not allow now (a hostPath outside
    its policy, a type its runtime cannot mount: it fails); the caller gives the capacity of those back.

    Each job placed: its workers stored, Pending → Scheduled; with a network domain, netdomain is asked
    for addresses (the workers are placed when they come); without one, each worker's placement goes to
    its cluster's agent and the job moves on to Starting."""
    wanted = {p.job_id: p for p in placements}
    locked = await jobs_repo.get_jobs(conn, sorted(wanted), for_update=True)
    workers: dict[str, list[WorkerFacts]] = {}
    changes: list[StatusChange] = []
    events: list[Envelope] = []
    for job in locked:
        if job.status is not JobStatus.PENDING:
            continue
        doc = JobDocument.model_validate(job.spec)
        meta = Meta(correlation_id=job.id)
        placement = wanted[job.id]
        refused = await mounts_refused_now(conn, doc, placement)
        if refused:
            await end_job(conn, job, JobStatus.FAILED, refused, now, meta)
            continue
        if doc.spec.chooses_clusters:
            job, released = _join_chosen_domain(job, placement, meta)
            await jobs_repo.set_network_domain(conn, job.id, job.network_domain, job.address_request_id)
            events.extend(released)
        placed = placed_workers(placement, job.attempt)
        workers[job.id] = placed
        clusters = ", ".join(sorted({w.cluster for w in placed}))
        details = {
            "workers": [
                {
                    "worker_id": w.worker_id,
                    "cluster": w.cluster,
                    "node": w.node,
                    "rank": w.rank,
                    "gpus": w.gpus,
                }
                for w in placed
            ],
            "layout": layout_view(placement),
        }
        reason = placed_text(placement)
        changes.append(StatusChange(job, JobStatus.PENDING, JobStatus.SCHEDULED, reason, meta, details))
        if job.network_domain:
            events.extend(await _request_addresses(conn, job, placed, meta))
            continue
        events.extend(placed_events(job, doc, placed, None, settings, meta))
        started = text("job.placements_sent", clusters=clusters)
        changes.append(StatusChange(job, JobStatus.SCHEDULED, JobStatus.STARTING, started, meta))
    await workers_repo.insert_workers(conn, workers, now)
    await record_changes(conn, changes, now, events)
    return set(workers)


def _join_chosen_domain(job: JobRow, placement: Placement, meta: Meta) -> tuple[JobRow, list[Envelope]]:
    """A job whose clusters the placer chose joins the domain of its layout — one only when it spans (ADR
    0026) — and gives back the addresses an earlier attempt holds in another domain (or in one it no longer
    joins): the job as it now is, and the events that release them."""
    domain = placement.layout.domain if placement.layout is not None else job.network_domain
    released: list[Envelope] = []
    if job.address_request_id and job.network_domain and job.network_domain != domain:
        release = AddressesReleaseRequested(job_id=job.id, domain=job.network_domain)
        released.append(envelope(release, job.id, meta))
        job = replace(job, address_request_id=None)
    return replace(job, network_domain=domain), released


async def _request_addresses(
    conn: Connection, job: JobRow, workers: Sequence[WorkerFacts], meta: Meta
) -> list[Envelope]:
    """The events that ask netdomain for the job's addresses (remembering which request it answers)."""
    asked: list[Envelope] = []
    if job.address_request_id:
        # An earlier attempt's addresses, kept while its workers were torn down and not given back
        # because that took too long (ADR 0014): released first, on the same ordered topic.
        released = AddressesReleaseRequested(job_id=job.id, domain=job.network_domain)
        asked.append(envelope(released, job.id, meta))
    request = envelope(
        AddressesRequested(
            job_id=job.id,
            domain=job.network_domain,
            workers=[AddressRequest(worker_id=w.worker_id, cluster=w.cluster) for w in workers],
        ),
        job.id,
        meta,
    )
    asked.append(request)
    await jobs_repo.set_address_request(conn, job.id, request.id)
    return asked


async def mounts_refused_now(conn: Connection, doc: JobDocument, placement: Placement) -> str:
    """Why the job's mounts may no longer be placed ("" when they may), from the clusters as stored now:
    a hostPath policy an admin narrowed since the job was accepted (ADR 0006), a mount type the cluster's
    runtime cannot mount (its runtime came after the job, when it was known only through its nodes). A
    role whose cluster the placer chose is judged on the clusters of its workers."""
    placed: dict[str, set[str]] = {}
    for worker in placement.workers:
        placed.setdefault(worker.role, set()).add(worker.cluster)
    mounting = {role.name for role in doc.spec.tasks if role.mounts}
    names = sorted({c for role, clusters in placed.items() if role in mounting for c in clusters})
    if not names:
        return ""
    where = {role: sorted(clusters) for role, clusters in placed.items()}
    clusters = await read_models.known_clusters(conn, names)
    refusals = mount_type_refusals(
        doc.spec, {c.name: c.runtime for c in clusters}, where, {c.name: c.unmountable for c in clusters}
    )
    refusals += hostpath_refusals(doc.spec, {c.name: c.hostpath_allow for c in clusters}, where)
    return "; ".join(message for _, message in refusals)


def placed_events(
    job: JobRow,
    doc: JobDocument,
    workers: Sequence[WorkerFacts],
    addresses: DomainAddresses | None,
    settings: SchedulerSettings,
    meta: Meta,
) -> list[Envelope]:
    """One ``scheduler.worker.placed.v1`` per worker, in rank order (``domain/placed.py`` builds them)."""
    header = next(w for w in workers if w.is_header)
    # In a domain the Header is reached at its virtual IP. Without one the job runs in one cluster
    # (validation refuses more) and the Header's address is its own — a pod's IP, a local worker's
    # address — which only that cluster's agent learns: it fills it in when this is empty. (Its node's
    # address would not do: Ray binds the pod's IP, a real kubelet's pods are not on the node's.)
    header_address = addresses.virtual_ips[header.worker_id] if addresses is not None else ""
    placed_job = PlacedJob(
        job_id=job.id,
        owner=job.owner,
        ssh_public_keys=job.ssh_public_keys,
        header_address=header_address,
        addresses=addresses,
        ray_port=settings.ray_port,
        join_deadline_s=settings.join_deadline_s,
    )
    return [envelope(event, job.id, meta) for event in worker_placements(placed_job, doc, workers)]


async def store_pending_reasons(
    conn: Connection, reasons: Sequence[tuple[str, PendingReason, int]], now: datetime
) -> set[str]:
    """Store Pending jobs' explanations (job id, reason, rounds waited) where they changed, each with a
    'pending' timeline row, in three statements: the ids of the jobs whose explanation changed."""
    views = {job_id: pending_view(reason) for job_id, reason, _ in reasons}
    changed = await jobs_repo.set_pending_reasons(
        conn, [(job_id, views[job_id], reason.message) for job_id, reason, _ in reasons], now
    )
    said = [
        NewEvent(
            job_id,
            "pending",
            now,
            to_status=JobStatus.PENDING.value,
            reason=reason.message,
            details={"code": reason.code.value, "rounds_waited": rounds, "parts": views[job_id]["parts"]},
        )
        for job_id, reason, rounds in reasons
        if job_id in changed
    ]
    await timeline_repo.insert_events(conn, said)
    await changes_repo.notify_activity(conn, *(e.job_id for e in said))
    return changed


# ------------------------------------------------------------------------------------ network domain


async def apply_addresses_allocated(
    conn: Connection,
    payload: AddressesAllocated,
    answered: str | None,
    meta: Meta,
    settings: SchedulerSettings,
    now: datetime,
) -> None:
    """Virtual IPs arrived: the workers get their placements (with their IPs) and the job starts.

    ``answered`` is the id of the request netdomain answers (its event's causation id)."""
    job = await _awaiting_addresses(conn, payload.job_id, answered)
    if job is None:
        return
    workers = [w.facts for w in await workers_repo.workers_of(conn, job.id)]
    addresses = {a.worker_id: a.address for a in payload.addresses}
    missing = [w.worker_id for w in workers if w.worker_id not in addresses]
    if missing:
        await back_to_pending(
            conn,
            job,
            f'network domain "{payload.domain}" returned no address for {", ".join(missing)}',
            now,
            meta,
            hold_until=now + timedelta(seconds=settings.address_retry_s),
            release_addresses=True,
        )
        return
    await workers_repo.set_virtual_ips(conn, {w.worker_id: addresses[w.worker_id] for w in workers})
    await jobs_repo.set_domain_cidr(conn, job.id, payload.cidr)
    doc = JobDocument.model_validate(job.spec)
    domain = DomainAddresses(job.network_domain or payload.domain, payload.cidr, addresses)
    await add_events(conn, placed_events(job, doc, workers, domain, settings, meta))
    clusters = sorted({w.cluster for w in workers})
    await transition(
        conn,
        job,
        JobStatus.SCHEDULED,
        JobStatus.STARTING,
        text("job.placements_sent.domain", domain=payload.domain, clusters=", ".join(clusters)),
        now,
        meta,
    )


async def apply_allocation_failed(
    conn: Connection,
    payload: AddressAllocationFailed,
    answered: str | None,
    meta: Meta,
    settings: SchedulerSettings,
    now: datetime,
) -> None:
    """netdomain could not give every worker an address: wait again, or fail when waiting cannot help."""
    job = await _awaiting_addresses(conn, payload.job_id, answered)
    if job is None:
        return
    workers = await workers_repo.workers_of(conn, job.id)
    cidr = (await read_models.domains(conn)).get(payload.domain)
    too_big = cidr is not None and len(workers) > domain_capacity(cidr)
    if payload.code in FATAL_ALLOCATION_CODES or too_big:
        reason = payload.reason
        if too_big:
            reason = text(
                "job.domain_too_small",
                domain=payload.domain,
                cidr=str(cidr),
                workers=len(workers),
                capacity=domain_capacity(str(cidr)),
            )
        await end_job(conn, job, JobStatus.FAILED, reason, now, meta, details={"code": payload.code})
        return
    await back_to_pending(
        conn,
        job,
        payload.reason,
        now,
        meta,
        hold_until=now + timedelta(seconds=settings.address_retry_s),
        release_addresses=False,
    )


async def _awaiting_addresses(conn: Connection, job_id: str, answered: str | None) -> JobRow | None:
    """The job when it is Scheduled and waiting for exactly this answer; None otherwise (stale)."""
    job = await jobs_repo.get_job(conn, job_id, for_update=True)
    if job is None or job.status is not JobStatus.SCHEDULED or not job.network_domain:
        log.info("allocation answer ignored", job_id=job_id, status=job.status if job else None)
        return None
    if answered and job.address_request_id and answered != job.address_request_id:
        log.info("allocation answer for an older request ignored", job_id=job_id)
        return None
    return job


async def apply_addresses_released(conn: Connection, payload: AddressesReleased) -> None:
    """Addresses came free in a domain: jobs waiting for some are tried again now."""
    await changes_repo.add_changes(conn, "job", await jobs_repo.release_holds(conn, payload.domain))
