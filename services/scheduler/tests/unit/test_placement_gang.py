"""Gang placement: all workers or none, one worker per node, exact matching, stable output."""

from __future__ import annotations

import pytest
from rlark_devinfra.benches.scheduler_placement import (
    bench_free_placement,
    bench_free_requeue,
    bench_gang_placement,
    bench_requeue,
)
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.placement import (
    Demand,
    JobRequest,
    Placement,
    RoleRequest,
    Unplaceable,
    match_workers,
    place,
)
from scheduler_fleet import A100, gpu_node

pytestmark = pytest.mark.unit

H100 = {"rlark.io/gpu-model": "H100"}


def job(*roles: RoleRequest, job_id: str = "job-1", header: str | None = None) -> JobRequest:
    return JobRequest(job_id, 0, 1, list(roles), header or roles[0].name)


def role(
    name: str,
    replicas: int,
    gpus: int = 8,
    cluster: str = "gpu-a",
    selector: dict[str, str] | None = None,
) -> RoleRequest:
    return RoleRequest(name, cluster, A100 if selector is None else selector, replicas, gpus)


def free_map(model: CapacityModel) -> dict[tuple[str, str], int]:
    return {node.key: model.free_gpus(node.key) for node in model.nodes()}


def test_places_every_worker_with_contiguous_ranks_header_first() -> None:
    model = CapacityModel.from_nodes(
        [gpu_node(f"a{i}") for i in range(3)] + [gpu_node(f"b{i}", cluster="gpu-b") for i in range(2)]
    )
    request = job(
        role("actor", 2),
        role("header", 1, gpus=4, cluster="gpu-b"),
        role("rollout", 1, cluster="gpu-b"),
        header="header",
    )
    result = place(model, request)
    assert isinstance(result, Placement)
    assert [(w.role, w.index, w.rank, w.cluster) for w in result.workers] == [
        ("header", 0, 0, "gpu-b"),
        ("actor", 0, 1, "gpu-a"),
        ("actor", 1, 2, "gpu-a"),
        ("rollout", 0, 3, "gpu-b"),
    ]
    assert [w.gpus for w in result.workers] == [4, 8, 8, 8]
    assert len({w.node_key for w in result.workers}) == 4


def test_failed_gang_leaves_the_model_untouched() -> None:
    model = CapacityModel.from_nodes([gpu_node(f"a{i}") for i in range(3)])
    before = free_map(model), model.allocated_jobs(), model.version("gpu-a")
    contested = place(model, job(role("header", 1), role("workers", 3)))
    assert contested == Unplaceable("job-1", short_roles=(), contested_clusters=("gpu-a",))
    short = place(model, job(role("header", 1), role("workers", 4)))
    assert short == Unplaceable("job-1", short_roles=("workers",), contested_clusters=())
    assert (free_map(model), model.allocated_jobs(), model.version("gpu-a")) == before


def test_success_does_not_commit_until_the_caller_allocates() -> None:
    model = CapacityModel.from_nodes([gpu_node("a0")])
    result = place(model, job(role("header", 1)))
    assert isinstance(result, Placement)
    assert model.free_gpus(("gpu-a", "a0")) == 8
    model.allocate(result.job_id, result.allocations())
    assert model.free_gpus(("gpu-a", "a0")) == 0


def test_one_worker_per_node_even_when_a_node_has_gpus_for_two() -> None:
    model = CapacityModel.from_nodes([gpu_node("a0", gpus=16)])
    assert isinstance(place(model, job(role("header", 1), role("w", 1, gpus=8))), Unplaceable)
    model.upsert_node(gpu_node("a1", gpus=8))
    result = place(model, job(role("header", 1), role("w", 1, gpus=8)))
    assert isinstance(result, Placement)
    assert {w.node for w in result.workers} == {"a0", "a1"}


def test_different_jobs_may_share_a_node_with_enough_gpus() -> None:
    model = CapacityModel.from_nodes([gpu_node("a0", gpus=16)])
    first = place(model, job(role("header", 1), job_id="j1"))
    assert isinstance(first, Placement)
    model.allocate("j1", first.allocations())
    second = place(model, job(role("header", 1), job_id="j2"))
    assert isinstance(second, Placement)
    assert second.workers[0].node == "a0"


def test_overlapping_selectors_in_one_cluster_need_matching_not_greedy() -> None:
    # "zoned" may use a or b, "a100" needs both a and c. Both have two candidates, so greedy
    # serves "zoned" first (request order) with its best fit, a (fewest free GPUs), and leaves
    # "a100" one node short. Augmenting paths move "zoned" to b and give a to "a100".
    zone = {"zone": "1"}
    model = CapacityModel.from_nodes(
        [
            gpu_node("a", gpus=4, labels={**zone, **A100}),
            gpu_node("b", gpus=8, labels=zone),
            gpu_node("c", gpus=8, labels=A100),
        ]
    )
    zoned = role("zoned", 1, gpus=4, selector=zone)
    a100 = role("a100", 2, gpus=4, selector=A100)
    assert model.survey("gpu-a", zone, 4).candidates == ("a", "b")  # greedy's first pick is a
    assert model.survey("gpu-a", A100, 4).candidates == ("a", "c")  # which a100 cannot spare
    result = place(model, job(zoned, a100))
    assert isinstance(result, Placement)
    nodes: dict[str, set[str]] = {}
    for w in result.workers:
        nodes.setdefault(w.role, set()).add(w.node)
    assert nodes == {"zoned": {"b"}, "a100": {"a", "c"}}


