"""Use cases of the scheduler's job saga: state changes and the events announcing them, together.

Every function here runs on a connection inside the caller's transaction (a consumer's inbox
transaction, an API request's, or the placement loop's) and writes the state change, its timeline
row and its outbox events there, so they commit together or not at all. Nothing here does network
I/O. Whatever changes capacity (a job placed, ended or back to Pending, a node or cluster change, a
worker appearing or going) also queues a ``capacity_changes`` row, which wakes the placement loop
at commit (see ``placement_loop``).

Saga steps (ARCHITECTURE §3):
- :func:`commit_placement` — Pending → Scheduled with the workers stored; a job with a network
  domain asks netdomain for addresses, one without gets its worker placements at once (→ Starting).
- :func:`apply_addresses_allocated` / :func:`apply_allocation_failed` — netdomain's answer.
- :func:`apply_worker_status` — agents' reports folded by ``domain.jobs.fold_report``.
- :func:`end_job` — the one way a job that holds capacity ends: status, stop requests for every
  worker, capacity released, addresses released.
- :func:`apply_cluster_state` — a cluster going offline loses the jobs running on it.
- :func:`apply_tunnel_state` / :func:`judge_tunnels` — a domain link down names itself in the
  job's reason, fails the job after ``tunnel_grace_s``, clears when back up (``domain.tunnels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from pydantic import BaseModel
from rlark_contracts import Envelope, new_envelope
from rlark_contracts.events.agent import (
    LINK_CLOSED,
    TunnelStateChanged,
    WorkerLogsEmitted,
    WorkerOutputsListed,
    WorkerStatusChanged,
)
from rlark_contracts.events.inventory import ClusterState, NodeState
from rlark_contracts.events.keys import KeyState
from rlark_contracts.events.netdomain import (
    AddressAllocationFailed,
    AddressesAllocated,
    AddressesReleased,
    DomainState,
)
from rlark_contracts.events.scheduler import (
    AddressesReleaseRequested,
    AddressesRequested,
    AddressRequest,
    JobKeysUpdated,
    JobStatusChanged,
    Mount,
    WorkerPlaced,
    WorkerStopRequested,
)
from rlark_contracts.messages import Text, catalogue, text
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller
from rlark_platform.messaging import PoisonMessage, add_event, add_events

from rlark_scheduler import repository as repo
from rlark_scheduler.domain.jobs import (
    JobStatus,
    WorkerFacts,
    WorkerReport,
    domain_capacity,
    fold_report,
    ray_progress,
    worker_id,
)
from rlark_scheduler.domain.placement import Placement
from rlark_scheduler.domain.reasons import PendingReason, conflict_text, pending_texts, role_texts
from rlark_scheduler.domain.render import rlinf_config_yaml
from rlark_scheduler.domain.spec import JobDocument, MountType
from rlark_scheduler.domain.tunnels import Action, LinkObservation, decide, job_outage
from rlark_scheduler.domain.validation import hostpath_refusals
from rlark_scheduler.repository import JobRow
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)

SOURCE = "scheduler"
LOCAL_RUNTIME = "local"
FATAL_ALLOCATION_CODES = frozenset({"domain_not_found", "job_in_other_domain"})
"""netdomain refusals that waiting cannot cure: the job fails instead of going back to Pending."""


@dataclass(frozen=True, slots=True)
class Meta:
    """Ids of what caused an event (the consumed event, or the API request) for tracing."""

    causation_id: str | None = None
    correlation_id: str | None = None

    @classmethod
    def of(cls, envelope: Envelope) -> Meta:
        return cls(causation_id=envelope.id, correlation_id=envelope.correlation_id or envelope.subject)

    @classmethod
    def from_request(cls) -> Meta:
        request_id = structlog.contextvars.get_contextvars().get("request_id")
        return cls(correlation_id=request_id)


def envelope(data: BaseModel, subject: str, meta: Meta) -> Envelope:
    return new_envelope(
        data,
        source=SOURCE,
        subject=subject,
        causation_id=meta.causation_id,
        correlation_id=meta.correlation_id,
    )


def visible(job: JobRow | None, caller: Caller) -> JobRow:
    """The job when ``caller`` may see it; another user's job is "not found" (never "forbidden")."""
    if job is None or (job.owner != caller.user and not caller.is_admin):
        raise ApiError(404, "job_not_found", text("job_not_found"), "job_id")
    return job


