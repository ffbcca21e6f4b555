"""Fair admission: which waiting jobs start now, in which order, and why the others wait (issue 20 item 2).

Role: one admission round over projects with quotas (``quotas``). The placement loop runs it through
``queue.fair_round`` whenever any project has a quota (ADR 0020); without quotas it keeps
``queue.schedule_round`` (priority, then first come, for everyone).

The round, given the capacity model (what is free, and every running job's allocation), the running
jobs' projects, the quotas and the waiting jobs:

1. Priority first: jobs are taken level by level, highest ``priority`` first. A lower level starts
   only after every job of the higher levels was admitted or given its reason, so a lower-priority
   job never takes quota (or capacity) a higher-priority one was refused for in this round.
2. Within a level, *inside-quota* work first, in submit order: a job is admitted when its gang fits
   now (``placement.place``, the placer the loop uses; no other fit check) and its project stays
   within its quota in every scope with it. For a job whose clusters the placer chooses (ADR 0026) its
   layouts are weighed best first: the first inside quota, else the first within the ceiling. A job that fits but would go beyond its quota is
   deferred to step 3 unless it would already pass its ceiling (quota + borrowing limit).
3. Then the deferred jobs *borrow*, in fair-share order: repeatedly the project with the smallest
   dominant share (ties: its oldest job, then the project id) tries its oldest deferred job, placed
   afresh; it is admitted only within its ceiling in every scope.

A job charged to no quota (no project, or a project without a quota: deleted meanwhile) is bounded by
nothing: it is always inside quota, and only its GPUs count toward its (pseudo-)project's share.

Usage is what the capacity model says is held: a running job's allocation, an admitted job's
placement, each GPU counted in its node's (cluster, GPU model) pool (``quotas.GpuUsage``) — so a job
spanning clusters is one job with one usage, counted once against its project's overall quota and
share. The *dominant share* of a project is, over GPU models, the largest fraction of the fleet's GPUs
of that model (all clusters, nodes not gone) it holds: dominant-resource fairness with each GPU model
as a resource, so whoever holds the most of the scarcest model borrows last.

Every admitted job is allocated in the model before the next is tried (as ``schedule_round`` does),
so no two admissions share capacity and no gang is ever partial. Every waiting job gets a reason:
``quota`` (its project cannot borrow and it would exceed its quota), ``borrowing_limit`` (it would
exceed quota + borrowing limit), each with the scope and the figures, or ``capacity`` (within bounds,
but the gang does not fit now; ``Unplaceable`` is the placer's proof). For a job that cannot be placed,
only the scopes known without a placement are checked (overall and cluster: its GPU model is decided
by the nodes it gets).

Deterministic: equal inputs give equal rounds (every order has a total tie-break; shares are exact
fractions). Not thread-safe: the caller owns the model, as in the placement loop.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from itertools import groupby, islice

from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.placement import JobRequest, Placement, Unplaceable, layouts, place
from rlark_scheduler.domain.quotas import NO_USAGE, Breach, GpuUsage, ProjectId, ProjectQuota, first_breach


@dataclass(frozen=True, slots=True)
class ProjectJob:
    """A waiting job and the project it is charged to."""

    request: JobRequest
    project: ProjectId

    @property
    def job_id(self) -> str:
        return self.request.job_id


class WaitReason(StrEnum):
    QUOTA = "quota"
    """It would take its project beyond its quota, and the project may not borrow."""
    BORROWING_LIMIT = "borrowing_limit"
    """It would take its project beyond quota + borrowing limit."""
    CAPACITY = "capacity"
    """Within its project's bounds, but its gang does not fit now."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """A job to start: its placement (already allocated in the model) and the GPUs it counts as.
    ``borrowing``: its project holds more than its quota in some scope with it."""

    job_id: str
    project: ProjectId
    placement: Placement
    usage: GpuUsage
    borrowing: bool


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job left waiting and why: ``breach`` for the quota reasons, ``unplaceable`` for capacity."""

    job_id: str
    project: ProjectId
    reason: WaitReason
    breach: Breach | None = None
    unplaceable: Unplaceable | None = None


