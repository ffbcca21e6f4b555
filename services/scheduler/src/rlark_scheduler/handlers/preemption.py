"""Applying a preemption plan (issue 20 item 3, ADR 0020): the victims stop like a requeue, and both sides'
timelines say why.

Each victim's attempt stops as ``POST /jobs/{id}:requeue`` stops it (ADR 0014): its workers are asked to stop,
the Header's run script gets SIGTERM and ``spec.terminationGracePeriodSeconds`` to checkpoint, and the job is
Pending again under its next attempt, which resumes from its newest checkpoint (``spec.resume``, ADR 0015)
once GPUs are free. It uses up no restart of its policy. Neither side learns the other's job or owner: the
victim reads that a job of higher priority or inside its quota needed what it borrowed, the waiting job how
many borrowing jobs are being stopped for it (the log names both, for operators).
"""

from __future__ import annotations

from datetime import datetime

import structlog
from rlark_contracts.messages import text
from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.document.model import JobDocument
from rlark_scheduler.domain.jobs import JobStatus
from rlark_scheduler.domain.preemption import Preemption
from rlark_scheduler.domain.restarts import Requeued, Restart
from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers.lifecycle import restart_job
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import timeline as timeline_repo

log = structlog.get_logger(__name__)

PLACED = (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)


async def preempt(conn: Connection, plan: Preemption, now: datetime, teardown_s: float) -> float | None:
    """Stop ``plan.victims`` for ``plan.job_id`` in the caller's transaction. Returns the longest termination
    grace among the victims (seconds), or None when nothing was done: the waiting job is no longer Pending,
    or a victim is no longer placed (the loop plans again from what changed)."""
    job = await jobs_repo.get_job(conn, plan.job_id, for_update=True)
    if job is None or job.status is not JobStatus.PENDING:
        return None
    victims = [await jobs_repo.get_job(conn, victim, for_update=True) for victim in plan.victims]
    placed = [v for v in victims if v is not None and v.status in PLACED]
    if len(placed) != len(plan.victims):
        return None
    grace = 0.0
    for victim in placed:
        attempt = victim.attempt + 1
        reason = text("job.preempted", attempt=attempt)
        restart = Restart(attempt=attempt, restarts=victim.restarts, not_before=now, reason=reason)
        await restart_job(
            conn,
            victim,
            restart,
            Requeued(reason),
            now,
            Meta(),
            teardown_s=teardown_s,
            details={"preempted": True},
        )
        spec = JobDocument.model_validate(victim.spec).spec
        grace = max(grace, float(spec.termination_grace_period_seconds or 0))
    said = text("job.preempting", count=len(placed))
    await timeline_repo.insert_event(
        conn,
        job.id,
        "pending",
        at=now,
        to_status=JobStatus.PENDING.value,
        reason=said,
        details={"preempting": len(placed)},
    )
    await changes_repo.notify_activity(conn, job.id)
    log.info(
        "borrowing jobs preempted",
        job_id=job.id,
        project=job.project,
        victims=list(plan.victims),
        lost_work_s=round(plan.lost_work_s, 1),
    )
    return grace