# ------------------------------------------------------------------------------------ status changes


async def transition(
    conn: Connection,
    job: JobRow,
    from_status: JobStatus | str,
    to_status: JobStatus,
    reason: str,
    now: datetime,
    meta: Meta,
    *,
    details: dict[str, Any] | None = None,
    exit_code: int | None = None,
) -> None:
    """Record one status change: the row, the timeline, ``scheduler.job.status_changed.v1``."""
    details = details or {}
    from_value = from_status.value if isinstance(from_status, JobStatus) else from_status
    await repo.set_status(conn, job.id, to_status, reason, details=details, exit_code=exit_code, now=now)
    await repo.insert_event(
        conn,
        job.id,
        "status",
        at=now,
        from_status=from_value,
        to_status=to_status.value,
        reason=reason,
        details=details,
    )
    await add_event(
        conn,
        envelope(
            JobStatusChanged(
                job_id=job.id,
                owner=job.owner,
                from_status=from_value,
                to_status=to_status.value,
                reason=reason,
                at=now,
                details=details,
            ),
            job.id,
            meta,
        ),
    )
    await repo.notify_activity(conn, job.id)
    log.info("job status changed", job_id=job.id, from_status=from_value, to_status=to_status.value)


async def end_job(
    conn: Connection,
    job: JobRow,
    to_status: JobStatus,
    reason: str,
    now: datetime,
    meta: Meta,
    *,
    details: dict[str, Any] | None = None,
    exit_code: int | None = None,
) -> None:
    """End a job (terminal ``to_status``): stop every worker, release its capacity and addresses.

    The job's allocation is released by the placement loop when it applies the queued change; the
    stop requests go to each worker's cluster agent, which stops the worker idempotently.
    """
    assert to_status.terminal
    workers = await repo.workers_of(conn, job.id)
    await transition(
        conn, job, job.status, to_status, reason, now, meta, details=details, exit_code=exit_code
    )
    stops = [
        envelope(
            WorkerStopRequested(
                job_id=job.id, worker_id=w.facts.worker_id, cluster=w.facts.cluster, reason=reason
            ),
            job.id,
            meta,
        )
        for w in workers
    ]
    await add_events(conn, stops)
    if job.network_domain and job.address_request_id:
        await add_event(
            conn, envelope(AddressesReleaseRequested(job_id=job.id, domain=job.network_domain), job.id, meta)
        )
    await repo.add_change(conn, "job", job.id)


async def back_to_pending(
    conn: Connection,
    job: JobRow,
    reason: str,
    now: datetime,
    meta: Meta,
    *,
    hold_until: datetime | None,
    release_addresses: bool,
) -> None:
    """A Scheduled job whose workers were never created gives its placement back and waits again."""
    await repo.delete_workers(conn, job.id)
    await transition(conn, job, job.status, JobStatus.PENDING, reason, now, meta)
    await repo.set_hold(conn, job.id, hold_until)
    if release_addresses and job.network_domain and job.address_request_id:
        await add_event(
            conn, envelope(AddressesReleaseRequested(job_id=job.id, domain=job.network_domain), job.id, meta)
        )
    await repo.set_address_request(conn, job.id, None)
    await repo.add_change(conn, "job", job.id)


# ---------------------------------------------------------------------------------------- placement


def placement_workers(job_id: str, placement: Placement, header_role: str) -> list[WorkerFacts]:
    return [
        WorkerFacts(
            worker_id=worker_id(job_id, w.role, w.index),
            role=w.role,
            index=w.index,
            rank=w.rank,
            is_header=w.role == header_role,
            cluster=w.cluster,
            node=w.node,
            gpus=w.gpus,
        )
        for w in placement.workers
    ]


