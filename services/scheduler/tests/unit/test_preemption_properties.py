"""Property tests of preemption plans (issue 20 item 3, ADR 0020) on the random worlds of
``test_fair_admission_properties``: a plan only ever stops borrowers of other projects, of no higher
priority, never more than a project borrows (but for the victim that brings it under its quota); with the
victims gone the job fits; the model is left exactly as it was."""

from __future__ import annotations

import pytest
from hypothesis import given
from rlark_scheduler.domain.fairness import project_usage
from rlark_scheduler.domain.placement import Placement, place
from rlark_scheduler.domain.preemption import RunningJob, borrowers, plan_preemption
from test_fair_admission_properties import EXAMPLES, World, worlds

pytestmark = pytest.mark.unit


@EXAMPLES
@given(worlds())
def test_plans_stop_only_needed_borrowers_and_leave_the_model_as_it_was(world: World) -> None:
    model, running_projects = world.start()
    quotas = {str(q.project): q for q in world.quotas}
    priority = {job.job_id: job.request.priority for job in world.running}
    running = [
        RunningJob(job_id, project, priority[job_id], seq, lost_work_s=float(seq))
        for seq, (job_id, project) in enumerate(sorted(running_projects.items()))
    ]
    held = {job_id: model.held(job_id) for job_id in model.allocated_jobs()}
    versions = {cluster: model.version(cluster) for cluster in model.clusters()}
    over = borrowers(model, running, quotas)
    usage = project_usage(model, running_projects)
    for job in world.waiting:
        plan = plan_preemption(model, job, running, quotas, usage)
        assert {j: model.held(j) for j in model.allocated_jobs()} == held
        if plan is None:
            continue
        by_id = {r.job_id: r for r in running}
        victims = [by_id[v] for v in plan.victims]
        assert victims, "a plan stops someone"
        for victim in victims:
            assert victim.project in over  # a borrower
            assert victim.project != job.project
            assert victim.priority <= job.request.priority
        # Only what the projects borrow is taken back: each project keeps at least its quota but for the
        # one victim that brought it under.
        for project in {v.project for v in victims}:
            taken = sorted(
                (sum(g for _, g in held[v.job_id]) for v in victims if v.project == project), reverse=True
            )
            assert sum(taken[1:]) < over[project]
        # With every victim gone the job fits.
        for victim in victims:
            model.release(victim.job_id)
        assert isinstance(place(model, job.request), Placement)
        for victim in victims:
            model.allocate(victim.job_id, held[victim.job_id])
    assert {j: model.held(j) for j in model.allocated_jobs()} == held
    assert all(model.version(c) >= v for c, v in versions.items())
