"""The queue that explains itself (issue 20 item 4): where a waiting job stands, when it may start, and what
would make it fit now.

Role: pure answers over a capacity model the caller built for the job's clusters (as a submission check
builds it), the waiting jobs ahead of it and the running jobs with their expected ends:

- :func:`ahead_of` — the waiting jobs tried before it in every round (higher priority, or the same and
  submitted earlier) that ask for one of its clusters: they take capacity there first.
- :func:`estimate_start` — replays the future on a copy of the model: running jobs end at their expected
  ends (its elapsed time against the typical run time of jobs of its name, else of every job), and at each
  end a round (``queue.schedule_round``, the loop's own) places the jobs ahead and then this one. The first
  moment it is placed is the estimate; None when it never is with what is known (a job with no expected end
  blocks it). Quotas are not replayed: a job waiting for quota waits for its project, not for time.
- :func:`fit_hints` — what would make it fit now: another cluster (the pending reason's alternatives), spanning
  clusters or a network domain joining them (the reason's note, ADR 0026), fewer GPUs per worker (halving,
  the largest that fits), or one running job ending (the one expected to end first among those whose end
  alone makes room).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.placement import JobRequest, Placement, place
from rlark_scheduler.domain.queue import JobQueue, schedule_round
from rlark_scheduler.domain.reasons import SpanCode, explain_pending

MAX_EVENTS = 2000
"""Job ends an estimate replays at most (a bound on its cost with very long queues)."""


@dataclass(frozen=True, slots=True)
class RunningEnd:
    """A running job and when it is expected to end (None: unknown, it may run for ever)."""

    job_id: str
    expected_end: datetime | None


@dataclass(frozen=True, slots=True)
class Ahead:
    """A waiting job that takes capacity before ``job`` and how long it is expected to run once placed."""

    request: JobRequest
    expected_runtime: timedelta | None


@dataclass(frozen=True, slots=True)
class Hint:
    """One way to fit now: ``kind`` is ``cluster`` (``cluster``: the role would fit there now), ``gpus``
    (``gpus_per_worker``: every role asking that many at most), ``job_ends`` (``job_id`` ending makes
    room; ``expected_end`` when known), ``span`` (``spanClusters: whenNeeded`` would place it across the
    clusters ``cluster`` lists through ``domain``) or ``domain`` (a network domain joining those clusters
    would; ADR 0026)."""

    kind: str
    role: str = ""
    cluster: str = ""
    gpus_per_worker: int = 0
    job_id: str = ""
    expected_end: datetime | None = None
    domain: str = ""


def expected_end(placed_at: datetime | None, typical: timedelta | None, now: datetime) -> datetime | None:
    """When a job placed at ``placed_at`` is expected to end: placed_at + typical run time, or ``now`` when
    it has run longer than that already (it is due); None when either is unknown."""
    if placed_at is None or typical is None:
        return None
    return max(placed_at + typical, now)


def shares_clusters(a: JobRequest, b: JobRequest) -> bool:
    """Whether two jobs may compete for a cluster: one names a cluster the other does, or one lets the placer
    choose (ADR 0026: it may go anywhere its roles allow)."""
    return not a.named or not b.named or bool(set(a.clusters).intersection(b.clusters))


def ahead_of(job: JobRequest, waiting: Iterable[JobRequest]) -> list[JobRequest]:
    """The waiting jobs tried before ``job`` that may take one of its clusters, in queue order."""
    return sorted(
        (
            w
            for w in waiting
            if w.job_id != job.job_id and w.queue_key < job.queue_key and shares_clusters(job, w)
        ),
        key=lambda w: w.queue_key,
    )


def estimate_start(
    model: CapacityModel,
    job: JobRequest,
    ahead: Sequence[Ahead],
    running: Sequence[RunningEnd],
    now: datetime,
) -> datetime | None:
    """The estimated start of ``job`` (see the module docstring); ``model`` is left unchanged."""
    trial = model.copy()
    queue = JobQueue()
    for other in ahead:
        queue.push(other.request)
    queue.push(job)
    runtime = {other.request.job_id: other.expected_runtime for other in ahead}
    ends: list[tuple[datetime, str]] = [
        (r.expected_end, r.job_id) for r in running if r.expected_end is not None and trial.held(r.job_id)
    ]
    heapq.heapify(ends)
    at = now
    for _ in range(MAX_EVENTS):
        for placement in schedule_round(trial, queue):
            if placement.job_id == job.job_id:
                return at
            took = runtime.get(placement.job_id)
            if took is not None:
                heapq.heappush(ends, (at + took, placement.job_id))
        if not ends:
            return None
        at, ended = heapq.heappop(ends)
        trial.release(ended)
        # Releases at the same moment are applied together before the next round.
        while ends and ends[0][0] == at:
            trial.release(heapq.heappop(ends)[1])
    return None


def fit_hints(model: CapacityModel, job: JobRequest, running: Sequence[RunningEnd]) -> list[Hint]:
    """What would make ``job`` fit now (see the module docstring); empty when it fits already or nothing
    known would. ``model`` is left unchanged."""
    if isinstance(place(model, job), Placement):
        return []
    hints: list[Hint] = []
    reason = explain_pending(model, job)
    for role in reason.roles:
        hints.extend(Hint("cluster", role=role.role, cluster=alt.cluster) for alt in role.alternatives[:3])
    if reason.span is not None:
        kind = "span" if reason.span.code is SpanCode.REFUSED else "domain"
        hints.append(Hint(kind, cluster=", ".join(reason.span.clusters), domain=reason.span.domain or ""))
    most = max((role.gpus_per_worker for role in job.roles), default=0)
    gpus = most // 2
    while gpus >= 1:
        if isinstance(place(model, _capped(job, gpus)), Placement):
            hints.append(Hint("gpus", gpus_per_worker=gpus))
            break
        gpus //= 2
    order = sorted(running, key=lambda r: (r.expected_end is None, r.expected_end or datetime.max, r.job_id))
    for candidate in order:
        held = model.held(candidate.job_id)
        if not held:
            continue
        model.release(candidate.job_id)
        try:
            fits = isinstance(place(model, job), Placement)
        finally:
            model.allocate(candidate.job_id, held)
        if fits:
            hints.append(Hint("job_ends", job_id=candidate.job_id, expected_end=candidate.expected_end))
            break
    return hints


def _capped(job: JobRequest, gpus: int) -> JobRequest:
    roles = tuple(replace(role, gpus_per_worker=min(role.gpus_per_worker, gpus)) for role in job.roles)
    return replace(job, roles=roles)
