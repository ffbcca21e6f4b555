"""Status changes every use case of the saga makes: the row, the timeline row and the outbox events
of one change, in the caller's transaction (see the package docstring).

A failure that would end a job goes through :func:`fail_job`, which asks the job's restart policy
(``domain.restarts``) whether it becomes a new attempt instead (:func:`restart_job`, ADR 0014)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from rlark_contracts import Envelope
from rlark_contracts.events.scheduler import (
    AddressesReleaseRequested,
    JobKeysUpdated,
    JobStatusChanged,
    WorkerStopRequested,
)
from rlark_contracts.messages import Text, text
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller
from rlark_platform.messaging import add_event, add_events

from rlark_scheduler.domain import restarts
from rlark_scheduler.domain.document.model import JobDocument, RestartPolicy
from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.restarts import REQUEUED, Failure, Requeued, Restart
from rlark_scheduler.envelopes import Meta, envelope
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository import workers as workers_repo
from rlark_scheduler.repository.jobs import JobRow, NewStatus
from rlark_scheduler.repository.timeline import NewEvent

log = structlog.get_logger(__name__)


def visible(job: JobRow | None, caller: Caller) -> JobRow:
    """The job when ``caller`` may see it; another user's job is "not found" (never "forbidden")."""
    if job is None or (job.owner != caller.user and not caller.is_admin):
        raise ApiError(404, "job_not_found", text("job_not_found"), "job_id")
    return job


@dataclass(frozen=True)
class StatusChange:
    """One status change of a job (see :func:`transition`)."""

    job: JobRow
    from_status: JobStatus | str
    to_status: JobStatus
    reason: str
    meta: Meta
    details: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None

    @property
    def from_value(self) -> str:
        return self.from_status.value if isinstance(self.from_status, JobStatus) else self.from_status

    def event(self, now: datetime) -> Envelope:
        """Its ``scheduler.job.status_changed.v1``."""
        changed = JobStatusChanged(
            job_id=self.job.id,
            owner=self.job.owner,
            from_status=self.from_value,
            to_status=self.to_status.value,
            reason=self.reason,
            at=now,
            details=self.details,
        )
        return envelope(changed, self.job.id, self.meta)


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
    change = StatusChange(job, from_status, to_status, reason, meta, details or {}, exit_code)
    await record_changes(conn, [change], now)


async def record_changes(
    conn: Connection, changes: Sequence[StatusChange], now: datetime, events: Sequence[Envelope] = ()
) -> None:
    """Record status changes (several of one job in the order made) as :func:`transition` does each, in
    four statements whatever their number; ``events`` go into the outbox after their status events
    (per job and topic, the order given is the order published)."""
    if not changes:
        return
    await jobs_repo.set_statuses(
        conn, [NewStatus(c.job.id, c.to_status, c.reason, c.details, c.exit_code) for c in changes], now
    )
    await timeline_repo.insert_events(
        conn,
        [
            NewEvent(
                c.job.id, "status", now, c.from_value, c.to_status.value, reason=c.reason, details=c.details
            )
            for c in changes
        ],
    )
    await add_events(conn, [*(c.event(now) for c in changes), *events])
    await changes_repo.notify_activity(conn, *dict.fromkeys(c.job.id for c in changes))
    for c in changes:
        log.info("job status changed", job_id=c.job.id, from_status=c.from_value, to_status=c.to_status.value)


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
    await _stop_workers(conn, job, workers, reason, meta)
    if job.network_domain and job.address_request_id:
        await add_event(
            conn, envelope(AddressesReleaseRequested(job_id=job.id, domain=job.network_domain), job.id, meta)
        )
    await changes_repo.add_change(conn, "job", job.id)


async def _stop_workers(
    conn: Connection, job: JobRow, workers: list[workers_repo.WorkerRow], reason: str, meta: Meta
) -> None:
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


def restart_policy(job: JobRow) -> RestartPolicy | None:
    """The job's ``spec.restartPolicy`` as stored (None: a failure ends the job)."""
    return JobDocument.model_validate(job.spec).spec.restart_policy


