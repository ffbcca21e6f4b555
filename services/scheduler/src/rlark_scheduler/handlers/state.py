"""Other services' state into the scheduler's read models (the ``scheduler-state`` consumer), and
what it means for jobs: a cluster offline past its grace (or deleted) loses the jobs running on it, a
deleted key leaves the jobs that used it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog
from rlark_contracts.events.inventory import ClusterState, NodeState
from rlark_contracts.events.keys import KeyState, SecretState
from rlark_contracts.events.netdomain import DomainState
from rlark_contracts.messages import Text, text
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.document.model import RestartOn
from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.restarts import Failure
from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers.lifecycle import back_to_pending, fail_job, set_job_keys
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository.jobs import JobRow
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)


async def apply_cluster_state(
    conn: Connection, state: ClusterState, meta: Meta, now: datetime, settings: SchedulerSettings
) -> None:
    """Store a cluster's state and tell its jobs (ADR 0029). A cluster deleted, or offline with no grace,
    loses its jobs at once (:func:`lose_jobs_on`). One that goes offline sends its jobs' Scheduled ones back
    to Pending and tells the Starting/Running ones how long it has to come back (``cluster_offline_grace_s``;
    :func:`judge_offline_clusters` loses them when it ends); one back online in time tells them so."""
    previous = await read_models.upsert_cluster(
        conn,
        state.name,
        runtime=state.runtime,
        online=state.online,
        pod_cidrs=state.pod_cidrs,
        service_cidrs=state.service_cidrs,
        deleted=state.deleted,
        hostpath_allow=state.hostpath_allow,
        labels=state.labels,
        category=state.category,
        region=state.region,
        unmountable=state.unmountable,
        at=now,
    )
    await changes_repo.add_change(conn, "cluster", state.name)
    was_online = previous is None or (previous.online and not previous.deleted)
    if state.deleted or (not state.online and settings.cluster_offline_grace_s == 0):
        await lose_jobs_on(conn, state.name, now, meta, settings)
    elif not state.online and was_online:
        held = text(
            "job.cluster_offline.held", cluster=state.name, grace_s=f"{settings.cluster_offline_grace_s:g}"
        )
        await lose_jobs_on(conn, state.name, now, meta, settings, running=held)
    elif state.online and not was_online:
        back = text("job.cluster_offline.back", cluster=state.name)
        for job in await jobs_repo.holding_jobs_on_cluster(conn, state.name):
            if job.status is not JobStatus.SCHEDULED:
                await _cluster_event(conn, job, back, now, {"cluster": state.name, "online": True})


async def judge_offline_clusters(
    conn: Connection, settings: SchedulerSettings, now: datetime, meta: Meta
) -> int:
    """Lose the jobs of every cluster offline for longer than ``cluster_offline_grace_s`` (the placement loop
    calls this each cycle). Returns how many clusters were judged."""
    cutoff = now - timedelta(seconds=settings.cluster_offline_grace_s)
    clusters = await read_models.clusters_offline_before(conn, cutoff)
    for name in clusters:
        await lose_jobs_on(conn, name, now, meta, settings)
    return len(clusters)


async def lose_jobs_on(
    conn: Connection,
    cluster: str,
    now: datetime,
    meta: Meta,
    settings: SchedulerSettings,
    *,
    running: Text | None = None,
) -> None:
    """The jobs holding workers on ``cluster`` when it went away: Scheduled ones go back to Pending; Starting
    and Running ones are Lost — or start a new attempt when their restart policy names ``NodeGone`` (ADR
    0014) — unless ``running`` is given: then that is only said on their timeline."""
    for job in await jobs_repo.holding_jobs_on_cluster(conn, cluster):
        if job.status is JobStatus.SCHEDULED:
            await back_to_pending(
                conn,
                job,
                text("job.cluster_offline.before_workers", cluster=cluster),
                now,
                meta,
                hold_until=None,
                release_addresses=True,
            )
        elif running is not None:
            details = {"cluster": cluster, "online": False, "grace_s": settings.cluster_offline_grace_s}
            await _cluster_event(conn, job, running, now, details)
        else:
            failure = Failure(RestartOn.NODE_GONE, text("job.cluster_offline.while_running", cluster=cluster))
            await fail_job(
                conn,
                job,
                failure,
                now,
                meta,
                teardown_s=settings.restart_teardown_s,
                to_status=JobStatus.LOST,
                details={"cluster": cluster},
            )


async def _cluster_event(
    conn: Connection, job: JobRow, reason: Text, now: datetime, details: dict[str, Any]
) -> None:
    """A timeline row of kind 'cluster' that keeps the job's status."""
    status = job.status.value
    await timeline_repo.insert_event(
        conn, job.id, "cluster", at=now, from_status=status, to_status=status, reason=reason, details=details
    )
    await changes_repo.notify_activity(conn, job.id)


async def apply_node_state(conn: Connection, state: NodeState) -> None:
    await read_models.upsert_node(
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
    await changes_repo.add_change(conn, "node", f"{state.cluster}/{state.name}")


async def apply_secret(conn: Connection, state: SecretState, *, deleted: bool) -> None:
    """Keep which secrets each user and project has (names only): what jobs may name (ADR 0025). A job naming
    a secret deleted later is told when its next worker is created (the reveal's 404)."""
    if deleted:
        await read_models.delete_secret_name(conn, state.secret_id)
    else:
        await read_models.upsert_secret_name(
            conn, state.secret_id, state.scope, state.owner, state.name, state.version
        )


async def apply_key(conn: Connection, state: KeyState, meta: Meta, *, deleted: bool, now: datetime) -> None:
    """Keep the public keys; a deleted key leaves the jobs that used it (running ones at once)."""
    if not deleted:
        await read_models.upsert_key(
            conn,
            key_id=state.key_id,
            owner=state.owner,
            name=state.name,
            key_type=state.key_type,
            fingerprint=state.fingerprint,
            public_key=state.public_key,
        )
        return
    await read_models.delete_key(conn, state.key_id)
    for job in await jobs_repo.active_jobs_with_key(conn, state.key_id):
        keep = [i for i, key_id in enumerate(job.ssh_key_ids) if key_id != state.key_id]
        await set_job_keys(
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
    """Keep the domain and the clusters it joins; the placement loop re-reads them (what jobs whose clusters it
    chooses may span through, ADR 0026)."""
    if deleted:
        await read_models.delete_domain(conn, state.name)
    else:
        await read_models.upsert_domain(conn, state.name, state.cidr, state.clusters)
    await changes_repo.add_change(conn, changes_repo.DOMAINS, state.name)