@dataclass(frozen=True, slots=True)
class AdmissionRound:
    """A round's decisions: ``admitted`` in admission order, ``waiting`` in queue order (priority,
    then submit order), and each project's usage and dominant share after the round."""

    admitted: tuple[Admitted, ...]
    waiting: tuple[Waiting, ...]
    usage: Mapping[ProjectId, GpuUsage]
    shares: Mapping[ProjectId, Fraction]


def fleet_gpus(model: CapacityModel) -> dict[str, int]:
    """GPUs of each GPU model across every cluster (nodes not gone, offline clusters included)."""
    totals: dict[str, int] = {}
    for node in model.nodes():
        if not node.gone:
            totals[node.gpu_model] = totals.get(node.gpu_model, 0) + node.gpu_allocatable
    return totals


def dominant_share(usage: GpuUsage, fleet: Mapping[str, int]) -> Fraction:
    """The largest fraction of one GPU model's fleet that ``usage`` holds (0 for no usage). A model
    with no GPUs in ``fleet`` (its nodes gone) counts as one GPU, so the share stays defined."""
    by_model: dict[str, int] = {}
    for (_, gpu_model), gpus in usage.pools.items():
        by_model[gpu_model] = by_model.get(gpu_model, 0) + gpus
    return max(
        (Fraction(gpus, max(fleet.get(gpu_model, 0), 1)) for gpu_model, gpus in by_model.items()),
        default=Fraction(0),
    )


def admission_round(
    model: CapacityModel,
    waiting: Iterable[ProjectJob],
    running: Mapping[str, ProjectId],
    quotas: Iterable[ProjectQuota],
) -> AdmissionRound:
    """Decide which of ``waiting`` start now (see the module docstring) and allocate them in ``model``.

    ``running`` maps every job holding an allocation in ``model`` to its project; a project without a
    quota bounds nothing. Refused with a ValueError before any change: a job holding capacity missing
    from ``running``, a waiting job that already holds capacity or is listed twice, two quotas for one
    project.
    """
    jobs = tuple(waiting)
    quota_of = _quotas_by_project(quotas)
    _check_inputs(model, jobs, running)
    fleet = fleet_gpus(model)
    usage = project_usage(model, running)
    for project in quota_of:
        usage.setdefault(project, NO_USAGE)
    for job in jobs:
        usage.setdefault(job.project, NO_USAGE)

    admitted: list[Admitted] = []
    verdicts: dict[str, Waiting] = {}

    def attempt(job: ProjectJob, *, borrowing: bool) -> bool:
        """Admit ``job`` or record why it waits; False when it should be tried again to borrow."""
        quota, used = quota_of.get(job.project), usage[job.project]
        result = place(model, job.request)
        if isinstance(result, Unplaceable):
            breach = (
                first_breach(quota, used, _demand(job.request), borrowing=True) if quota is not None else None
            )
            verdicts[job.job_id] = _refusal(job, quota, breach, result)
            return True
        if quota is not None and not job.request.named:
            result = _within_bounds(model, job.request, quota, used, result)
        requested = GpuUsage.of_allocations(model, result.allocations())
        over_quota = first_breach(quota, used, requested, borrowing=False) if quota is not None else None
        if quota is not None and over_quota is not None:
            breach = first_breach(quota, used, requested, borrowing=True)
            if breach is not None:
                verdicts[job.job_id] = _refusal(job, quota, breach, None)
                return True
            if not borrowing:
                return False
        model.allocate(job.job_id, result.allocations())
        usage[job.project] = used + requested
        admitted.append(Admitted(job.job_id, job.project, result, requested, over_quota is not None))
        return True

    ordered = sorted(jobs, key=_queue_key)
    for _, level in groupby(ordered, key=lambda job: job.request.priority):
        deferred: dict[ProjectId, deque[ProjectJob]] = {}
        for job in level:
            if not attempt(job, borrowing=False):
                deferred.setdefault(job.project, deque()).append(job)
        while deferred:
            project = min(
                deferred,
                key=lambda p: (dominant_share(usage[p], fleet), _queue_key(deferred[p][0]), p),
            )
            queue = deferred[project]
            attempt(queue.popleft(), borrowing=True)
            if not queue:
                del deferred[project]

    return AdmissionRound(
        admitted=tuple(admitted),
        waiting=tuple(verdicts[job.job_id] for job in ordered if job.job_id in verdicts),
        usage=usage,
        shares={project: dominant_share(used, fleet) for project, used in usage.items()},
    )


