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
clusters the job asks for (``CapacityModel.version``). A job whose signature has not changed
is not re-tried: nothing it depends on changed, and since placement only gets harder when
capacity shrinks, the earlier "no" still holds. After one node change only the jobs touching that
node's cluster are re-tried, and placements committed earlier in the same round bump the versions
of their clusters, so later jobs there are re-tried with exact counts.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.placement import JobRequest, Placement, place
from rlark_scheduler.domain.reasons import PendingReason, explain_pending

_OrderKey = tuple[int, int, str]
_Signature = tuple[tuple[str, int], ...]


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

    __slots__ = ("_entries", "_order", "last_round")

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._order: list[_OrderKey] = []
        self.last_round = RoundStats()

    def push(self, job: JobRequest) -> None:
        """Queue a job; a job id already queued is refused (ValueError)."""
        if job.job_id in self._entries:
            raise ValueError(f"job {job.job_id} is already queued")
        self._entries[job.job_id] = _Entry(job, job.clusters)
        bisect.insort(self._order, _order_key(job))

    def remove(self, job_id: str) -> bool:
        """Drop a job (cancelled, or placed elsewhere); False when it was not queued."""
        entry = self._entries.pop(job_id, None)
        if entry is None:
            return False
        key = _order_key(entry.job)
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
    holding = [job_id for job_id in queue._entries if model.held(job_id)]
    if holding:
        # A queued job must not already hold capacity; refusing before any change keeps the
        # round all-or-nothing instead of failing half-way with placements committed.
        raise ValueError(f"queued jobs already hold an allocation: {', '.join(sorted(holding))}")
    placements: list[Placement] = []
    considered = tried = 0
    for key in list(queue._order):
        entry = queue._entries[key[2]]
        considered += 1
        signature = tuple((cluster, model.version(cluster)) for cluster in entry.clusters)
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
        reason = explain_pending(model, entry.job)
        previous = entry.reason
        if previous is None or (previous.code, previous.message) != (reason.code, reason.message):
            entry.reason_changed = True
        entry.reason = reason
        entry.signature = signature
        entry.rounds_waited += 1
    queue.last_round = RoundStats(
        considered=considered,
        tried=tried,
        placed=len(placements),
        pending=len(queue),
    )
    return placements


def _order_key(job: JobRequest) -> _OrderKey:
    return (-job.priority, job.submitted_seq, job.job_id)
