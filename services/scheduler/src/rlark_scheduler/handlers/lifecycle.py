"""Status changes every use case of the saga makes: the row, the timeline row and the outbox events
of one change, in the caller's transaction (see the package docstring)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog
from rlark_contracts.events.scheduler import (
    AddressesReleaseRequested,
    JobKeysUpdated,
    JobStatusChanged,
    WorkerStopRequested,
)
from rlark_contracts.messages import text
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller
from rlark_platform.messaging import add_event, add_events

from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.envelopes import Meta, envelope
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository import workers as workers_repo
from rlark_scheduler.repository.jobs import JobRow

log = structlog.get_logger(__name__)


def visible(job: JobRow | None, caller: Caller) -> JobRow:
    """The job when ``caller`` may see it; another user's job is "not found" (never "forbidden")."""
    if job is None or (job.owner != caller.user and not caller.is_admin):
        raise ApiError(404, "job_not_found", text("job_not_found"), "job_id")
    return job


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
    await jobs_repo.set_status(conn, job.id, to_status, reason, details=details, exit_code=exit_code, now=now)
    await timeline_repo.insert_event(
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
    await changes_repo.notify_activity(conn, job.id)
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
    workers = await workers_repo.workers_of(conn, job.id)
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
    await changes_repo.add_change(conn, "job", job.id)


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
    await workers_repo.delete_workers(conn, job.id)
    await transition(conn, job, job.status, JobStatus.PENDING, reason, now, meta)
    await jobs_repo.set_hold(conn, job.id, hold_until)
    if release_addresses and job.network_domain and job.address_request_id:
        await add_event(
            conn, envelope(AddressesReleaseRequested(job_id=job.id, domain=job.network_domain), job.id, meta)
        )
    await jobs_repo.set_address_request(conn, job.id, None)
    await changes_repo.add_change(conn, "job", job.id)


async def set_job_keys(
    conn: Connection,
    job: JobRow,
    key_ids: list[str],
    names: list[str],
    public_keys: list[str],
    now: datetime,
    meta: Meta,
) -> None:
    """Give ``job`` these SSH keys (a user's replacement, or a deleted key left out): the row, the
    timeline, and, once placements were sent, one ``scheduler.job.keys_updated.v1`` per cluster."""
    await jobs_repo.set_keys(conn, job.id, key_ids=key_ids, names=names, public_keys=public_keys, now=now)
    await timeline_repo.insert_event(
        conn, job.id, "keys", at=now, reason=text("job.keys_updated"), details={"ssh_keys": names}
    )
    await changes_repo.notify_activity(conn, job.id)
    if job.status not in (JobStatus.STARTING, JobStatus.RUNNING):
        return  # placements not sent yet carry the new keys when they are
    workers = [w.facts for w in await workers_repo.workers_of(conn, job.id)]
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