async def commit_placement(
    conn: Connection, placement: Placement, settings: SchedulerSettings, now: datetime
) -> bool:
    """Store a gang placement decided by the placement loop; False when the job is no longer Pending
    (cancelled meanwhile): nothing is written and the caller gives the capacity back."""
    job = await repo.get_job(conn, placement.job_id, for_update=True)
    if job is None or job.status is not JobStatus.PENDING:
        return False
    doc = JobDocument.model_validate(job.spec)
    meta = Meta(correlation_id=job.id)
    refused = await hostpaths_refused_now(conn, doc)
    if refused:
        await end_job(conn, job, JobStatus.FAILED, refused, now, meta)
        return False
    header = doc.spec.header or ""
    workers = placement_workers(job.id, placement, header)
    await repo.insert_workers(conn, job.id, workers, now)
    clusters = sorted({w.cluster for w in workers})
    details = {
        "workers": [
            {"worker_id": w.worker_id, "cluster": w.cluster, "node": w.node, "rank": w.rank, "gpus": w.gpus}
            for w in workers
        ]
    }
    await transition(
        conn,
        job,
        JobStatus.PENDING,
        JobStatus.SCHEDULED,
        text("job.placed.one", clusters=", ".join(clusters))
        if len(workers) == 1
        else text("job.placed", workers=len(workers), clusters=", ".join(clusters)),
        now,
        meta,
        details=details,
    )
    if job.network_domain:
        request = envelope(
            AddressesRequested(
                job_id=job.id,
                domain=job.network_domain,
                workers=[AddressRequest(worker_id=w.worker_id, cluster=w.cluster) for w in workers],
            ),
            job.id,
            meta,
        )
        await add_event(conn, request)
        await repo.set_address_request(conn, job.id, request.id)
        return True
    await emit_placed(conn, job, doc, workers, None, None, settings, meta)
    await transition(
        conn,
        job,
        JobStatus.SCHEDULED,
        JobStatus.STARTING,
        text("job.placements_sent", clusters=", ".join(clusters)),
        now,
        meta,
    )
    return True


async def hostpaths_refused_now(conn: Connection, doc: JobDocument) -> str:
    """Why the job's hostPath mounts may no longer be placed ("" when they may): the clusters' policies
    as stored now, which an admin may have narrowed since the job was accepted (ADR 0006)."""
    names = sorted(
        {role.cluster for role in doc.spec.tasks if any(m.type is MountType.HOST_PATH for m in role.mounts)}
    )
    if not names:
        return ""
    policies = {c.name: c.hostpath_allow for c in await repo.known_clusters(conn, names)}
    refusals = hostpath_refusals(doc.spec, policies)
    return "; ".join(message for _, message in refusals)


async def emit_placed(
    conn: Connection,
    job: JobRow,
    doc: JobDocument,
    workers: Sequence[WorkerFacts],
    virtual_ips: dict[str, str] | None,
    domain_cidr: str | None,
    settings: SchedulerSettings,
    meta: Meta,
) -> None:
    """One ``scheduler.worker.placed.v1`` per worker, in rank order (Header first, rank 0)."""
    spec = doc.spec
    roles = {role.name: role for role in spec.tasks}
    header = next(w for w in workers if w.is_header)
    if virtual_ips is not None:
        header_address = virtual_ips[header.worker_id]
    else:
        cluster = await repo.get_cluster(conn, header.cluster)
        # On the local runtime each worker has its own address, which only the agent knows: it fills
        # in the Header's address itself when this is empty.
        local = cluster is not None and cluster.runtime == LOCAL_RUNTIME
        header_address = "" if local else await repo.node_address(conn, header.cluster, header.node)
    # The Header waits until Ray reports the job's GPUs (RLARK_EXPECTED_GPUS), so every placement carries them.
    total_gpus = sum(w.gpus for w in workers)
    rlinf_config = rlinf_config_yaml(doc)
    events = []
    for w in sorted(workers, key=lambda w: w.rank):
        role = roles[w.role]
        events.append(
            envelope(
                WorkerPlaced(
                    job_id=job.id,
                    worker_id=w.worker_id,
                    cluster=w.cluster,
                    node=w.node,
                    role=w.role,
                    index=w.index,
                    rank=w.rank,
                    num_nodes=len(workers),
                    is_header=w.is_header,
                    gpus=w.gpus,
                    image=role.image,
                    prepare_script=role.prepare_script or "",
                    run_script=(spec.run_script or "") if w.is_header else "",
                    env=dict(role.env),
                    mounts=[
                        Mount(
                            name=m.name,
                            type=m.type.value,
                            source=m.source,
                            path=m.path,
                            read_only=m.read_only,
                            secret_ref=m.secret_ref,
                        )
                        for m in role.mounts
                    ],
                    ssh_public_keys=list(job.ssh_public_keys),
                    virtual_ip=virtual_ips[w.worker_id] if virtual_ips is not None else None,
                    domain=job.network_domain if virtual_ips is not None else None,
                    domain_cidr=domain_cidr,
                    header_address=header_address,
                    ray_port=settings.ray_port,
                    outputs=list(spec.outputs),
                    tensorboard_dir=spec.tensorboard_dir or "",
                    join_deadline_s=settings.join_deadline_s,
                    total_gpus=total_gpus,
                    rlinf_config=rlinf_config,
                    owner=job.owner,
                ),
                job.id,
                meta,
            )
        )
    await add_events(conn, events)


