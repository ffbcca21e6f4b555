"""Preemption plans (issue 20 item 3, ADR 0020): only borrowers are stopped, only what they borrowed,
least lost work first, nothing the waiting job can do without, and the model is left as it was."""

from __future__ import annotations

import pytest
from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.fairness import ProjectJob, project_usage
from rlark_scheduler.domain.placement import JobRequest, RoleRequest, Unplaceable, place
from rlark_scheduler.domain.preemption import RunningJob, borrowers, plan_preemption
from rlark_scheduler.domain.quotas import ProjectId, ProjectQuota
from scheduler_fleet import gpu_node

pytestmark = pytest.mark.unit

VISION, SPEECH, ROBOTS = ProjectId("vision"), ProjectId("speech"), ProjectId("robots")


def request(
    job_id: str, project: ProjectId, nodes: int = 1, *, priority: int = 0, seq: int = 0
) -> ProjectJob:
    role = RoleRequest("header", "gpu-a", {}, nodes, 8)
    return ProjectJob(JobRequest(job_id, priority, seq, [role], "header", project), project)


class Fleet:
    def __init__(self, nodes: int, *quotas: ProjectQuota) -> None:
        self.model = CapacityModel.from_nodes(gpu_node(f"n{i}") for i in range(nodes))
        self.quotas = {str(q.project): q for q in quotas}
        self.running: list[RunningJob] = []

    def run(self, job_id: str, project: ProjectId, *, lost: float, priority: int = 0, seq: int = 0) -> None:
        placed = place(self.model, request(job_id, project, priority=priority).request)
        assert not isinstance(placed, Unplaceable)
        self.model.allocate(job_id, placed.allocations())
        self.running.append(RunningJob(job_id, project, priority, seq, lost))

    def plan(self, job: ProjectJob, protected: tuple[str, ...] = ()):
        usage = project_usage(self.model, {r.job_id: r.project for r in self.running})
        return plan_preemption(self.model, job, self.running, self.quotas, usage, protected=protected)


def test_an_inside_quota_job_stops_the_borrower_that_loses_least_work() -> None:
    fleet = Fleet(3, ProjectQuota(VISION, 8), ProjectQuota(SPEECH, 8, borrowing_limit=16))
    fleet.run("s-inside", SPEECH, lost=10, seq=1)
    fleet.run("s-old", SPEECH, lost=3600, seq=2)
    fleet.run("s-new", SPEECH, lost=60, seq=3)
    held = {job_id: fleet.model.held(job_id) for job_id in fleet.model.allocated_jobs()}
    plan = fleet.plan(request("v1", VISION))
    assert plan is not None
    # s-inside lost least but speech borrows only 16 of its 24 GPUs: one job's worth is taken back.
    assert (plan.victims, plan.lost_work_s) == (("s-inside",), 10)
    assert {job_id: fleet.model.held(job_id) for job_id in fleet.model.allocated_jobs()} == held


def test_only_what_a_project_borrows_is_taken_back() -> None:
    fleet = Fleet(2, ProjectQuota(VISION, 16), ProjectQuota(SPEECH, 8, borrowing_limit=8))
    fleet.run("s1", SPEECH, lost=5)
    fleet.run("s2", SPEECH, lost=6)
    assert borrowers(fleet.model, fleet.running, fleet.quotas) == {SPEECH: 8}
    # Two nodes wanted, but speech borrows one job's worth only: its quota's job keeps running.
    assert fleet.plan(request("v2", VISION, 2)) is None
    assert fleet.plan(request("v1", VISION)) is not None


def test_no_victim_is_stopped_that_the_job_does_not_need() -> None:
    fleet = Fleet(4, ProjectQuota(VISION, 16), ProjectQuota(SPEECH, 0, borrowing_limit=32))
    fleet.run("s1", SPEECH, lost=1)
    fleet.run("s2", SPEECH, lost=2)
    fleet.run("s3", SPEECH, lost=3)
    fleet.run("free-node-user", SPEECH, lost=4)
    fleet.model.release("free-node-user")
    fleet.running.pop()
    plan = fleet.plan(request("v", VISION, 2))
    assert plan is not None
    assert plan.victims == ("s1",)  # one node was free already


def test_borrowers_do_not_evict_each_other_at_the_same_priority_but_higher_priority_may() -> None:
    fleet = Fleet(1, ProjectQuota(VISION, 0, borrowing_limit=8), ProjectQuota(SPEECH, 0, borrowing_limit=8))
    fleet.run("s1", SPEECH, lost=1)
    assert fleet.plan(request("v", VISION)) is None
    plan = fleet.plan(request("urgent", VISION, priority=5))
    assert plan is not None
    assert plan.victims == ("s1",)


def test_jobs_of_projects_without_quota_and_protected_jobs_are_never_victims() -> None:
    fleet = Fleet(2, ProjectQuota(VISION, 16), ProjectQuota(SPEECH, 0, borrowing_limit=8))
    fleet.run("unbounded", ROBOTS, lost=1)
    fleet.run("s1", SPEECH, lost=2)
    assert fleet.plan(request("v", VISION), protected=("s1",)) is None
    plan = fleet.plan(request("v", VISION))
    assert plan is not None
    assert plan.victims == ("s1",)


def test_a_lower_priority_job_never_preempts() -> None:
    fleet = Fleet(1, ProjectQuota(VISION, 8), ProjectQuota(SPEECH, 0, borrowing_limit=8))
    fleet.run("s1", SPEECH, lost=1, priority=10)
    assert fleet.plan(request("v", VISION, priority=0)) is None
