"""Agents' reports on workers: status (folded into the job by ``domain.jobs.fold_report``), log
lines and output manifests. A report naming another job's or cluster's worker is a poison message.

A report on a worker of an earlier attempt (ADR 0014) updates that worker and never moves the job;
once every such worker has ended, a restarting job may be placed again. A failure that would end the
job goes through ``lifecycle.fail_job`` (the restart policy)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog
from rlark_contracts.events.agent import (
    WorkerLogsEmitted,
    WorkerOutputsListed,
    WorkerStatusChanged,
    WorkerUsage,
    WorkerUsageSampled,
)
from rlark_contracts.messages import Text, catalogue, text
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import PoisonMessage

from rlark_scheduler.domain.document.model import RestartOn
from rlark_scheduler.domain.jobs import (
    Fold,
    JobStatus,
    WorkerReport,
    apply_report,
    fold_report,
    ray_progress,
    stopped_by_platform,
)
from rlark_scheduler.domain.restarts import Failure, on_node
from rlark_scheduler.domain.usage import IdleVerdict, idle_gpus
from rlark_scheduler.envelopes import Meta
from rlark_scheduler.handlers.lifecycle import earlier_attempt_ended, end_job, fail_job, transition
from rlark_scheduler.repository import changes as changes_repo
from rlark_scheduler.repository import jobs as jobs_repo
from rlark_scheduler.repository import read_models
from rlark_scheduler.repository import timeline as timeline_repo
from rlark_scheduler.repository import usage as usage_repo
from rlark_scheduler.repository import workers as workers_repo
from rlark_scheduler.settings import SchedulerSettings

log = structlog.get_logger(__name__)


async def _reported_worker(
    conn: Connection, cluster: str, job_id: str, wid: str
) -> workers_repo.WorkerRow | None:
    """The stored worker an agent reports on; a report naming another job's or cluster's worker is a
    poison message (its topic proved the cluster, not the worker)."""
    worker = await workers_repo.get_worker(conn, wid)
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
    stored = await _reported_worker(conn, payload.cluster, payload.job_id, payload.worker_id)
    if stored is None:
        return
    job = await jobs_repo.get_job(conn, payload.job_id, for_update=True)
    assert job is not None
    earlier = stored.facts.attempt != job.attempt
    workers = [stored.facts] if earlier else [w.facts for w in await workers_repo.workers_of(conn, job.id)]
    before = next(w for w in workers if w.worker_id == payload.worker_id)
    report = WorkerReport(
        worker_id=payload.worker_id,
        phase=payload.phase,
        reason=reported_reason(payload),
        exit_code=payload.exit_code,
        ray_nodes_joined=payload.ray_nodes_joined,
        ray_nodes_expected=payload.ray_nodes_expected,
        address=payload.address,
    )
    report = stopped_by_platform(report, job.status, ended_attempt=stored.facts.attempt if earlier else None)
    if earlier:  # an old attempt's worker: its own row only, never the job (ADR 0014)
        updated = apply_report(before, report)
        fold = Fold(updated, updated != before, None)
    else:
        fold = fold_report(job.status, workers, report)
    progress = None if earlier else ray_progress(report, before)
    progress_changed = progress is not None and progress != (job.ray_nodes_joined, job.ray_nodes_expected)
    if fold.changed:
        await workers_repo.update_worker(conn, fold.worker, now, payload.at)
    if progress is not None and progress_changed:
        await jobs_repo.set_ray_progress(conn, job.id, *progress)
    if fold.changed or progress_changed:
        details: dict[str, Any] = {"exit_code": fold.worker.exit_code, "node": fold.worker.node}
        if progress is not None:
            details["ray_nodes_joined"], details["ray_nodes_expected"] = progress
        await timeline_repo.insert_event(
            conn,
            job.id,
            "worker",
            at=now,
            worker_id=payload.worker_id,
            phase=fold.worker.phase,
            reason=report.reason,
            details=details,
        )
        await changes_repo.notify_activity(conn, job.id)
    if fold.worker.present != before.present:
        await changes_repo.add_change(conn, "node", f"{before.cluster}/{before.node}")
        if earlier and not fold.worker.present:
            await earlier_attempt_ended(conn, job, meta)
    step = fold.transition
    if step is None:
        return
    if step.to_status is JobStatus.FAILED:
        details = dict(step.details)
        if settings.failure_log_lines:
            details["last_lines"] = await timeline_repo.last_lines(
                conn, payload.worker_id, settings.failure_log_lines
            )
        kind = step.failure or RestartOn.WORKER_LOST
        if kind is RestartOn.WORKER_LOST:
            nodes = await read_models.nodes_by_key(conn, [(before.cluster, before.node)])
            kind = on_node(kind, node_gone=any(n.gone or not n.ready for n in nodes))
        failure = Failure(kind, step.reason, step.exit_code)
        await fail_job(conn, job, failure, now, meta, teardown_s=settings.restart_teardown_s, details=details)
    elif step.to_status.terminal:
        await end_job(
            conn, job, step.to_status, step.reason, now, meta, details=step.details, exit_code=step.exit_code
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
    added = await timeline_repo.insert_logs(conn, payload.job_id, payload.worker_id, payload.first_seq, lines)
    if added:
        await changes_repo.notify_activity(conn, payload.job_id)
    return added


async def apply_worker_outputs(conn: Connection, payload: WorkerOutputsListed) -> None:
    if await _reported_worker(conn, payload.cluster, payload.job_id, payload.worker_id) is None:
        return
    files = [{"path": f.path, "size": f.size} for f in payload.files]
    await timeline_repo.upsert_outputs(conn, payload.job_id, payload.worker_id, files, payload.truncated)
    await changes_repo.notify_activity(conn, payload.job_id)


async def apply_usage_sampled(
    conn: Connection, payload: WorkerUsageSampled, settings: SchedulerSettings, now: datetime
) -> int:
    """Keep an agent's sampling round (samples of unknown workers are dropped; one naming another job's or
    cluster's worker makes the whole event a poison message), compact old samples, and apply the idle-GPU
    rule to each job sampled (``domain.usage``). Returns the samples kept."""
    known: list[WorkerUsage] = []
    for sample in payload.samples:
        if await _reported_worker(conn, payload.cluster, sample.job_id, sample.worker_id) is not None:
            known.append(sample)
    added = await usage_repo.insert_samples(conn, known)
    await usage_repo.compact(
        conn,
        raw_before=now - timedelta(seconds=settings.usage_raw_retention_s),
        keep_after=now - timedelta(seconds=settings.usage_retention_s),
    )
    latest: dict[str, datetime] = {}
    for sample in known:
        latest[sample.job_id] = max(sample.at, latest.get(sample.job_id, sample.at))
    for job_id, at in sorted(latest.items()):
        await _check_idle_gpus(conn, job_id, at, settings)
    return added


async def _check_idle_gpus(conn: Connection, job_id: str, at: datetime, settings: SchedulerSettings) -> None:
    job = await jobs_repo.get_job(conn, job_id)
    if job is None:
        return
    warned = await usage_repo.gpus_idle_since(conn, job_id) is not None
    running = job.status == JobStatus.RUNNING
    if not running and not warned:
        return
    window = await usage_repo.gpu_window(
        conn, job_id, job.attempt, at - timedelta(seconds=settings.idle_gpu_window_s)
    )
    verdict = idle_gpus(
        window,
        now=at,
        window_s=settings.idle_gpu_window_s,
        threshold_pct=settings.idle_gpu_threshold_pct,
        warned=warned,
        running=running,
    )
    if verdict is None:
        return
    if verdict is IdleVerdict.DROPPED:
        await usage_repo.set_gpus_idle_since(conn, job_id, None)
        return
    util = round(window.mean_util_pct or 0.0, 1)
    said = f"{util:g}"
    if verdict is IdleVerdict.WARN:
        reason = text(
            "job.gpus_idle",
            util_pct=said,
            window_min=round(settings.idle_gpu_window_s / 60),
            threshold_pct=f"{settings.idle_gpu_threshold_pct:g}",
        )
        await usage_repo.set_gpus_idle_since(conn, job_id, at)
    else:
        reason = text("job.gpus_busy_again", util_pct=said)
        await usage_repo.set_gpus_idle_since(conn, job_id, None)
    details = {"gpu_util_pct": util, "level": "warning" if verdict is IdleVerdict.WARN else "info"}
    await timeline_repo.insert_event(conn, job_id, "usage", at=at, reason=reason, details=details)
    await changes_repo.notify_activity(conn, job_id)
    log.info("idle gpus", job_id=job_id, verdict=verdict.value, gpu_util_pct=util)