async def store_pending_reason(
    conn: Connection, job_id: str, reason: PendingReason, rounds_waited: int, now: datetime
) -> bool:
    """Store a Pending job's explanation when it changed; the timeline gets a 'pending' row."""
    view = pending_view(reason)
    if not await repo.set_pending_reason(conn, job_id, view, reason.message, now):
        return False
    await repo.insert_event(
        conn,
        job_id,
        "pending",
        at=now,
        to_status=JobStatus.PENDING.value,
        reason=reason.message,
        details={"code": reason.code.value, "rounds_waited": rounds_waited, "parts": view["parts"]},
    )
    await repo.notify_activity(conn, job_id)
    return True


def pending_view(reason: PendingReason) -> dict[str, Any]:
    """A pending explanation as JSON: per-role funnel counts, gang conflicts, the sentence; each
    sentence also as ``parts``, catalogue clauses a client says in its user's language (ADR 0011)."""
    return {
        "code": reason.code.value,
        "message": reason.message,
        "parts": [said.wire() for said in pending_texts(reason)],
        "roles": [
            {
                "role": r.role,
                "cluster": r.cluster,
                "selector": dict(r.selector),
                "needed": r.needed,
                "gpus_per_worker": r.gpus_per_worker,
                "cluster_known": r.cluster_known,
                "cluster_online": r.cluster_online,
                "in_cluster": r.in_cluster,
                "matching": r.matching,
                "ready": r.ready,
                "schedulable": r.schedulable,
                "enough": r.enough,
                "gpus_allocatable": r.gpus_allocatable,
                "gpus_used_external": r.gpus_used_external,
                "gpus_held": r.gpus_held,
                "code": r.code.value,
                "message": r.message,
                "parts": [said.wire() for said in role_texts(r)],
                "alternatives": [{"cluster": a.cluster, "nodes": a.nodes} for a in r.alternatives],
            }
            for r in reason.roles
        ],
        "conflicts": [
            {
                "cluster": c.cluster,
                "roles": list(c.roles),
                "needed": c.needed,
                "nodes": c.nodes,
                "message": c.message,
                "parts": [conflict_text(c).wire()],
            }
            for c in reason.conflicts
        ],
    }


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
    workers = [w.facts for w in await repo.workers_of(conn, job.id)]
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
    await repo.set_virtual_ips(conn, {w.worker_id: addresses[w.worker_id] for w in workers})
    await repo.set_domain_cidr(conn, job.id, payload.cidr)
    doc = JobDocument.model_validate(job.spec)
    await emit_placed(conn, job, doc, workers, addresses, payload.cidr, settings, meta)
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
    workers = await repo.workers_of(conn, job.id)
    cidr = (await repo.domains(conn)).get(payload.domain)
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
    job = await repo.get_job(conn, job_id, for_update=True)
    if job is None or job.status is not JobStatus.SCHEDULED or not job.network_domain:
        log.info("allocation answer ignored", job_id=job_id, status=job.status if job else None)
        return None
    if answered and job.address_request_id and answered != job.address_request_id:
        log.info("allocation answer for an older request ignored", job_id=job_id)
        return None
    return job