async def fail_job(
    conn: Connection,
    job: JobRow,
    failure: Failure,
    now: datetime,
    meta: Meta,
    *,
    teardown_s: float,
    to_status: JobStatus = JobStatus.FAILED,
    details: dict[str, Any] | None = None,
) -> Restart | None:
    """A failure that would end ``job`` (as ``to_status``: Failed, or Lost for a cluster gone): a new
    attempt when its restart policy says so (returned), else the end with the failure's reason and,
    in the details, the attempts made."""
    policy = restart_policy(job)
    restart = restarts.decide(policy, job.attempt, job.restarts, failure, now)
    if restart is not None:
        await restart_job(conn, job, restart, failure, now, meta, teardown_s=teardown_s, details=details)
        return restart
    details = {**(details or {}), "attempt": job.attempt, "failure": failure.kind.value}
    if restarts.out_of_restarts(policy, job.restarts, failure):
        details["restarts"] = job.restarts
        details["out_of_restarts"] = True
    await end_job(
        conn, job, to_status, failure.reason, now, meta, details=details, exit_code=failure.exit_code
    )
    return None


async def restart_job(
    conn: Connection,
    job: JobRow,
    restart: Restart,
    failure: Failure | Requeued,
    now: datetime,
    meta: Meta,
    *,
    teardown_s: float,
    details: dict[str, Any] | None = None,
) -> None:
    """Start a new attempt (ADR 0014): every worker of the failed attempt is asked to stop, the job is
    Pending again under its next attempt number, not placed before the policy's backoff has passed
    nor — up to ``teardown_s`` — before every old worker has been reported ended (``hold_until``,
    cleared by :func:`earlier_attempt_ended`). The old attempt's addresses stay allocated until then,
    so a new worker never gets an address an old one still uses; they are released at the end of
    the teardown and asked for again at the next placement (netdomain hands out its lowest free
    addresses, so the same ones come back unless another job took them)."""
    workers = await workers_repo.workers_of(conn, job.id)
    cause = failure.kind.value if isinstance(failure, Failure) else REQUEUED
    # The Header's run script may take its termination grace to checkpoint before its worker ends.
    grace = JobDocument.model_validate(job.spec).spec.termination_grace_period_seconds or 0
    teardown_s = max(teardown_s, grace + teardown_s / 2)
    restart_details = {
        **(details or {}),
        "attempt": restart.attempt,
        "failed_attempt": job.attempt,
        "reason": str(failure.reason),
        "reason_said": failure.reason.wire() if isinstance(failure.reason, Text) else None,
        "failure": cause,
        "exit_code": failure.exit_code,
        "restarts": restart.restarts,
    }
    await transition(
        conn, job, job.status, JobStatus.PENDING, restart.reason, now, meta, details=restart_details
    )
    await _stop_workers(conn, job, workers, restart.reason, meta)
    still_up = any(w.facts.present for w in workers)
    await jobs_repo.start_attempt(conn, job.id, restart.attempt, restart.restarts, restart.not_before)
    if still_up:
        await jobs_repo.set_hold(conn, job.id, now + timedelta(seconds=teardown_s))
    else:
        await _release_addresses(conn, job, meta)
        await jobs_repo.set_hold(conn, job.id, None)
    await changes_repo.add_change(conn, "job", job.id)
    log.info("job restarting", job_id=job.id, attempt=restart.attempt, failure=cause)


async def earlier_attempt_ended(conn: Connection, job: JobRow, meta: Meta) -> None:
    """A worker of an earlier attempt was reported ended: once none is left, a restarting (Pending)
    job gives its old addresses back and may be placed (after its backoff)."""
    if job.status is not JobStatus.PENDING or await workers_repo.earlier_attempts_present(conn, job.id):
        return
    await _release_addresses(conn, job, meta)
    await jobs_repo.set_hold(conn, job.id, None)
    await changes_repo.add_change(conn, "job", job.id)


async def _release_addresses(conn: Connection, job: JobRow, meta: Meta) -> None:
    if job.network_domain and job.address_request_id:
        await add_event(
            conn, envelope(AddressesReleaseRequested(job_id=job.id, domain=job.network_domain), job.id, meta)
        )
        await jobs_repo.set_address_request(conn, job.id, None)


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
