"""Property tests of fair admission (issue 20 must-show, ADR 0020), on random small fleets, quotas,
running and waiting jobs:

- admissions never take a project beyond quota + borrowing limit, overall, per cluster, per GPU model;
- a job refused for quota is refused on the usage of running jobs and jobs of its priority or higher:
  a lower-priority job never passes it for quota reasons;
- equal inputs give equal rounds, whatever order the jobs and quotas are listed in;
- with equal demand and repeated rounds (jobs ending oldest first), the projects' dominant shares
  converge to within one job's share.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from random import Random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.fairness import (
    AdmissionRound,
    ProjectJob,
    WaitReason,
    admission_round,
    dominant_share,
    fleet_gpus,
)
from rlark_scheduler.domain.placement import JobRequest, Placement, RoleRequest, place
from rlark_scheduler.domain.quotas import GpuUsage, ProjectId, ProjectQuota

pytestmark = pytest.mark.unit

CLUSTERS = ("c1", "c2")
MODELS = ("A100", "H100")
PROJECTS = tuple(ProjectId(f"p{i}") for i in range(3))
LABEL = "rlark.io/gpu-model"
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class World:
    nodes: tuple[NodeState, ...]
    quotas: tuple[ProjectQuota, ...]
    running: tuple[ProjectJob, ...]  # placed in order when they fit, regardless of quotas
    waiting: tuple[ProjectJob, ...]

    def start(self) -> tuple[CapacityModel, dict[str, ProjectId]]:
        model = CapacityModel.from_nodes(self.nodes)
        running: dict[str, ProjectId] = {}
        for job in self.running:
            placed = place(model, job.request)
            if isinstance(placed, Placement):
                model.allocate(job.job_id, placed.allocations())
                running[job.job_id] = job.project
        return model, running


@st.composite
def nodes_st(draw: st.DrawFn) -> tuple[NodeState, ...]:
    result = []
    for cluster in CLUSTERS:
        for i in range(draw(st.integers(1, 5))):
            gpu_model = draw(st.sampled_from(MODELS))
            result.append(
                NodeState(
                    cluster,
                    f"{cluster}-n{i}",
                    {LABEL: gpu_model},
                    gpu_allocatable=draw(st.sampled_from([4, 8, 8])),
                    gpu_used_external=draw(st.sampled_from([0, 0, 0, 2])),
                    gpu_model=gpu_model,
                )
            )
    return tuple(result)


@st.composite
def quota_st(draw: st.DrawFn, project: ProjectId) -> ProjectQuota:
    overall = draw(st.integers(0, 32))
    bound = st.integers(0, overall)
    return ProjectQuota(
        project,
        overall,
        clusters=draw(st.dictionaries(st.sampled_from(CLUSTERS), bound, max_size=2)),
        models=draw(st.dictionaries(st.sampled_from(MODELS), bound, max_size=2)),
        borrowing_limit=draw(st.sampled_from([0, 0, 4, 8, 16])),
    )


@st.composite
def job_st(draw: st.DrawFn, job_id: str, seq: int) -> ProjectJob:
    roles = [
        RoleRequest(
            f"r{i}",
            draw(st.sampled_from(CLUSTERS)),
            draw(st.sampled_from([{}, {}, {LABEL: "A100"}, {LABEL: "H100"}])),
            draw(st.sampled_from([1, 1, 2])),
            draw(st.sampled_from([0, 2, 4, 4, 8])),
        )
        for i in range(draw(st.integers(1, 2)))
    ]
    request = JobRequest(job_id, draw(st.integers(0, 2)), seq, roles, "r0")
    return ProjectJob(request, draw(st.sampled_from(PROJECTS)))


@st.composite
def worlds(draw: st.DrawFn) -> World:
    running = tuple(draw(job_st(f"run-{i}", i)) for i in range(draw(st.integers(0, 5))))
    waiting = tuple(
        draw(job_st(f"job-{i}", draw(st.integers(0, 20)))) for i in range(draw(st.integers(0, 10)))
    )
    quotas = tuple(draw(quota_st(project)) for project in PROJECTS)
    return World(draw(nodes_st()), quotas, running, waiting)


def usage_of(model: CapacityModel, job_ids: list[str]) -> GpuUsage:
    usage = GpuUsage()
    for job_id in job_ids:
        usage = usage + GpuUsage.of_allocations(model, model.held(job_id))
    return usage


@EXAMPLES
@given(worlds())
def test_admissions_never_exceed_quota_plus_borrowing_limit_in_any_scope(world: World) -> None:
    model, running = world.start()
    result = admission_round(model, world.waiting, running, world.quotas)
    for quota in world.quotas:
        before = usage_of(model, [j for j, p in running.items() if p == quota.project])
        added = usage_of(model, [a.job_id for a in result.admitted if a.project == quota.project])
        assert result.usage[quota.project] == before + added
        for scope, bound in quota.scopes():
            if added.within(scope):
                # Running work may already be beyond a bound (nothing preempts it); new work never is.
                assert before.within(scope) + added.within(scope) <= bound + quota.borrowing_limit, (
                    quota.project,
                    scope,
                )


@EXAMPLES
@given(worlds())
def test_admitted_gangs_are_whole_and_never_overcommit_a_node(world: World) -> None:
    model, running = world.start()
    result = admission_round(model, world.waiting, running, world.quotas)
    requests = {job.job_id: job.request for job in world.waiting}
    for admitted in result.admitted:
        workers = admitted.placement.workers
        assert len(workers) == requests[admitted.job_id].worker_count
        assert len({w.node_key for w in workers}) == len(workers)
        assert model.held(admitted.job_id) == admitted.placement.allocations()
    for node in world.nodes:
        held = sum(g for job_id in model.allocated_jobs() for key, g in model.held(job_id) if key == node.key)
        assert held <= node.gpu_allocatable - node.gpu_used_external
    decided = [a.job_id for a in result.admitted] + [w.job_id for w in result.waiting]
    assert sorted(decided) == sorted(requests)


@EXAMPLES
@given(worlds())
def test_a_job_refused_for_quota_is_never_passed_by_a_lower_priority_one(world: World) -> None:
    model, running = world.start()
    result = admission_round(model, world.waiting, running, world.quotas)
    priority = {job.job_id: job.request.priority for job in world.waiting}
    for waiting in result.waiting:
        if waiting.reason is WaitReason.CAPACITY:
            continue
        assert waiting.breach is not None
        assert waiting.breach.used + waiting.breach.requested > waiting.breach.limit
        mine = [j for j, p in running.items() if p == waiting.project] + [
            a.job_id
            for a in result.admitted
            if a.project == waiting.project and priority[a.job_id] >= priority[waiting.job_id]
        ]
        # What the refusal counts is held by running jobs and admissions of its priority or higher.
        assert waiting.breach.used <= usage_of(model, mine).within(waiting.breach.scope)


def comparable(result: AdmissionRound) -> tuple[object, ...]:
    return (result.admitted, result.waiting, dict(result.usage), dict(result.shares))


@EXAMPLES
@given(worlds(), st.randoms(use_true_random=False))
def test_equal_inputs_give_equal_rounds_whatever_the_listing_order(world: World, random: Random) -> None:
    first_model, running = world.start()
    first = admission_round(first_model, world.waiting, running, world.quotas)
    shuffled_waiting, shuffled_quotas = list(world.waiting), list(world.quotas)
    random.shuffle(shuffled_waiting)
    random.shuffle(shuffled_quotas)
    second_model, running_again = world.start()
    second = admission_round(
        second_model, shuffled_waiting, dict(reversed(running_again.items())), shuffled_quotas
    )
    assert comparable(first) == comparable(second)
    assert {j: first_model.held(j) for j in first_model.allocated_jobs()} == {
        j: second_model.held(j) for j in second_model.allocated_jobs()
    }


# -- convergence -----------------------------------------------------------------------------------


@st.composite
def shapes(draw: st.DrawFn) -> tuple[RoleRequest, ...]:
    """One job shape for every project: a role on c1's A100s, maybe one on c2's H100s too."""
    roles = [RoleRequest("r0", "c1", {}, draw(st.integers(1, 2)), draw(st.sampled_from([2, 4, 8])))]
    if draw(st.booleans()):
        roles.append(RoleRequest("r1", "c2", {}, draw(st.integers(1, 2)), draw(st.sampled_from([2, 4, 8]))))
    return tuple(roles)


def slots(nodes: list[NodeState], shape: tuple[RoleRequest, ...]) -> int:
    """How many jobs of ``shape`` the empty fleet holds at once."""
    model = CapacityModel.from_nodes(nodes)
    count = 0
    while isinstance(placed := place(model, JobRequest(f"probe-{count}", 0, 0, shape, "r0")), Placement):
        model.allocate(placed.job_id, placed.allocations())
        count += 1
    return count


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=shapes(),
    node_counts=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    project_count=st.integers(2, 4),
    quota_jobs=st.integers(0, 2),
    initial=st.lists(st.integers(0, 3), max_size=12),
)
def test_with_equal_demand_shares_converge_to_within_one_job(
    shape: tuple[RoleRequest, ...],
    node_counts: tuple[int, int],
    project_count: int,
    quota_jobs: int,
    initial: list[int],
) -> None:
    nodes = [
        NodeState("c1", f"a{i}", {LABEL: "A100"}, gpu_allocatable=8, gpu_model="A100")
        for i in range(node_counts[0])
    ]
    nodes += [
        NodeState("c2", f"h{i}", {LABEL: "H100"}, gpu_allocatable=8, gpu_model="H100")
        for i in range(node_counts[1])
    ]
    model = CapacityModel.from_nodes(nodes)
    projects = [ProjectId(f"p{i}") for i in range(project_count)]
    job_gpus = sum(role.replicas * role.gpus_per_worker for role in shape)
    # Equal quotas of a few jobs each when the fleet can hold all of them at once; else none, so all borrow
    # (oversubscribed quotas are admitted first come, first served: no fairness is promised among them).
    quota = quota_jobs * job_gpus if quota_jobs * project_count <= slots(nodes, shape) else 0
    quotas = [ProjectQuota(p, quota, borrowing_limit=1000) for p in projects]
    seq = 0

    def new_job(project: ProjectId) -> ProjectJob:
        nonlocal seq
        seq += 1
        return ProjectJob(JobRequest(f"{project}-{seq}", 0, seq, shape, "r0"), project)

    running: dict[str, ProjectId] = {}
    started: deque[str] = deque()  # oldest first: jobs of equal length end in the order they started
    for index in initial:
        job = new_job(projects[index % project_count])
        placed = place(model, job.request)
        if isinstance(placed, Placement):
            model.allocate(job.job_id, placed.allocations())
            running[job.job_id] = job.project
            started.append(job.job_id)
    backlog = {p: [new_job(p), new_job(p)] for p in projects}  # every project always wants more

    fleet = fleet_gpus(model)
    model_of = {"c1": "A100", "c2": "H100"}
    one_job = dominant_share(
        GpuUsage({(r.cluster, model_of[r.cluster]): r.replicas * r.gpus_per_worker for r in shape}), fleet
    )
    rounds = len(started) + len(nodes) + 2
    for _ in range(rounds):
        if started:
            ended = started.popleft()
            model.release(ended)
            del running[ended]
        result = admission_round(model, [j for p in projects for j in backlog[p]], running, quotas)
        for admitted in result.admitted:
            running[admitted.job_id] = admitted.project
            started.append(admitted.job_id)
            backlog[admitted.project] = [j for j in backlog[admitted.project] if j.job_id != admitted.job_id]
            backlog[admitted.project].append(new_job(admitted.project))
    shares = [result.shares[p] for p in projects]
    assert max(shares) - min(shares) <= one_job, shares