async def apply_addresses_released(conn: Connection, payload: AddressesReleased) -> None:
    """Addresses came free in a domain: jobs waiting for some are tried again now."""
    await repo.add_changes(conn, "job", await repo.release_holds(conn, payload.domain))


# ------------------------------------------------------------------------------------- read models


async def apply_cluster_state(conn: Connection, state: ClusterState, meta: Meta, now: datetime) -> None:
    """Store a cluster's state; when it is offline (or deleted), its running jobs are Lost."""
    await repo.upsert_cluster(
        conn,
        state.name,
        runtime=state.runtime,
        online=state.online,
        pod_cidrs=state.pod_cidrs,
        service_cidrs=state.service_cidrs,
        deleted=state.deleted,
        hostpath_allow=state.hostpath_allow,
    )
    await repo.add_change(conn, "cluster", state.name)
    if state.online and not state.deleted:
        return
    for job in await repo.holding_jobs_on_cluster(conn, state.name):
        if job.status is JobStatus.SCHEDULED:
            await back_to_pending(
                conn,
                job,
                f"cluster {state.name} went offline before the workers were created",
                now,
                meta,
                hold_until=None,
                release_addresses=True,
            )
        else:
            await end_job(
                conn,
                job,
                JobStatus.LOST,
                f"cluster {state.name} went offline while the job's workers were running",
                now,
                meta,
                details={"cluster": state.name},
            )


async def apply_node_state(conn: Connection, state: NodeState) -> None:
    await repo.upsert_node(
        conn,
        cluster=state.cluster,
        name=state.name,
        ready=state.ready,
        schedulable=state.schedulable,
        gone=state.gone,
        gpu_count=state.gpu_count,
        gpu_model=state.gpu_model,
        gpu_allocatable=max(state.gpu_allocatable, 0),
        gpu_allocated=max(state.gpu_allocated, 0),
        gpu_allocated_foreign=max(state.gpu_allocated_foreign, 0),
        labels=state.labels,
        addresses=state.addresses,
        observed_at=state.observed_at,
    )
    await repo.add_change(conn, "node", f"{state.cluster}/{state.name}")


async def apply_key(conn: Connection, state: KeyState, meta: Meta, *, deleted: bool, now: datetime) -> None:
    """Keep the public keys; a deleted key leaves the jobs that used it (running ones at once)."""
    if not deleted:
        await repo.upsert_key(
            conn,
            key_id=state.key_id,
            owner=state.owner,
            name=state.name,
            key_type=state.key_type,
            fingerprint=state.fingerprint,
            public_key=state.public_key,
        )
        return
    await repo.delete_key(conn, state.key_id)
    for job in await repo.active_jobs_with_key(conn, state.key_id):
        keep = [i for i, key_id in enumerate(job.ssh_key_ids) if key_id != state.key_id]
        await _set_job_keys(
            conn,
            job,
            [job.ssh_key_ids[i] for i in keep],
            [job.ssh_key_names[i] for i in keep if i < len(job.ssh_key_names)],
            [job.ssh_public_keys[i] for i in keep if i < len(job.ssh_public_keys)],
            now,
            meta,
        )
        log.info("deleted key removed from job", job_id=job.id, fingerprint=state.fingerprint)


async def apply_domain(conn: Connection, state: DomainState, *, deleted: bool) -> None:
    if deleted:
        await repo.delete_domain(conn, state.name)
    else:
        await repo.upsert_domain(conn, state.name, state.cidr)


# -------------------------------------------------------------------------------------- agent reports


