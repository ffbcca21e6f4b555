"""Other services' state into the scheduler's read models (the ``scheduler-state`` consumer), and
what it means for jobs: a cluster offline loses the jobs running on it, a deleted key leaves the
jobs that used it."""

from __future__ import annotations

from datetime import datetime

import structlog
from rlark_contracts.events.inventory import ClusterState, NodeState
from rlark_contracts.events.keys import KeyState, SecretState
from rlark_contracts.events.netdomain import DomainState
from rlark_contracts.messages import text
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.document.model import RestartOn
from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.restarts import Failure
from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers.lifecycle import back_to_pending, fail_job, set_job_keys
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)


async def apply_cluster_state(
    conn: Connection, state: ClusterState, meta: Meta, now: datetime, settings: SchedulerSettings
) -> None:
    """Store a cluster's state; when it is offline (or deleted), its running jobs are Lost — or start
    a new attempt when their restart policy names ``NodeGone`` (ADR 0014)."""
    await read_models.upsert_cluster(
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
    )
    await changes_repo.add_change(conn, "cluster", state.name)
    if state.online and not state.deleted:
        return
    for job in await jobs_repo.holding_jobs_on_cluster(conn, state.name):
        if job.status is JobStatus.SCHEDULED:
            await back_to_pending(
                conn,
                job,
                text("job.cluster_offline.before_workers", cluster=state.name),
                now,
                meta,
                hold_until=None,
                release_addresses=True,
            )
        else:
            failure = Failure(
                RestartOn.NODE_GONE, text("job.cluster_offline.while_running", cluster=state.name)
            )
            await fail_job(
                conn,
                job,
                failure,
                now,
                meta,
                teardown_s=settings.restart_teardown_s,
                to_status=JobStatus.LOST,
                details={"cluster": state.name},
            )


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
