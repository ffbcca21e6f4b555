"""Property tests: on random small clusters and jobs, placement is sound and complete.

Sound: whenever ``place`` succeeds, every constraint holds (checked from the raw node facts, not
from the model's indexes). Complete: whenever it fails, a brute-force search over every
assignment finds no placement either. The same two checks are made for ``can_ever_fit``, and the
pending reason must agree with ``place``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.placement import (
    Demand,
    JobRequest,
    Placement,
    RoleRequest,
    match_workers,
    place,
)
from rlark_scheduler.domain.reasons import can_ever_fit, explain_pending
from rlark_scheduler.domain.selectors import matches

pytestmark = pytest.mark.unit

CLUSTERS = ("c1", "c2")
clusters_st = st.sampled_from(("c1", "c1", "c2"))  # mostly one cluster, so roles compete


@dataclass(frozen=True)
class World:
    nodes: tuple[NodeState, ...]
    offline: frozenset[str]
    held: tuple[tuple[tuple[str, str], int], ...]  # another job's allocation

    def model(self) -> CapacityModel:
        model = CapacityModel.from_nodes(self.nodes, offline=self.offline)
        if self.held:
            model.allocate("other", self.held)
        return model

    def free(self, node: NodeState) -> int:
        held = sum(g for key, g in self.held if key == node.key)
        return max(node.gpu_allocatable - node.gpu_used_external - held, 0)


labels_st = st.fixed_dictionaries(
    {"model": st.sampled_from(["A", "H"])}, optional={"zone": st.sampled_from(["1", "2"])}
)
selectors_st: st.SearchStrategy[dict[str, str]] = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"model": st.sampled_from(["A", "H"])}),
    st.fixed_dictionaries({"zone": st.sampled_from(["1", "2"])}),
    labels_st,
)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    # Biased towards usable nodes so that successes, shortages and contests all show up often.
    counts = {"c1": draw(st.integers(0, 8)), "c2": draw(st.integers(0, 4))}
    nodes = tuple(
        NodeState(
            cluster=cluster,
            name=f"{cluster}-n{i}",
            labels=draw(labels_st),
            ready=draw(st.integers(0, 5)) > 0,
            schedulable=draw(st.integers(0, 5)) > 0,
            gpu_allocatable=draw(st.sampled_from([0, 2, 4, 4, 8, 8])),
            gpu_used_external=draw(st.sampled_from([0, 0, 0, 1, 2])),
            gone=draw(st.integers(0, 7)) == 0,
        )
        for cluster, count in counts.items()
        for i in range(count)
    )
    held = tuple((node.key, draw(st.integers(1, 4))) for node in nodes if draw(st.integers(0, 5)) == 0)
    offline = frozenset(c for c in CLUSTERS if draw(st.integers(0, 7)) == 0)
    return World(nodes, offline, held)


@st.composite
def jobs(draw: st.DrawFn) -> JobRequest:
    count = draw(st.integers(1, 3))
    roles = [
        RoleRequest(
            name=f"r{i}",
            cluster=draw(clusters_st),
            selector=draw(selectors_st),
            replicas=draw(st.sampled_from([1, 1, 2, 3])),
            gpus_per_worker=draw(st.sampled_from([0, 1, 2, 2, 4, 8])),
        )
        for i in range(count)
    ]
    header = draw(st.sampled_from([r.name for r in roles]))
    return JobRequest("job", 0, 0, roles, header)


def usable_now(world: World, role: RoleRequest, node: NodeState) -> bool:
    return (
        node.cluster == role.cluster
        and role.cluster not in world.offline
        and not node.gone
        and node.ready
        and node.schedulable
        and matches(role.selector, node.labels)
        and world.free(node) >= role.gpus_per_worker
    )


def usable_ever(world: World, role: RoleRequest, node: NodeState) -> bool:
    return (
        node.cluster == role.cluster
        and not node.gone
        and matches(role.selector, node.labels)
        and node.gpu_allocatable >= role.gpus_per_worker
    )


def brute_force_exists(
    world: World, job: JobRequest, usable: Callable[[World, RoleRequest, NodeState], bool]
) -> bool:
    """Try every assignment of workers to distinct nodes (tiny instances; memoised on the used set)."""
    workers = [role for role in job.roles for _ in range(role.replicas)]

    @functools.cache
    def search(i: int, used: frozenset[str]) -> bool:
        if i == len(workers):
            return True
        return any(
            search(i + 1, used | {node.name})
            for node in world.nodes
            if node.name not in used and usable(world, workers[i], node)
        )

    return search(0, frozenset())


def snapshot(model: CapacityModel) -> object:
    return (
        sorted((n.key, model.free_gpus(n.key)) for n in model.nodes()),
        model.allocated_jobs(),
        [model.version(c) for c in CLUSTERS],
    )


def check_valid(world: World, job: JobRequest, placement: Placement) -> None:
    nodes = {node.name: node for node in world.nodes}
    roles = {role.name: role for role in job.roles}
    assert len({w.node for w in placement.workers}) == len(placement.workers)
    assert [w.rank for w in placement.workers] == list(range(job.worker_count))
    assert placement.workers[0].role == job.header_role
    for role in job.roles:
        mine = [w for w in placement.workers if w.role == role.name]
        assert [w.index for w in mine] == list(range(role.replicas))
    for worker in placement.workers:
        role = roles[worker.role]
        assert worker.gpus == role.gpus_per_worker
        assert worker.cluster == role.cluster
        assert usable_now(world, role, nodes[worker.node])


@settings(max_examples=300, deadline=None)
@given(worlds(), jobs())
def test_place_is_sound_and_complete(world: World, job: JobRequest) -> None:
    model = world.model()
    before = snapshot(model)
    result = place(model, job)
    assert snapshot(model) == before
    exists = brute_force_exists(world, job, usable_now)
    assert isinstance(result, Placement) == exists
    if isinstance(result, Placement):
        check_valid(world, job, result)
    assert explain_pending(model, job).fits == exists
    assert snapshot(model) == before


@settings(max_examples=200, deadline=None)
@given(worlds(), jobs())
def test_can_ever_fit_is_exact_and_implied_by_fitting_now(world: World, job: JobRequest) -> None:
    model = world.model()
    ever, reason = can_ever_fit(model, job)
    assert ever == brute_force_exists(world, job, usable_ever)
    assert (reason is None) == ever
    if isinstance(place(model, job), Placement):
        assert ever


@st.composite
def demand_lists(draw: st.DrawFn) -> list[Demand]:
    names = [f"n{i}" for i in range(draw(st.integers(0, 7)))]
    return [
        Demand(
            replicas=draw(st.integers(1, 3)),
            candidates=tuple(draw(st.permutations(names))[: draw(st.integers(0, len(names)))]),
        )
        for _ in range(draw(st.integers(1, 4)))
    ]


def brute_force_max_matching(demands: list[Demand]) -> int:
    slots = [i for i, demand in enumerate(demands) for _ in range(demand.replicas)]

    @functools.cache
    def best(k: int, used: frozenset[str]) -> int:
        if k == len(slots):
            return 0
        skip = best(k + 1, used)
        take = [1 + best(k + 1, used | {name}) for name in demands[slots[k]].candidates if name not in used]
        return max([skip, *take])

    return best(0, frozenset())


@settings(max_examples=300, deadline=None)
@given(demand_lists())
def test_matcher_is_maximum_and_names_a_true_hall_violator(demands: list[Demand]) -> None:
    matching = match_workers(demands, exhaustive=True)
    everything = sum(demand.replicas for demand in demands)
    maximum = brute_force_max_matching(demands)
    assert matching.matched == maximum
    given_out = [name for got in matching.chosen for name in got]
    assert len(given_out) == len(set(given_out))
    for demand, got in zip(demands, matching.chosen, strict=True):
        assert set(got) <= set(demand.candidates)
        assert len(got) <= demand.replicas
    assert (matching.short == ()) == (maximum == everything)
    if matching.short:
        tight = [demands[i] for i in matching.tight]
        assert sum(d.replicas for d in tight) > len({n for d in tight for n in d.candidates})
    quick = match_workers(demands)
    assert (quick.short == ()) == (matching.short == ())
