"""The queue by projects and quotas (``queue.fair_round``, ADR 0020): quota reasons kept on the queue, and
cheap re-evaluation that still re-tries a job when its project's usage or any quota changes."""

from __future__ import annotations

import functools

import pytest
import scheduler_fleet
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.placement import JobRequest, RoleRequest
from rlark_scheduler.domain.queue import JobQueue, RoundStats, fair_round
from rlark_scheduler.domain.quotas import ProjectId, ProjectQuota, ScopeKind
from rlark_scheduler.domain.reasons import PendingCode

pytestmark = pytest.mark.unit

gpu_node = functools.partial(scheduler_fleet.gpu_node, labels={})
VISION, SPEECH = ProjectId("vision"), ProjectId("speech")


def job(job_id: str, project: str, workers: int = 1, *, seq: int = 0, priority: int = 0) -> JobRequest:
    role = RoleRequest("header", "gpu-a", {}, workers, 8)
    return JobRequest(job_id, priority, seq, [role], "header", project)


def nodes(count: int) -> list[NodeState]:
    return [gpu_node(f"gpu-a-n{i}", "gpu-a") for i in range(count)]


class Fleet:
    """A model, a queue and the loop's bookkeeping of projects, as the placement loop keeps them."""

    def __init__(self, count: int, *quotas: ProjectQuota) -> None:
        self.model = CapacityModel.from_nodes(nodes(count))
        self.queue = JobQueue()
        self.projects: dict[str, str] = {}
        self.quotas = {str(q.project): q for q in quotas}
        self.epoch = 1

    def submit(self, request: JobRequest) -> None:
        self.projects[request.job_id] = request.project
        self.queue.push(request)

    def round(self) -> list[str]:
        running = {job_id: self.projects[job_id] for job_id in self.model.allocated_jobs()}
        placed = fair_round(self.model, self.queue, running, self.quotas, self.epoch)
        return [p.job_id for p in placed]

    def end(self, job_id: str) -> None:
        self.model.release(job_id)

    def set_quota(self, quota: ProjectQuota) -> None:
        self.quotas[str(quota.project)] = quota
        self.epoch += 1


def test_a_job_beyond_its_quota_waits_with_the_scope_and_figures() -> None:
    fleet = Fleet(4, ProjectQuota(VISION, 8))
    fleet.submit(job("first", VISION, seq=1))
    fleet.submit(job("second", VISION, seq=2))
    assert fleet.round() == ["first"]
    reason = fleet.queue.reason("second")
    assert reason is not None
    assert reason.code is PendingCode.QUOTA
    assert reason.quota is not None
    assert (reason.quota.project, reason.quota.breach.scope.kind) == ("vision", ScopeKind.OVERALL)
    assert (reason.quota.breach.used, reason.quota.breach.requested, reason.quota.breach.limit) == (8, 8, 8)
    assert fleet.queue.take_reason_changes() == [("second", reason)]


def test_a_job_kept_back_by_quota_is_not_retried_until_its_project_or_a_quota_changes() -> None:
    fleet = Fleet(8, ProjectQuota(VISION, 8), ProjectQuota(SPEECH, 8))
    fleet.submit(job("v1", VISION, seq=1))
    fleet.submit(job("v2", VISION, seq=2))
    fleet.submit(job("s1", SPEECH, seq=3))
    assert fleet.round() == ["v1", "s1"]
    fleet.round()
    assert fleet.queue.last_round == RoundStats(considered=1, tried=0, placed=0, pending=1)
    assert fleet.queue.rounds_waited("v2") == 2
    fleet.end("s1")  # another project's job ending frees capacity only: v2 is re-tried, still over quota
    assert fleet.round() == []
    assert fleet.queue.last_round.tried == 1
    fleet.end("v1")  # its own project's usage fell: admitted
    assert fleet.round() == ["v2"]


def test_a_raised_quota_admits_the_waiting_job_on_the_next_round() -> None:
    fleet = Fleet(4, ProjectQuota(VISION, 8))
    fleet.submit(job("v1", VISION, seq=1))
    fleet.submit(job("v2", VISION, 2, seq=2))
    assert fleet.round() == ["v1"]
    fleet.set_quota(ProjectQuota(VISION, 8, borrowing_limit=8))
    assert fleet.round() == []
    reason = fleet.queue.reason("v2")
    assert reason is not None
    assert reason.code is PendingCode.BORROWING_LIMIT
    fleet.set_quota(ProjectQuota(VISION, 24))
    assert fleet.round() == ["v2"]


def test_jobs_without_a_bounded_project_wait_for_capacity_only() -> None:
    fleet = Fleet(2, ProjectQuota(VISION, 0))
    fleet.submit(job("none", "", 2, seq=1))
    fleet.submit(job("gone", "deleted-project", seq=2))
    fleet.submit(job("vision", VISION, seq=3))
    assert fleet.round() == ["none"]
    codes = {job_id: fleet.queue.reason(job_id) for job_id in ("gone", "vision")}
    assert {k: r.code for k, r in codes.items() if r} == {
        "gone": PendingCode.TOO_FEW_NODES_WITH_GPUS,
        "vision": PendingCode.QUOTA,
    }


def test_borrowing_goes_to_the_project_with_the_smaller_share_before_an_older_job() -> None:
    fleet = Fleet(2, ProjectQuota(VISION, 0, borrowing_limit=16), ProjectQuota(SPEECH, 0, borrowing_limit=16))
    fleet.submit(job("v1", VISION, seq=1))
    assert fleet.round() == ["v1"]
    fleet.submit(job("v2", VISION, seq=2))
    fleet.submit(job("s1", SPEECH, seq=3))
    # vision holds half the fleet, speech nothing: speech borrows the last node though v2 is older.
    assert fleet.round() == ["s1"]
    reason = fleet.queue.reason("v2")
    assert reason is not None
    assert reason.code is PendingCode.TOO_FEW_NODES_WITH_GPUS