async def _reported_worker(conn: Connection, cluster: str, job_id: str, wid: str) -> repo.WorkerRow | None:
    """The stored worker an agent reports on; a report naming another job's or cluster's worker is a
    poison message (its topic proved the cluster, not the worker)."""
    worker = await repo.get_worker(conn, wid)
    if worker is None:
        log.info("report for an unknown worker ignored", worker_id=wid, cluster=cluster)
        return None
    if worker.job_id != job_id:
        raise PoisonMessage(f"worker {wid} belongs to job {worker.job_id}, not {job_id}")
    if worker.facts.cluster != cluster:
        raise PoisonMessage(f"cluster {cluster} reported on worker {wid} of cluster {worker.facts.cluster}")
    return worker


def reported_reason(payload: WorkerStatusChanged) -> str:
    """The agent's reason, as the catalogue sentence it named when this side says it the same way
    (agents and the scheduler may run different catalogue versions: then the words as sent)."""
    if payload.reason_key and payload.reason_key in catalogue("en"):
        said = Text(payload.reason_key, payload.reason_params)
        if said.english == payload.reason:
            return said
    return payload.reason


async def apply_worker_status(
    conn: Connection, payload: WorkerStatusChanged, meta: Meta, settings: SchedulerSettings, now: datetime
) -> None:
    """Fold one worker report into the worker and the job (see ``domain.jobs``)."""
    if await _reported_worker(conn, payload.cluster, payload.job_id, payload.worker_id) is None:
        return
    job = await repo.get_job(conn, payload.job_id, for_update=True)
    assert job is not None
    workers = [w.facts for w in await repo.workers_of(conn, job.id)]
    before = next(w for w in workers if w.worker_id == payload.worker_id)
    reason = reported_reason(payload)
    report = WorkerReport(
        worker_id=payload.worker_id,
        phase=payload.phase,
        reason=reason,
        exit_code=payload.exit_code,
        ray_nodes_joined=payload.ray_nodes_joined,
        ray_nodes_expected=payload.ray_nodes_expected,
        address=payload.address,
    )
    fold = fold_report(job.status, workers, report)
    progress = ray_progress(report, before)
    progress_changed = progress is not None and progress != (job.ray_nodes_joined, job.ray_nodes_expected)
    if fold.changed:
        await repo.update_worker(conn, fold.worker, now, payload.at)
    if progress is not None and progress_changed:
        await repo.set_ray_progress(conn, job.id, *progress)
    if fold.changed or progress_changed:
        details: dict[str, Any] = {"exit_code": fold.worker.exit_code, "node": fold.worker.node}
        if progress is not None:
            details["ray_nodes_joined"], details["ray_nodes_expected"] = progress
        await repo.insert_event(
            conn,
            job.id,
            "worker",
            at=now,
            worker_id=payload.worker_id,
            phase=fold.worker.phase,
            reason=reason,
            details=details,
        )
        await repo.notify_activity(conn, job.id)
    if fold.worker.present != before.present:
        await repo.add_change(conn, "node", f"{before.cluster}/{before.node}")
    step = fold.transition
    if step is None:
        return
    if step.to_status.terminal:
        details = dict(step.details)
        if step.to_status is JobStatus.FAILED and settings.failure_log_lines:
            details["last_lines"] = await repo.last_lines(conn, payload.worker_id, settings.failure_log_lines)
        await end_job(
            conn, job, step.to_status, step.reason, now, meta, details=details, exit_code=step.exit_code
        )
    else:
        await transition(conn, job, job.status, step.to_status, step.reason, now, meta, details=step.details)


async def apply_worker_logs(conn: Connection, payload: WorkerLogsEmitted, settings: SchedulerSettings) -> int:
    """Keep a batch of output lines (deduplicated by worker and line number); returns new lines."""
    if await _reported_worker(conn, payload.cluster, payload.job_id, payload.worker_id) is None:
        return 0
    if payload.first_seq < 0:
        raise PoisonMessage("first_seq must not be negative")
    limit = settings.log_line_max_chars
    lines = [line if len(line) <= limit else line[:limit] + " […]" for line in payload.lines]
    added = await repo.insert_logs(conn, payload.job_id, payload.worker_id, payload.first_seq, lines)
    if added:
        await repo.notify_activity(conn, payload.job_id)
    return added


