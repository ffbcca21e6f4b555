"""Property tests of placement by need (ADR 0026), against a brute force over every assignment.

On random small fleets of three clusters (labels, offline clusters, another job's allocation), network
domains joining random clusters and jobs whose roles name a cluster, list some, select some by label or
leave it to the placer: a chosen placement never breaks a selector or a gang, never goes to a cluster a role
may not use; it never spans when one cluster fits, never spans clusters that no domain the job may use
joins, uses the fewest clusters that can hold the job, and it is refused only when no cluster, nor any set a
usable domain joins, can. Admission by projects never breaks a quota with such jobs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlark_scheduler.domain.capacity import CapacityModel, ClusterFacts, NodeState
from rlark_scheduler.domain.document.model import SpanClusters
from rlark_scheduler.domain.fairness import ProjectJob, admission_round, project_usage
from rlark_scheduler.domain.placement import JobRequest, LayoutKind, Placement, RoleRequest, place
from rlark_scheduler.domain.quotas import ProjectId, ProjectQuota
from rlark_scheduler.domain.reasons import explain_pending
from rlark_scheduler.domain.selectors import matches

pytestmark = pytest.mark.unit

CLUSTERS = ("c1", "c2", "c3")
REGIONS = {"c1": "north", "c2": "south", "c3": "north"}


@dataclass(frozen=True)
class World:
    nodes: tuple[NodeState, ...]
    offline: frozenset[str]
    held: tuple[tuple[tuple[str, str], int], ...]
    domains: tuple[tuple[str, frozenset[str] | None], ...]

    def model(self) -> CapacityModel:
        model = CapacityModel.from_nodes(self.nodes, offline=self.offline)
        for cluster, region in REGIONS.items():
            model.set_cluster_facts(cluster, ClusterFacts(labels={"region": region}))
        model.set_domains(dict(self.domains))
        if self.held:
            model.allocate("other", self.held)
        return model

    def free(self, node: NodeState) -> int:
        held = sum(g for key, g in self.held if key == node.key)
        return max(node.gpu_allocatable - node.gpu_used_external - held, 0)

    def clusters(self) -> set[str]:
        """Clusters with nodes that are not gone (what the placer knows of)."""
        return {node.cluster for node in self.nodes if not node.gone}


@st.composite
def worlds(draw: st.DrawFn) -> World:
    # Small clusters of mostly usable nodes, so that many jobs fit only across clusters.
    # (Hypothesis leans to the first choice of a list: the usual case comes first.)
    counts = {c: draw(st.sampled_from([2, 1, 3, 0])) for c in CLUSTERS}
    nodes = tuple(
        NodeState(
            cluster=cluster,
            name=f"{cluster}-n{i}",
            labels=draw(st.fixed_dictionaries({"model": st.sampled_from(["A", "A", "H"])})),
            ready=draw(st.integers(0, 9)) > 0,
            schedulable=draw(st.integers(0, 9)) > 0,
            gpu_allocatable=draw(st.sampled_from([8, 8, 4, 0])),
            gpu_used_external=draw(st.sampled_from([0, 0, 0, 0, 4])),
            gone=draw(st.integers(0, 14)) == 0,
        )
        for cluster, count in counts.items()
        for i in range(count)
    )
    held = tuple((node.key, 4) for node in nodes if draw(st.integers(0, 9)) == 0)
    offline = frozenset(c for c in CLUSTERS if draw(st.integers(0, 14)) == 0)
    members = st.one_of(st.frozensets(st.sampled_from(CLUSTERS), min_size=2, max_size=2), st.none())
    names = draw(st.sampled_from([("d1", "d2"), ("d1",), ()]))
    domains = tuple((name, draw(members)) for name in names)
    return World(nodes, offline, held, domains)


@st.composite
def jobs(draw: st.DrawFn) -> JobRequest:
    roles = []
    for i in range(draw(st.sampled_from([2, 3, 1]))):
        kind = draw(st.sampled_from(["free"] * 6 + ["named", "listed", "selected"]))
        roles.append(
            RoleRequest(
                name=f"r{i}",
                cluster=draw(st.sampled_from(CLUSTERS)) if kind == "named" else "",
                selector=draw(st.sampled_from([{}, {}, {}, {"model": "A"}])),
                replicas=draw(st.sampled_from([2, 1, 3])),
                gpus_per_worker=draw(st.sampled_from([4, 8, 0])),
                clusters=tuple(draw(st.sets(st.sampled_from(CLUSTERS), min_size=1)))
                if kind == "listed"
                else (),
                cluster_selector={"region": draw(st.sampled_from(["north", "south"]))}
                if kind == "selected"
                else {},
            )
        )
    header = draw(st.sampled_from([r.name for r in roles]))
    span = draw(st.sampled_from([SpanClusters.WHEN_NEEDED, SpanClusters.WHEN_NEEDED, SpanClusters.NEVER]))
    domains = draw(st.sampled_from([None, ("d1",), None, ("d2",), ()]))
    return JobRequest("job", 0, 0, roles, header, span=span, domains=domains)


def allowed(world: World, role: RoleRequest, cluster: str) -> bool:
    """May ``role`` go to ``cluster`` (by its name, list or cluster selector)?"""
    if role.cluster:
        return cluster == role.cluster
    return (
        cluster in world.clusters()
        and (not role.clusters or cluster in role.clusters)
        and matches(role.cluster_selector, {"region": REGIONS[cluster]})
    )


def usable(world: World, role: RoleRequest, node: NodeState) -> bool:
    return (
        allowed(world, role, node.cluster)
        and node.cluster not in world.offline
        and not node.gone
        and node.ready
        and node.schedulable
        and matches(role.selector, node.labels)
        and world.free(node) >= role.gpus_per_worker
    )


def fits_on(world: World, job: JobRequest, clusters: Iterable[str]) -> bool:
    """Every worker on a distinct usable node of ``clusters`` (tiny instances; memoised on the used set)."""
    within = set(clusters)
    workers = [role for role in job.roles for _ in range(role.replicas)]
    candidates = [
        [n.name for n in world.nodes if n.cluster in within and usable(world, role, n)] for role in workers
    ]

    @functools.cache
    def search(i: int, used: frozenset[str]) -> bool:
        if i == len(workers):
            return True
        return any(search(i + 1, used | {name}) for name in candidates[i] if name not in used)

    return search(0, frozenset())


def joined_sets(world: World, job: JobRequest) -> list[tuple[str, set[str]]]:
    """The domains ``job`` may span through, with the clusters each joins."""
    names = [d for d, _ in world.domains] if job.domains is None else list(job.domains)
    known = dict(world.domains)
    return [
        (name, set(CLUSTERS) if known[name] is None else set(known[name])) for name in names if name in known
    ]  # type: ignore[arg-type]


def fewest_span(world: World, job: JobRequest) -> int | None:
    """The fewest clusters (≥ 2) a usable domain joins that hold the job; None when none do."""
    for size in range(2, len(CLUSTERS) + 1):
        for _, joined in joined_sets(world, job):
            if any(fits_on(world, job, subset) for subset in combinations(sorted(joined), size)):
                return size
    return None


def check_sound(world: World, job: JobRequest, placement: Placement) -> None:
    nodes = {node.key: node for node in world.nodes}
    roles = {role.name: role for role in job.roles}
    assert len({w.node_key for w in placement.workers}) == len(placement.workers)
    assert [w.rank for w in placement.workers] == list(range(job.worker_count))
    assert placement.workers[0].role == job.header_role
    for role in job.roles:
        mine = [w for w in placement.workers if w.role == role.name]
        assert [w.index for w in mine] == list(range(role.replicas))
    for worker in placement.workers:
        role = roles[worker.role]
        assert worker.gpus == role.gpus_per_worker
        assert usable(world, role, nodes[worker.node_key]), worker


@settings(max_examples=400, deadline=None)
@given(worlds(), jobs())
def test_a_chosen_placement_is_sound_never_spans_needlessly_or_outside_a_domain_and_uses_the_fewest_clusters(
    world: World, job: JobRequest
) -> None:
    model = world.model()
    result = place(model, job)
    one = [c for c in CLUSTERS if fits_on(world, job, [c])]
    span = fewest_span(world, job) if job.span is SpanClusters.WHEN_NEEDED and not job.named else None
    if not isinstance(result, Placement):
        assert not one, "refused, yet one cluster holds it"
        assert span is None, "refused, yet a domain's clusters hold it"
        assert not explain_pending(model, job).fits
        return
    check_sound(world, job, result)
    layout = result.layout
    assert layout is not None
    used = {w.cluster for w in result.workers}
    assert set(layout.clusters) == used
    if job.named:
        assert layout.kind is LayoutKind.NAMED
        return
    if one:
        assert len(used) == 1, f"spans {sorted(used)} though {one} holds it alone"
        assert layout.kind is LayoutKind.ONE
        assert layout.domain is None
        return
    assert layout.kind is LayoutKind.SPAN
    assert job.span is SpanClusters.WHEN_NEEDED
    assert any(name == layout.domain and used <= joined for name, joined in joined_sets(world, job)), (
        f"spans {sorted(used)} through {layout.domain}, which does not join them"
    )
    assert len(used) == span, f"spans {len(used)} clusters where {span} would do"


@settings(max_examples=150, deadline=None)
@given(worlds(), st.lists(jobs(), min_size=1, max_size=4), st.data())
def test_admission_of_jobs_naming_no_cluster_never_breaks_a_quota(
    world: World, requests: list[JobRequest], data: st.DataObject
) -> None:
    model = world.model()
    gpus = data.draw(st.sampled_from([0, 8, 16, 32]))
    bounded = data.draw(st.sets(st.sampled_from(CLUSTERS)))
    quota = ProjectQuota(
        ProjectId("p"),
        gpus=gpus,
        clusters={c: min(data.draw(st.sampled_from([0, 8])), gpus) for c in sorted(bounded)},
        borrowing_limit=data.draw(st.sampled_from([0, 8])),
    )
    waiting = [
        ProjectJob(JobRequest(f"j{i}", 0, i, r.roles, r.header_role, "p", r.span, r.domains), ProjectId("p"))
        for i, r in enumerate(requests)
    ]
    running = {"other": ProjectId("")} if world.held else {}
    result = admission_round(model, waiting, running, [quota])
    usage = project_usage(model, {**running, **{a.job_id: ProjectId("p") for a in result.admitted}})
    held = usage.get(ProjectId("p"))
    for scope, bound in quota.scopes():
        assert (held.within(scope) if held else 0) <= bound + quota.borrowing_limit, scope
    for admitted in result.admitted:
        request = next(j.request for j in waiting if j.job_id == admitted.job_id)
        assert len({w.node_key for w in admitted.placement.workers}) == request.worker_count
