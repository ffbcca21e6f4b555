"""Users' requests on a job: cancel it, requeue it, replace its SSH keys."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import structlog
from rlark_contracts.messages import text
from rlark_platform.db.pool import Connection
from rlark_platform.errors import ApiError
from rlark_platform.identity import Caller

from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.restarts import Requeued, Restart
from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers.lifecycle import end_job, restart_job, set_job_keys, visible
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository.jobs import JobRow

log = structlog.get_logger(__name__)


async def cancel_job(conn: Connection, caller: Caller, job_id: str, now: datetime) -> JobRow:
    """Cancel a job: a Pending one leaves the queue; a placed one is stopped like any ending job.
    Cancelling a cancelled job is a no-op; other ended jobs are refused (409)."""
    job = visible(await jobs_repo.get_job(conn, job_id, for_update=True), caller)
    meta = Meta.from_request()
    reason = text("job.cancelled", user=caller.user)
    if job.status is JobStatus.CANCELLED:
        return job
    if job.status.terminal:
        raise ApiError(
            409, "job_already_ended", text("job_already_ended", job=job.id, status=job.status.value), "job_id"
        )
    # A Pending job has no workers of its attempt; a restarting one may still hold its failed
    # attempt's addresses (ADR 0014), which ending it gives back.
    await end_job(conn, job, JobStatus.CANCELLED, reason, now, meta)
    updated = await jobs_repo.get_job(conn, job.id)
    assert updated is not None
    return updated


PLACED = (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)


async def requeue_job(
    conn: Connection, caller: Caller, job_id: str, now: datetime, teardown_s: float
) -> JobRow:
    """Stop a placed job's attempt on purpose and queue its next one (ADR 0014): its workers are stopped
    (the Header's run script gets SIGTERM and ``spec.terminationGracePeriodSeconds`` to checkpoint), and the
    whole gang is placed again once they are gone, resuming per ``spec.resume``. Not a failure: it uses up
    no restart of the policy. A job that is not placed is refused (409)."""
    job = visible(await jobs_repo.get_job(conn, job_id, for_update=True), caller)
    if job.status not in PLACED:
        raise ApiError(
            409, "job_not_placed", text("job_not_placed", job=job.id, status=job.status.value), "job_id"
        )
    attempt = job.attempt + 1
    reason = text("job.requeued", attempt=attempt, user=caller.user)
    restart = Restart(attempt=attempt, restarts=job.restarts, not_before=now, reason=reason)
    await restart_job(conn, job, restart, Requeued(reason), now, Meta.from_request(), teardown_s=teardown_s)
    updated = await jobs_repo.get_job(conn, job.id)
    assert updated is not None
    return updated


async def update_job_keys(
    conn: Connection, caller: Caller, job_id: str, names: Sequence[str], now: datetime
) -> JobRow:
    """Replace the job's SSH keys by the owner's keys named ``names``; running workers are told at
    once (``scheduler.job.keys_updated.v1``), nothing restarts."""
    job = visible(await jobs_repo.get_job(conn, job_id, for_update=True), caller)
    if job.status.terminal:
        raise ApiError(
            409, "job_already_ended", text("job_already_ended", job=job.id, status=job.status.value), "job_id"
        )
    owned: dict[str, read_models.KeyRow] = {}
    for key in await read_models.keys_of(conn, job.owner):
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
    await set_job_keys(
        conn,
        job,
        [k.key_id for k in chosen],
        [k.name for k in chosen],
        [k.public_key for k in chosen],
        now,
        Meta.from_request(),
    )
    updated = await jobs_repo.get_job(conn, job.id)
    assert updated is not None
    log.info("job keys updated", job_id=job.id, fingerprints=[k.fingerprint for k in chosen])
    return updated