async def apply_worker_outputs(conn: Connection, payload: WorkerOutputsListed) -> None:
    if await _reported_worker(conn, payload.cluster, payload.job_id, payload.worker_id) is None:
        return
    files = [{"path": f.path, "size": f.size} for f in payload.files]
    await repo.upsert_outputs(conn, payload.job_id, payload.worker_id, files, payload.truncated)
    await repo.notify_activity(conn, payload.job_id)


# ------------------------------------------------------------------------------------- user requests


async def cancel_job(conn: Connection, caller: Caller, job_id: str, now: datetime) -> JobRow:
    """Cancel a job: a Pending one leaves the queue; a placed one is stopped like any ending job.
    Cancelling a cancelled job is a no-op; other ended jobs are refused (409)."""
    job = visible(await repo.get_job(conn, job_id, for_update=True), caller)
    meta = Meta.from_request()
    reason = text("job.cancelled", user=caller.user)
    if job.status is JobStatus.CANCELLED:
        return job
    if job.status.terminal:
        raise ApiError(
            409, "job_already_ended", text("job_already_ended", job=job.id, status=job.status.value), "job_id"
        )
    if job.status is JobStatus.PENDING:
        await transition(conn, job, job.status, JobStatus.CANCELLED, reason, now, meta)
        await repo.add_change(conn, "job", job.id)
    else:
        await end_job(conn, job, JobStatus.CANCELLED, reason, now, meta)
    updated = await repo.get_job(conn, job.id)
    assert updated is not None
    return updated


async def update_job_keys(
    conn: Connection, caller: Caller, job_id: str, names: Sequence[str], now: datetime
) -> JobRow:
    """Replace the job's SSH keys by the owner's keys named ``names``; running workers are told at
    once (``scheduler.job.keys_updated.v1``), nothing restarts."""
    job = visible(await repo.get_job(conn, job_id, for_update=True), caller)
    if job.status.terminal:
        raise ApiError(
            409, "job_already_ended", text("job_already_ended", job=job.id, status=job.status.value), "job_id"
        )
    owned: dict[str, repo.KeyRow] = {}
    for key in await repo.keys_of(conn, job.owner):
        owned.setdefault(key.name, key)
    errors = [
        {"code": "ssh_key_unknown", "field": f"ssh_keys[{i}]", "message": said, **said.wire()}
        for i, name in enumerate(names)
        if name not in owned
        for said in [text("ssh_key_unknown.update", name=name)]
    ]
    if errors:
        first = errors[0]
        raise ApiError(422, first["code"], first["message"], first["field"], {"errors": errors})
    chosen = [owned[name] for name in dict.fromkeys(names)]
    await _set_job_keys(
        conn,
        job,
        [k.key_id for k in chosen],
        [k.name for k in chosen],
        [k.public_key for k in chosen],
        now,
        Meta.from_request(),
    )
    updated = await repo.get_job(conn, job.id)
    assert updated is not None
    log.info("job keys updated", job_id=job.id, fingerprints=[k.fingerprint for k in chosen])
    return updated


async def _set_job_keys(
    conn: Connection,
    job: JobRow,
    key_ids: list[str],
    names: list[str],
    public_keys: list[str],
    now: datetime,
    meta: Meta,
) -> None:
    await repo.set_keys(conn, job.id, key_ids=key_ids, names=names, public_keys=public_keys, now=now)
    await repo.insert_event(
        conn, job.id, "keys", at=now, reason=text("job.keys_updated"), details={"ssh_keys": names}
    )
    await repo.notify_activity(conn, job.id)
    if job.status not in (JobStatus.STARTING, JobStatus.RUNNING):
        return  # placements not sent yet carry the new keys when they are
    workers = [w.facts for w in await repo.workers_of(conn, job.id)]
    # One event per cluster: each goes on that cluster's placements topic, read by its agent only.
    await add_events(
        conn,
        [
            envelope(
                JobKeysUpdated(
                    job_id=job.id,
                    clusters=[cluster],
                    cluster=cluster,
                    worker_ids=[w.worker_id for w in workers if w.cluster == cluster],
                    ssh_public_keys=public_keys,
                ),
                job.id,
                meta,
            )
            for cluster in sorted({w.cluster for w in workers})
        ],
    )


