"""The pending-job queue and one scheduling round over it.

Role: hold the jobs waiting for placement in priority order — highest ``priority`` first, then
first submitted (``submitted_seq``) first — and, on each round, try them in that order against the
capacity model, committing each successful gang placement before trying the next job.

Backfill and starvation: a job that does not fit stays queued with its exact pending reason, and
later (lower-priority or younger) jobs are still tried, so small jobs use capacity a big job cannot
use yet. The trade-off: a large job can wait indefinitely while a stream of smaller jobs keeps
taking the nodes it would need as they free up. There is deliberately no reservation today;
priority is the tool against starvation (raise the big job's priority and it is tried first every
round). ``rounds_waited`` is tracked per job so an operator — or a later reservation policy —
can see who is being passed over.

Cheap re-evaluation: a failed attempt is remembered with a *signature*, the versions of the
clusters the job asks for (``CapacityModel.version``; for a job whose clusters the placer chooses, of
every cluster its roles may go to, and the model's epoch: clusters, their labels, network domains). A job whose signature has not changed
is not re-tried: nothing it depends on changed, and since placement only gets harder when
capacity shrinks, the earlier "no" still holds. After one node change only the jobs touching that
node's cluster are re-tried, and placements committed earlier in the same round bump the versions
of their clusters, so later jobs there are re-tried with exact counts.

Projects and quotas (ADR 0020): once any project has a GPU quota the loop runs :func:`fair_round`
instead, the same queue through ``fairness.admission_round`` (priority, then inside-quota work, then
borrowing in fair-share order). A job's signature then also holds the quota epoch (any quota change)
and its project's usage, so a job kept back by its quota is re-tried when its project's jobs end or
its quota changes, as well as when its clusters change. Signatures are taken after the round: every
admission only takes capacity and adds usage, so a "no" given earlier in the round still holds.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.fairness import ProjectJob, admission_round, project_usage
from rlark_scheduler.domain.placement import JobRequest, Placement, place, reachable_clusters
from rlark_scheduler.domain.quotas import NO_USAGE, GpuUsage, ProjectId, ProjectQuota
from rlark_scheduler.domain.reasons import (
    PendingCode,
    PendingReason,
    QuotaShortfall,
    explain_pending,
    quota_pending,
)

_OrderKey = tuple[int, int, str]
_Signature = tuple[object, ...]


@dataclass(slots=True)
class _Entry:
    job: JobRequest
    clusters: tuple[str, ...]
    reason: PendingReason | None = None
    signature: _Signature | None = None
    rounds_waited: int = 0
    reason_changed: bool = False


@dataclass(frozen=True, slots=True)
class RoundStats:
    """What the last round did: jobs looked at, actually tried, placed, left pending."""

    considered: int = 0
    tried: int = 0
    placed: int = 0
    pending: int = 0


class JobQueue:
    """Pending jobs ordered by (-priority, submitted_seq, job_id), with their last reasons."""

    __slots__ = ("_entries", "_order", "last_round", "retried")

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._order: list[_OrderKey] = []
        self.last_round = RoundStats()
        self.retried: tuple[str, ...] = ()
        """The jobs the last round tried and left waiting, in queue order."""

    def push(self, job: JobRequest) -> None:
        """Queue a job; a job id already queued is refused (ValueError)."""
        if job.job_id in self._entries:
            raise ValueError(f"job {job.job_id} is already queued")
        self._entries[job.job_id] = _Entry(job, job.clusters)
        bisect.insort(self._order, job.queue_key)

    def remove(self, job_id: str) -> bool:
        """Drop a job (cancelled, or placed elsewhere); False when it was not queued."""
        entry = self._entries.pop(job_id, None)
        if entry is None:
            return False
        key = entry.job.queue_key
        index = bisect.bisect_left(self._order, key)
        del self._order[index]
        return True

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries

    def __iter__(self) -> Iterator[JobRequest]:
        """Jobs in the order a round tries them."""
        return (self._entries[key[2]].job for key in list(self._order))

    def request(self, job_id: str) -> JobRequest | None:
        """The queued job's request; None when not queued."""
        entry = self._entries.get(job_id)
        return entry.job if entry else None

    def reason(self, job_id: str) -> PendingReason | None:
        """The job's last pending reason; None before its first attempt or when not queued."""
        entry = self._entries.get(job_id)
        return entry.reason if entry else None

    def rounds_waited(self, job_id: str) -> int:
        """Rounds in which the job was considered and stayed pending."""
        entry = self._entries.get(job_id)
        return entry.rounds_waited if entry else 0

    def forget_signatures(self) -> None:
        """Make the next round re-try every job (after a change the model cannot see)."""
        for entry in self._entries.values():
            entry.signature = None

    def _waits(self, entry: _Entry, reason: PendingReason, signature: _Signature) -> None:
        """``entry`` stays queued this round with ``reason``, not to be re-tried until ``signature`` changes."""
        previous = entry.reason
        if previous is None or (previous.code, previous.message) != (reason.code, reason.message):
            entry.reason_changed = True
        entry.reason = reason
        entry.signature = signature
        entry.rounds_waited += 1

    def take_reason_changes(self) -> list[tuple[str, PendingReason]]:
        """Jobs whose reason changed since the last call, in queue order (to persist/publish)."""
        changed: list[tuple[str, PendingReason]] = []
        for job in self:
            entry = self._entries[job.job_id]
            if entry.reason_changed and entry.reason is not None:
                changed.append((job.job_id, entry.reason))
                entry.reason_changed = False
        return changed


