"""Preemption: which borrowing jobs to stop so that a waiting job may run (issue 20 item 3, ADR 0020).

Role: given the capacity model, the running jobs and the quotas, decide for one waiting job whether it may
take GPUs from borrowers now, and which ones. Pure; the placement loop applies the plan (each victim stops
like a requeue: SIGTERM, its termination grace to checkpoint, back to Pending to resume later, ADR 0014/0015).

The rules:

- A *victim* is a running job that borrows: its project holds more than its overall quota. A project
  without a quota never borrows, so its jobs are never preempted. Only the borrowed part is taken back:
  victims of a project are chosen only while that project, without the victims chosen so far, still holds
  more than its quota.
- A waiting job may preempt a borrower of *lower priority*, or of the same priority when the waiting job
  itself would run *inside its quota* (its project stays within its quota in every scope with it, counted
  on the nodes it would get). A borrowing job never preempts at its own priority, so borrowers do not
  evict each other back and forth.
- Least lost work first: candidates are tried in order of ``lost_work_s`` (the work a stop would lose:
  time since its last checkpoint, or since its attempt started when that is not known), then lower
  priority, then the youngest. They are released from the model one by one until the waiting job's gang
  fits (``placement.place``, the one placer); then every victim the gang can do without is kept (tried
  from the last chosen back), so nothing is stopped that the job does not need.
- The model is left exactly as it was (every trial release is allocated back); the plan is only a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rlark_scheduler.domain.capacity import Allocation, CapacityModel
from rlark_scheduler.domain.fairness import ProjectJob
from rlark_scheduler.domain.placement import Placement, place
from rlark_scheduler.domain.quotas import NO_USAGE, GpuUsage, ProjectId, ProjectQuota, first_breach


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding capacity in the model, as preemption weighs it."""

    job_id: str
    project: ProjectId
    priority: int
    submitted_seq: int
    lost_work_s: float
    """What stopping it now would lose, in seconds of its work (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victims`` (least lost work first) so that ``job_id`` fits; ``lost_work_s`` is their sum."""

    job_id: str
    victims: tuple[str, ...]
    lost_work_s: float


def borrowers(
    model: CapacityModel, running: Iterable[RunningJob], quotas: Mapping[str, ProjectQuota]
) -> dict[ProjectId, int]:
    """GPUs each project holds beyond its overall quota (projects that do not borrow are left out)."""
    held: dict[ProjectId, int] = {}
    for job in running:
        gpus = GpuUsage.of_allocations(model, model.held(job.job_id)).total
        held[job.project] = held.get(job.project, 0) + gpus
    return {
        project: gpus - quotas[project].gpus
        for project, gpus in sorted(held.items())
        if project in quotas and gpus > quotas[project].gpus
    }


def plan_preemption(
    model: CapacityModel,
    job: ProjectJob,
    running: Sequence[RunningJob],
    quotas: Mapping[str, ProjectQuota],
    usage: Mapping[ProjectId, GpuUsage],
    *,
    protected: Iterable[str] = (),
) -> Preemption | None:
    """The victims that let ``job`` run now, or None when no allowed set of victims makes it fit.

    ``usage`` is each project's usage now (``fairness.project_usage``); ``protected`` are jobs that must
    not be chosen (already being stopped). The model is unchanged on return.
    """
    over = borrowers(model, running, quotas)
    keep = set(protected)
    priority = job.request.priority
    candidates = sorted(
        (
            r
            for r in running
            if r.project in over
            and r.project != job.project
            and r.job_id not in keep
            and r.priority <= priority
            and model.held(r.job_id)
        ),
        key=lambda r: (r.lost_work_s, r.priority, -r.submitted_seq, r.job_id),
    )
    if not candidates:
        return None

    released: dict[str, tuple[Allocation, ...]] = {}
    try:
        chosen: list[RunningJob] = []
        left = dict(over)
        fit: Placement | None = None
        for victim in candidates:
            if left[victim.project] <= 0:
                continue
            gpus = GpuUsage.of_allocations(model, model.held(victim.job_id)).total
            released[victim.job_id] = model.release(victim.job_id)
            left[victim.project] -= gpus
            chosen.append(victim)
            fit = _fits(model, job, chosen, quotas, usage)
            if fit is not None:
                break
        if fit is None:
            return None
        # Keep every victim the gang can do without, trying the last chosen first.
        for victim in reversed(chosen[:-1]):
            model.allocate(victim.job_id, released.pop(victim.job_id))
            if _fits(model, job, [c for c in chosen if c.job_id in released], quotas, usage) is None:
                released[victim.job_id] = model.release(victim.job_id)
        victims = [c for c in chosen if c.job_id in released]
        return Preemption(job.job_id, tuple(v.job_id for v in victims), sum(v.lost_work_s for v in victims))
    finally:
        for job_id, allocations in released.items():
            model.allocate(job_id, allocations)


def _fits(
    model: CapacityModel,
    job: ProjectJob,
    victims: Sequence[RunningJob],
    quotas: Mapping[str, ProjectQuota],
    usage: Mapping[ProjectId, GpuUsage],
) -> Placement | None:
    """The job's placement on the model as it is now (victims released), when it is allowed to preempt
    these victims: all of lower priority, or the job runs inside its quota."""
    placed = place(model, job.request)
    if not isinstance(placed, Placement):
        return None
    if all(v.priority < job.request.priority for v in victims):
        return placed
    quota = quotas.get(job.project)
    if quota is None:
        return placed  # bounded by nothing: always inside quota
    requested = GpuUsage.of_allocations(model, placed.allocations())
    if first_breach(quota, usage.get(job.project, NO_USAGE), requested, borrowing=False) is None:
        return placed
    return None