MAX_LAYOUTS_WEIGHED = 16
"""Layouts of a job whose clusters the placer chooses that admission weighs against its project's quota."""


def _within_bounds(
    model: CapacityModel, job: JobRequest, quota: ProjectQuota, used: GpuUsage, first: Placement
) -> Placement:
    """Among the job's layouts, best first (``placement.layouts``, ADR 0026), the first inside its project's
    quota, else the first within its ceiling, else ``first``: a cluster quota full on the best-fit cluster
    sends the job to another cluster rather than keeping it waiting."""
    within_ceiling: Placement | None = None
    for candidate in islice(layouts(model, job), MAX_LAYOUTS_WEIGHED):
        requested = GpuUsage.of_allocations(model, candidate.allocations())
        if first_breach(quota, used, requested, borrowing=False) is None:
            return candidate
        if within_ceiling is None and first_breach(quota, used, requested, borrowing=True) is None:
            within_ceiling = candidate
    return within_ceiling or first


def project_usage(model: CapacityModel, running: Mapping[str, ProjectId]) -> dict[ProjectId, GpuUsage]:
    """What each project of ``running`` (job id -> project) holds in ``model``."""
    pools: dict[ProjectId, dict[tuple[str, str], int]] = {}
    for job_id, project in running.items():
        held = pools.setdefault(project, {})
        for (cluster, name), gpus in model.held(job_id):
            node = model.node(cluster, name)
            pool = (cluster, node.gpu_model if node is not None else "")
            held[pool] = held.get(pool, 0) + gpus
    return {project: GpuUsage(held) for project, held in sorted(pools.items())}


def _queue_key(job: ProjectJob) -> tuple[int, int, str]:
    return job.request.queue_key


def _demand(job: JobRequest) -> GpuUsage:
    """A job's GPUs before it has nodes: per cluster, in no GPU model's pool (model "")."""
    pools: dict[tuple[str, str], int] = {}
    for role in job.roles:
        pool = (role.cluster, "")
        pools[pool] = pools.get(pool, 0) + role.replicas * role.gpus_per_worker
    return GpuUsage(pools)


def _refusal(
    job: ProjectJob, quota: ProjectQuota | None, breach: Breach | None, unplaceable: Unplaceable | None
) -> Waiting:
    if quota is None or breach is None:
        return Waiting(job.job_id, job.project, WaitReason.CAPACITY, unplaceable=unplaceable)
    reason = WaitReason.BORROWING_LIMIT if quota.borrowing_limit else WaitReason.QUOTA
    return Waiting(job.job_id, job.project, reason, breach=breach)


def _quotas_by_project(quotas: Iterable[ProjectQuota]) -> dict[ProjectId, ProjectQuota]:
    by_project: dict[ProjectId, ProjectQuota] = {}
    for quota in quotas:
        if quota.project in by_project:
            raise ValueError(f'two quotas for project "{quota.project}"')
        by_project[quota.project] = quota
    return by_project


def _check_inputs(
    model: CapacityModel,
    jobs: tuple[ProjectJob, ...],
    running: Mapping[str, ProjectId],
) -> None:
    ids = Counter(job.job_id for job in jobs)
    twice = sorted(job_id for job_id, count in ids.items() if count > 1)
    if twice:
        raise ValueError(f"waiting jobs listed twice: {', '.join(twice)}")
    holding = sorted(job_id for job_id in ids if model.held(job_id))
    if holding:
        raise ValueError(f"waiting jobs already hold an allocation: {', '.join(holding)}")
    unknown = sorted(job_id for job_id in model.allocated_jobs() if job_id not in running)
    if unknown:
        raise ValueError(f"jobs holding an allocation without a project in running: {', '.join(unknown)}")