def schedule_round(model: CapacityModel, queue: JobQueue) -> list[Placement]:
    """Try every queued job in order; commit and dequeue those that fit; return their placements.

    Each placement is allocated in ``model`` before the next job is tried, so jobs never share
    capacity and no job ever holds part of a gang. Jobs that do not fit keep (or get) their
    pending reason; unchanged signatures skip the attempt (see the module docstring).
    """
    _refuse_holding(model, queue)
    placements: list[Placement] = []
    retried: list[str] = []
    considered = tried = 0
    for key in list(queue._order):
        entry = queue._entries[key[2]]
        considered += 1
        signature = _capacity_signature(model, entry)
        if entry.signature == signature:
            entry.rounds_waited += 1
            continue
        tried += 1
        result = place(model, entry.job)
        if isinstance(result, Placement):
            model.allocate(result.job_id, result.allocations())
            queue.remove(result.job_id)
            placements.append(result)
            continue
        queue._waits(entry, explain_pending(model, entry.job), signature)
        retried.append(entry.job.job_id)
    queue.last_round = RoundStats(considered, tried, len(placements), len(queue))
    queue.retried = tuple(retried)
    return placements


def fair_round(
    model: CapacityModel,
    queue: JobQueue,
    running: Mapping[str, str],
    quotas: Mapping[str, ProjectQuota],
    quota_epoch: int,
) -> list[Placement]:
    """One round by projects and quotas (``fairness.admission_round``) over the jobs whose signature
    changed; admitted jobs are allocated in ``model`` and dequeued, the others get their reason.

    ``running`` maps every job holding capacity in ``model`` to its project ("" for none); ``quotas``
    holds every project's quota; ``quota_epoch`` changes whenever any quota does.
    """
    _refuse_holding(model, queue)
    usage = project_usage(model, {job_id: ProjectId(p) for job_id, p in running.items()})
    fresh: list[_Entry] = []
    considered = 0
    for key in list(queue._order):
        entry = queue._entries[key[2]]
        considered += 1
        if entry.signature == _fair_signature(model, entry, usage, quotas, quota_epoch):
            entry.rounds_waited += 1
        else:
            fresh.append(entry)
    result = admission_round(
        model,
        [ProjectJob(entry.job, ProjectId(entry.job.project)) for entry in fresh],
        {job_id: ProjectId(project) for job_id, project in running.items()},
        quotas.values(),
    )
    placements = []
    for admitted in result.admitted:
        queue.remove(admitted.job_id)
        placements.append(admitted.placement)
    for waiting in result.waiting:
        entry = queue._entries[waiting.job_id]
        if waiting.breach is None:
            reason = explain_pending(model, entry.job)
        else:
            code = PendingCode(waiting.reason.value)
            reason = quota_pending(entry.job, code, QuotaShortfall(waiting.project, waiting.breach))
        queue._waits(entry, reason, _fair_signature(model, entry, result.usage, quotas, quota_epoch))
    queue.last_round = RoundStats(considered, len(fresh), len(placements), len(queue))
    queue.retried = tuple(waiting.job_id for waiting in result.waiting)
    return placements


def _refuse_holding(model: CapacityModel, queue: JobQueue) -> None:
    holding = [job_id for job_id in queue._entries if model.held(job_id)]
    if holding:
        # A queued job must not already hold capacity; refusing before any change keeps the
        # round all-or-nothing instead of failing half-way with placements committed.
        raise ValueError(f"queued jobs already hold an allocation: {', '.join(sorted(holding))}")


def _capacity_signature(model: CapacityModel, entry: _Entry) -> _Signature:
    """The versions of the clusters the job may use: those its roles name, or, when the placer chooses
    (ADR 0026), every cluster its roles may go to, with the model's epoch (clusters, their facts, domains)."""
    if entry.job.named:
        return tuple((cluster, model.version(cluster)) for cluster in entry.clusters)
    clusters = reachable_clusters(model, entry.job)
    return (model.epoch, *((cluster, model.version(cluster)) for cluster in clusters))


def _fair_signature(
    model: CapacityModel,
    entry: _Entry,
    usage: Mapping[ProjectId, GpuUsage],
    quotas: Mapping[str, ProjectQuota],
    quota_epoch: int,
) -> _Signature:
    """Capacity versions, the quota epoch, and the usage of the job's project when a quota bounds it."""
    project = entry.job.project
    held = usage.get(ProjectId(project), NO_USAGE) if project in quotas else NO_USAGE
    return (*_capacity_signature(model, entry), quota_epoch, tuple(held.pools.items()))