def test_matcher_repairs_greedy_through_a_chain_of_moves() -> None:
    demands = [
        Demand(1, ("n1", "n2")),
        Demand(1, ("n2", "n3")),
        Demand(1, ("n1",)),
    ]
    # Greedy order: demand 2 (1 candidate) takes n1, then 0 takes n2, then 1 takes n3.
    assert match_workers(demands).short == ()
    tricky = [Demand(2, ("n1", "n2", "n3")), Demand(1, ("n1",)), Demand(1, ("n2", "n4"))]
    matching = match_workers(tricky)
    assert matching.short == ()
    assert sorted(n for got in matching.chosen for n in got) == ["n1", "n2", "n3", "n4"]


def test_matcher_reports_the_hall_violator_when_exhaustive() -> None:
    demands = [Demand(2, ("n1", "n2")), Demand(1, ("n1", "n2")), Demand(1, ("n3",))]
    matching = match_workers(demands, exhaustive=True)
    assert matching.short != ()
    assert matching.matched == 3
    assert matching.tight == (0, 1)


def test_two_roles_in_one_cluster_never_share_a_node() -> None:
    model = CapacityModel.from_nodes([gpu_node(f"a{i}") for i in range(4)])
    result = place(model, job(role("header", 1), role("x", 1), role("y", 2)))
    assert isinstance(result, Placement)
    assert len({w.node for w in result.workers}) == 4
    too_many = place(model, job(role("header", 1), role("x", 2), role("y", 2)))
    assert isinstance(too_many, Unplaceable)
    assert too_many.short_roles == ()
    assert too_many.contested_clusters == ("gpu-a",)


@pytest.mark.parametrize(
    "bad_node",
    [
        gpu_node("bad", ready=False),
        gpu_node("bad", schedulable=False),
        gpu_node("bad", gone=True),
        gpu_node("bad", gpus=4),
        gpu_node("bad", labels=H100),
    ],
    ids=["not-ready", "cordoned", "gone", "too-few-gpus", "wrong-labels"],
)
def test_unusable_nodes_are_never_chosen(bad_node: NodeState) -> None:
    model = CapacityModel.from_nodes([gpu_node("good"), bad_node])
    assert isinstance(place(model, job(role("header", 1))), Placement)
    result = place(model, job(role("header", 1), role("w", 1)))
    assert isinstance(result, Unplaceable)
    assert result.short_roles == ("w",) or result.contested_clusters == ("gpu-a",)


def test_offline_cluster_is_excluded() -> None:
    model = CapacityModel.from_nodes([gpu_node("a0"), gpu_node("b0", cluster="gpu-b")], offline=["gpu-b"])
    result = place(model, job(role("header", 1), role("w", 1, cluster="gpu-b")))
    assert isinstance(result, Unplaceable)
    assert result.short_roles == ("w",)


def test_roles_only_use_their_own_cluster() -> None:
    model = CapacityModel.from_nodes([gpu_node("a0"), gpu_node("a1")])
    assert isinstance(place(model, job(role("header", 1, cluster="gpu-b"))), Unplaceable)


def test_best_fit_keeps_big_nodes_for_big_asks() -> None:
    model = CapacityModel.from_nodes([gpu_node("big", gpus=8), gpu_node("small", gpus=2)])
    result = place(model, job(role("header", 1, gpus=2)))
    assert isinstance(result, Placement)
    assert result.workers[0].node == "small"


def test_equal_inputs_give_equal_placements_whatever_the_insertion_order() -> None:
    nodes = [gpu_node(f"n{i:02d}", gpus=8 - (i % 3)) for i in range(12)]
    request = job(role("header", 1, gpus=4), role("a", 3, gpus=6), role("b", 4, gpus=5, selector={}))
    forward = place(CapacityModel.from_nodes(nodes), request)
    backward = place(CapacityModel.from_nodes(reversed(nodes)), request)
    assert isinstance(forward, Placement)
    assert forward == backward
    indexes = [w.node for w in forward.workers if w.role == "b"]
    assert indexes == sorted(indexes)


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="replicas"):
        RoleRequest("r", "c", {}, 0, 1)
    with pytest.raises(ValueError, match="gpus_per_worker"):
        RoleRequest("r", "c", {}, 1, -1)
    with pytest.raises(ValueError, match="unique"):
        JobRequest("j", 0, 0, [role("r", 1), role("r", 1)], "r")
    with pytest.raises(ValueError, match="header role"):
        JobRequest("j", 0, 0, [role("r", 1)], "h")
    with pytest.raises(ValueError, match="at least one role"):
        JobRequest("j", 0, 0, [], "h")


def test_benchmarks_run_and_report_their_counts() -> None:
    gang = bench_gang_placement(runs=2)
    assert (gang["nodes"], gang["workers"], gang["runs"]) == (10_000, 64, 2)
    requeue = bench_requeue(jobs=50)
    assert (requeue["queued_jobs"], requeue["first_round_tried"], requeue["full_tried"]) == (50, 50, 50)
    assert 0 < int(requeue["incremental_tried"]) < 50
    free = bench_free_placement(runs=2)
    assert (free["workers"], free["span_workers"], free["runs"]) == (64, 48, 2)
    free_requeue = bench_free_requeue(jobs=100)
    assert (free_requeue["queued_jobs"], free_requeue["naming_no_cluster"], free_requeue["full_tried"]) == (
        100,
        80,
        100,
    )