# ------------------------------------------------------------------------------------ tunnel health


async def apply_tunnel_state(
    conn: Connection, payload: TunnelStateChanged, meta: Meta, settings: SchedulerSettings, now: datetime
) -> None:
    """Store an agent's report on one link of a domain, then judge the domain's jobs (see
    ``domain.tunnels``). The report's time is the agent's, capped at ours."""
    if not payload.domain or not payload.peer or payload.peer == payload.cluster:
        raise PoisonMessage("a tunnel state report names a domain and a peer other than its cluster")
    if payload.state == LINK_CLOSED:  # no workers of the domain on that side any more: forget the link
        stored = await repo.delete_tunnel_link(
            conn, payload.domain, payload.cluster, payload.peer, min(payload.at, now)
        )
    else:
        stored = await repo.upsert_tunnel_link(
            conn,
            domain=payload.domain,
            cluster=payload.cluster,
            peer=payload.peer,
            up=payload.state == "up",
            last_error=payload.last_error[:500],
            rtt_ms=payload.rtt_ms,
            bytes_sent=max(payload.bytes_sent, 0),
            bytes_received=max(payload.bytes_received, 0),
            at=min(payload.at, now),
        )
    if stored:
        await judge_tunnels(conn, payload.domain, settings, now, meta)


async def judge_tunnels(
    conn: Connection, domain: str | None, settings: SchedulerSettings, now: datetime, meta: Meta
) -> int:
    """Apply the tunnel rules to the Starting/Running jobs concerned (of ``domain``, or of every
    domain: the placement loop calls this each cycle so a grace ends on time without a new report).
    Returns how many jobs changed."""
    changed = 0
    links: dict[str, list[LinkObservation]] = {}
    for job_id in await repo.tunnel_judged_jobs(conn, domain):
        job = await repo.get_job(conn, job_id, for_update=True)
        if job is None or not job.network_domain:
            continue
        if job.network_domain not in links:
            links[job.network_domain] = await repo.tunnel_links(conn, job.network_domain)
        clusters = {w.facts.cluster for w in await repo.workers_of(conn, job.id)}
        outage = job_outage(job.network_domain, clusters, links[job.network_domain], job.scheduled_at)
        stored = await repo.tunnel_reason(conn, job.id)
        shown = stored if stored is not None and stored == job.reason else None
        decision = decide(job.status, shown, outage, now, settings.tunnel_grace_s)
        details: dict[str, Any] = {}
        if outage is not None:
            details = {
                "domain": outage.domain,
                "clusters": [outage.a, outage.b],
                "down_since": outage.since.isoformat(),
                "last_error": outage.last_error,
                "grace_s": settings.tunnel_grace_s,
            }
        if decision.action is Action.FAIL:
            await end_job(conn, job, JobStatus.FAILED, decision.reason, now, meta, details=details)
        elif decision.action is Action.MARK:
            await repo.mark_tunnel_reason(conn, job.id, decision.reason, now)
            await _tunnel_event(conn, job, decision.reason, now, details)
        elif outage is None and stored is not None:
            shown_now = await repo.clear_tunnel_reason(conn, job.id, now)
            details = {"tunnel_up": True, "cleared": stored}
            await _tunnel_event(conn, job, shown_now, now, details)
        else:
            continue
        changed += 1
        log.info("tunnel health applied", job_id=job.id, action=decision.action.value)
    return changed


async def _tunnel_event(
    conn: Connection, job: JobRow, reason: str, now: datetime, details: dict[str, Any]
) -> None:
    """A timeline row of kind 'tunnel' that keeps the status (like the 'pending' reason updates)."""
    await repo.insert_event(
        conn,
        job.id,
        "tunnel",
        at=now,
        from_status=job.status.value,
        to_status=job.status.value,
        reason=reason,
        details=details,
    )
    await repo.notify_activity(conn, job.id)
