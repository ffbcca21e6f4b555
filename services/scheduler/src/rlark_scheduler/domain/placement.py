"""Gang placement: put every worker of a job on a node at once, or none — and, for roles that name no
cluster, choose the clusters (ADR 0026).

Role: decide, for one job and the current capacity model, which node each worker goes to. The
model is only read; committing the answer (``model.allocate``) is the caller's move, so a failed
attempt leaves no trace and two jobs can never both hold half a gang.

Rules (ARCHITECTURE §5): a role's workers go only to its cluster (which must be online), onto
nodes that are not gone, ready, schedulable, match the role's selector and have at least the
role's GPUs free; one worker of a job per node, across all of the job's roles.

Because each node takes at most one worker of the job, "does the job fit" is a bipartite matching
between worker slots and nodes, solved per cluster (roles in different clusters never compete).
First a fast greedy: roles with the fewest candidates first, each taking its best-fit nodes (fewest
free GPUs that suffice, then by name) to keep big nodes for big asks. When greedy leaves a role
short, augmenting paths (Ford–Fulkerson over roles, starting from greedy's partial answer) finish
the job exactly; so "cannot place" is always true, never a greedy artefact. Every tie is broken by
a stable order, so equal inputs give equal placements.

Placement by need (ADR 0026). A role that names no cluster may go to any cluster with nodes that its
``clusters`` list (all when empty) and ``cluster_selector`` (on the cluster's labels) allow and that can
mount its mounts (its runtime, its hostPath policy). The placer then chooses, in this order:

1. **one cluster** that fits the whole job, no network domain needed — the best fit: the fewest free GPUs,
   then the fewest free nodes, then the name (big clusters stay whole for big jobs);
2. else, when the job allows it (``span``: ``whenNeeded``) and a network domain it may use joins them, the
   **fewest clusters** that fit it together (pairs before triples, every subset of a size before a larger
   one, up to :data:`MAX_SUBSETS` subsets a call), preferring, in order: each role whole (a role split across
   clusters would carry its own collectives over the link); the Header with the roles it talks to most
   (:func:`header_group`); the best measured link (the slowest round trip between the clusters, measured
   by their agents' tunnel probes; an unmeasured link ranks last); then the names. Sets are weighed in the
   order of what they could score at best and the search stops once none further on can do better, or
   after :data:`MAX_RANKED` sets that hold the job (a big job on a big domain fits on many).

Whether a set of clusters can hold the job is one exact matching over all their nodes (a role's workers may
then land in several of them); the preferred layout on it is searched among whole-role assignments first.
Answers are memoised in the model by the job's shape, so a queue of many jobs asking alike costs little.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import combinations, product
from math import inf
from types import MappingProxyType

from rlark_contracts.hostpaths import source_decision
from rlark_contracts.runtimes import mounts as runtime_mounts

from rlark_scheduler.domain.capacity import Allocation, CapacityModel, ClusterFacts, NodeKey
from rlark_scheduler.domain.document.model import DEFAULT_SPAN_CLUSTERS, SpanClusters
from rlark_scheduler.domain.selectors import LabelSelector, selector_key

MAX_SUBSETS = 2000
"""Sets of clusters one search for a spanning layout examines at most (after cheap counts rule most out):
every pair and triple of 20 clusters fit within it; beyond, the clusters are tried in name order."""
MAX_RANKED = 16
"""Sets of clusters of one size whose layouts are worked out at most, in the order of what each could score at
best (a role split or not, then the link, then the names); the search stops sooner when no set further on
can beat the best found."""
MAX_ASSIGNMENTS = 256
"""Whole-role (or one-split) assignments of a job's roles to one set of clusters examined at most."""
_SEP = "\x00"
"""Joins a cluster and a node name into one matching candidate when a match spans clusters."""

HOST_PATH = "hostPath"


@dataclass(frozen=True, slots=True)
class RoleRequest:
    """One role of a job as the placer sees it: where, which nodes, how many, how big.

    ``cluster`` is the role's cluster, or "" when the placer chooses it among the clusters ``clusters``
    lists (all when empty) whose labels match ``cluster_selector`` and that can mount ``mounts`` (each a
    mount's type and source)."""

    name: str
    cluster: str
    selector: LabelSelector
    replicas: int
    gpus_per_worker: int
    clusters: tuple[str, ...] = ()
    cluster_selector: LabelSelector = field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a role needs a name")
        if self.cluster and (self.clusters or self.cluster_selector):
            raise ValueError(
                f'role "{self.name}": a role names its cluster or lets the placer choose, not both'
            )
        if self.replicas < 1:
            raise ValueError(f'role "{self.name}": replicas must be >= 1')
        if self.gpus_per_worker < 0:
            raise ValueError(f'role "{self.name}": gpus_per_worker must be >= 0')
        object.__setattr__(self, "selector", MappingProxyType(dict(self.selector)))
        object.__setattr__(self, "clusters", tuple(self.clusters))
        object.__setattr__(self, "cluster_selector", MappingProxyType(dict(self.cluster_selector)))
        object.__setattr__(self, "mounts", tuple(self.mounts))

    @property
    def chooses(self) -> bool:
        """Whether the placer chooses this role's cluster."""
        return not self.cluster


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A job waiting for placement. Queue order is (-priority, submitted_seq).

    ``span``: may a job whose roles name no cluster span clusters. ``domains``: the network domains it may
    span through — None any, () none; for a job whose roles all name their clusters, the domain its workers
    join (or none). ``keep_together``: the roles kept with the Header when it spans (:func:`header_group`).
    """

    job_id: str
    priority: int
    submitted_seq: int
    roles: tuple[RoleRequest, ...]
    header_role: str
    project: str
    """The project the job is charged to (its quota, ADR 0020); "" for none."""
    span: SpanClusters
    domains: tuple[str, ...] | None
    keep_together: tuple[str, ...]
    shape: Hashable = field(init=False, compare=False, repr=False)
    """What its layout depends on, its names aside (:func:`job_shape`): jobs of one shape share answers."""

    def __init__(
        self,
        job_id: str,
        priority: int,
        submitted_seq: int,
        roles: Sequence[RoleRequest],
        header_role: str,
        project: str = "",
        span: SpanClusters = DEFAULT_SPAN_CLUSTERS,
        domains: Sequence[str] | None = None,
        keep_together: Sequence[str] = (),
    ) -> None:
        object.__setattr__(self, "job_id", job_id)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "submitted_seq", submitted_seq)
        object.__setattr__(self, "roles", tuple(roles))
        object.__setattr__(self, "header_role", header_role)
        object.__setattr__(self, "project", project)
        object.__setattr__(self, "span", SpanClusters(span))
        object.__setattr__(self, "domains", None if domains is None else tuple(domains))
        object.__setattr__(self, "keep_together", tuple(keep_together))
        names = [role.name for role in self.roles]
        if not names:
            raise ValueError(f"job {job_id}: at least one role is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"job {job_id}: role names must be unique")
        if header_role not in names:
            raise ValueError(f'job {job_id}: header role "{header_role}" is not one of its roles')
        object.__setattr__(self, "shape", job_shape(self))

    @property
    def queue_key(self) -> tuple[int, int, str]:
        """Where rounds try it: higher priority first, then first submitted (the job id breaks ties)."""
        return (-self.priority, self.submitted_seq, self.job_id)

    @property
    def named(self) -> bool:
        """Whether every role names its cluster (the placer chooses none)."""
        return all(role.cluster for role in self.roles)

    @property
    def clusters(self) -> tuple[str, ...]:
        """The clusters the job's roles name, sorted, without repeats (a role the placer places names none)."""
        return tuple(sorted({role.cluster for role in self.roles if role.cluster}))

    @property
    def worker_count(self) -> int:
        return sum(role.replicas for role in self.roles)

    def rank_order(self) -> tuple[RoleRequest, ...]:
        """Roles in rank order: the header role first, then the others in request order."""
        header = [role for role in self.roles if role.name == self.header_role]
        return (*header, *(role for role in self.roles if role.name != self.header_role))


def header_group(job: JobRequest) -> frozenset[str]:
    """The roles kept in the Header's cluster when the job spans clusters (ADR 0026): the Header's role and
    the roles the job names in ``keep_together``, or, when it names none, every role with GPUs — the roles
    an RL job's training traffic runs between (RLinf's actor syncs its weights to its rollouts every step,
    and both exchange batches), while CPU-only roles (simulators, reward servers) send small messages."""
    if job.keep_together:
        return frozenset({job.header_role, *job.keep_together})
    return frozenset({job.header_role, *(role.name for role in job.roles if role.gpus_per_worker > 0)})


@dataclass(frozen=True, slots=True)
class WorkerPlacement:
    """Where one worker goes. Ranks are contiguous from 0, the header role's worker(s) first.

    The stored worker (``jobs.WorkerFacts``) extends it, so every field decided here is stored as is.
    """

    role: str
    index: int
    rank: int
    cluster: str
    node: str
    gpus: int
    is_header: bool

    @property
    def node_key(self) -> NodeKey:
        return (self.cluster, self.node)


class LayoutKind(StrEnum):
    NAMED = "named"
    """Every role names its cluster."""
    ONE = "one"
    """The placer chose one cluster that holds the whole job."""
    SPAN = "span"
    """No single cluster holds it now: the fewest clusters a network domain of the job joins."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Which clusters a placement uses and why they were chosen (``layouts`` says it in words).

    ``clusters`` in the order of the lowest rank each holds (the Header's first); ``domain`` is the network
    domain the workers join (None: none); ``roles`` each role, in rank order, with the clusters of its
    workers. For a spanning layout, ``rtt_ms`` is the slowest round trip measured between its clusters (None:
    a link not measured yet), ``split`` the roles whose workers are in several clusters and ``apart`` the
    roles of the Header's group (:func:`header_group`) with workers away from the Header's cluster."""

    kind: LayoutKind
    clusters: tuple[str, ...]
    domain: str | None
    roles: tuple[tuple[str, tuple[str, ...]], ...]
    rtt_ms: float | None = None
    split: tuple[str, ...] = ()
    apart: tuple[str, ...] = ()

    @property
    def spans(self) -> bool:
        return len(self.clusters) > 1


@dataclass(frozen=True, slots=True)
class Placement:
    """A whole gang: every worker of the job, in rank order, and the layout it makes."""

    job_id: str
    workers: tuple[WorkerPlacement, ...]
    layout: Layout | None = None

    def allocations(self) -> tuple[Allocation, ...]:
        """What to pass to ``CapacityModel.allocate`` to commit this placement."""
        return tuple((worker.node_key, worker.gpus) for worker in self.workers)


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """The verdict that the job cannot be placed now, with the two kinds of proof.

    ``short_roles``: roles that cannot be placed even alone (too few candidate nodes, or the
    cluster is offline; for a role the placer places: no cluster it may use). ``contested_clusters``:
    clusters where every role fits alone but the roles together need more distinct nodes than exist for
    them. ``reasons.explain_pending`` turns this into counts and sentences.
    """

    job_id: str
    short_roles: tuple[str, ...]
    contested_clusters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Demand:
    """Input to the matcher: ``replicas`` distinct nodes wanted out of ``candidates`` (ordered by
    preference)."""

    replicas: int
    candidates: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Matching:
    """Result of :func:`match_workers` for one cluster.

    ``chosen[i]`` are the nodes given to demand ``i``; ``short`` the demands left unsatisfied.
    When computed with ``exhaustive=True`` the matching is maximum, ``matched`` is its size and
    ``tight`` is a set of demands violating Hall's condition: together they want more nodes than
    the union of their candidates, which is exactly why they cannot all be served.
    """

    chosen: tuple[tuple[str, ...], ...]
    short: tuple[int, ...]
    matched: int
    tight: tuple[int, ...]


def match_workers(demands: Sequence[Demand], *, exhaustive: bool = False) -> Matching:
    """Give each demand its ``replicas`` distinct nodes, no node to two demands, if possible.

    Greedy best fit first (fewest candidates first), then augmenting paths for what greedy left
    short. Without ``exhaustive`` it stops at the first demand proven unsatisfiable (by the
    augmenting-path lemma a demand with no augmenting path never gets one later).
    """
    count = len(demands)
    order = sorted(range(count), key=lambda i: (len(demands[i].candidates), i))
    owner: dict[str, int] = {}
    chosen: list[list[str]] = [[] for _ in range(count)]
    for i in order:
        demand, got = demands[i], chosen[i]
        for name in demand.candidates:
            if len(got) == demand.replicas:
                break
            if name not in owner:
                owner[name] = i
                got.append(name)

    short: list[int] = []
    for i in order:
        while len(chosen[i]) < demands[i].replicas:
            if not _augment(i, demands, owner, chosen):
                short.append(i)
                break
        if short and not exhaustive:
            break

    tight: tuple[int, ...] = ()
    if short and exhaustive:
        tight = tuple(sorted(_reachable(short, demands, owner)))
    return Matching(
        chosen=tuple(tuple(got) for got in chosen),
        short=tuple(sorted(short)),
        matched=sum(len(got) for got in chosen),
        tight=tight,
    )


def _augment(start: int, demands: Sequence[Demand], owner: dict[str, int], chosen: list[list[str]]) -> bool:
    """Find a shortest augmenting path from demand ``start`` and apply it; False when none.

    The search runs over demands: from demand ``r`` any candidate not already r's is either free
    (done) or held by another demand, which may then give it up and look further.
    """
    parent: dict[int, tuple[int, str]] = {}
    seen = {start}
    frontier = deque([start])
    while frontier:
        current = frontier.popleft()
        for name in demands[current].candidates:
            holder = owner.get(name)
            if holder is None:
                owner[name] = current
                chosen[current].append(name)
                while current != start:
                    previous, moved = parent[current]
                    chosen[current].remove(moved)
                    chosen[previous].append(moved)
                    owner[moved] = previous
                    current = previous
                return True
            if holder not in seen:
                seen.add(holder)
                parent[holder] = (current, name)
                frontier.append(holder)
    return False


def _reachable(roots: Sequence[int], demands: Sequence[Demand], owner: Mapping[str, int]) -> set[int]:
    """Demands reachable from ``roots`` in the residual graph of a maximum matching."""
    seen = set(roots)
    frontier = deque(roots)
    while frontier:
        current = frontier.popleft()
        for name in demands[current].candidates:
            holder = owner.get(name)
            if holder is not None and holder not in seen:
                seen.add(holder)
                frontier.append(holder)
    return seen


def place(model: CapacityModel, job: JobRequest, *, hypothetical: bool = False) -> Placement | Unplaceable:
    """Place every worker of ``job`` or say why not; ``model`` is never modified.

    With ``hypothetical`` the model's nodes count as they could be (ready, uncordoned, empty; offline
    clusters back): whether the job could *ever* be placed (``reasons.can_ever_fit``)."""
    if job.named:
        return _place_named(model, job, hypothetical)
    return next(layouts(model, job, hypothetical=hypothetical), None) or _unplaceable(
        model, job, hypothetical
    )


def layouts(model: CapacityModel, job: JobRequest, *, hypothetical: bool = False) -> Iterator[Placement]:
    """Every placement of ``job`` the placer would accept, best first (see the module docstring): the one of a
    job whose roles name their clusters; else each fitting cluster, then spanning layouts by the fewest
    clusters. The first is :func:`place`'s; admission looks further when the first breaks a quota
    (``fairness``)."""
    if job.named:
        named = _place_named(model, job, hypothetical)
        if isinstance(named, Placement):
            yield named
        return
    key = ("place", job.shape, hypothetical)
    first = model.remember(key, lambda: next(_choices(model, job, hypothetical, job.span, job.domains), None))
    if first is None:
        return
    yield _placement(model, job, first)
    for choice in _choices(model, job, hypothetical, job.span, job.domains):
        if choice != first:
            yield _placement(model, job, choice)


def span_choice(
    model: CapacityModel, job: JobRequest, *, any_domain: bool = False, hypothetical: bool = False
) -> Layout | None:
    """The layout spanning clusters would give ``job`` now, whatever its ``span`` says; with ``any_domain`` as if
    a domain joined every cluster (what a domain would change). None when no set of clusters holds it. What a
    pending reason says spanning would change (``reasons``)."""
    domains: _Domains = ANY_DOMAIN if any_domain else job.domains
    choices = _spans(model, job, _options(model, job), hypothetical, domains)
    choice = next(choices, None)
    return None if choice is None else _placement(model, job, choice).layout


def reachable_clusters(model: CapacityModel, job: JobRequest) -> tuple[str, ...]:
    """Every cluster some role of ``job`` may go to (:func:`role_clusters`), sorted."""
    return model.remember(
        ("reachable", job.shape),
        lambda: tuple(sorted({c for role in job.roles for c in role_clusters(model, role)})),
    )


def role_clusters(model: CapacityModel, role: RoleRequest) -> tuple[str, ...]:
    """The clusters ``role`` may go to: its own, or, when the placer chooses, those with nodes that its
    ``clusters`` and ``cluster_selector`` allow and that can mount its mounts, sorted."""
    if role.cluster:
        return (role.cluster,)
    key = ("role clusters", role.clusters, selector_key(role.cluster_selector), role.mounts)
    return model.remember(
        key,
        lambda: tuple(
            c
            for c in model.clusters_matching(role.clusters, role.cluster_selector)
            if can_mount(model.facts(c), role.mounts)
        ),
    )


def can_mount(facts: ClusterFacts, mounts: Sequence[tuple[str, str]]) -> bool:
    """Whether a cluster with ``facts`` can mount every ``(type, source)`` (a runtime or policy not known is
    not judged): its runtime mounts the type and its agent is set up for it, its hostPath policy allows the
    source."""
    for mount_type, source in mounts:
        if facts.runtime and not runtime_mounts(facts.runtime, mount_type):
            return False
        if mount_type in facts.unmountable:
            return False
        allow = facts.hostpath_allow
        if mount_type == HOST_PATH and allow is not None and not source_decision(source, allow).allowed:
            return False
    return True


# ------------------------------------------------------------------------------------------ named roles


def _place_named(model: CapacityModel, job: JobRequest, hypothetical: bool) -> Placement | Unplaceable:
    surveys = [
        model.survey(role.cluster, role.selector, role.gpus_per_worker, hypothetical=hypothetical)
        for role in job.roles
    ]
    short_roles = tuple(
        role.name
        for role, survey in zip(job.roles, surveys, strict=True)
        if len(survey.candidates) < role.replicas
    )
    by_cluster: dict[str, list[int]] = {}
    for i, role in enumerate(job.roles):
        by_cluster.setdefault(role.cluster, []).append(i)

    nodes_of: dict[str, tuple[str, ...]] = {}
    contested: list[str] = []
    for cluster in sorted(by_cluster):
        members = by_cluster[cluster]
        if any(job.roles[i].name in short_roles for i in members):
            continue
        demands = [Demand(job.roles[i].replicas, surveys[i].candidates) for i in members]
        matching = match_workers(demands)
        if matching.short:
            contested.append(cluster)
            continue
        for i, got in zip(members, matching.chosen, strict=True):
            nodes_of[job.roles[i].name] = got

    if short_roles or contested:
        return Unplaceable(job.job_id, short_roles, tuple(contested))

    workers: list[WorkerPlacement] = []
    for role in job.rank_order():
        for index, node in enumerate(sorted(nodes_of[role.name])):
            workers.append(
                WorkerPlacement(
                    role=role.name,
                    index=index,
                    rank=len(workers),
                    cluster=role.cluster,
                    node=node,
                    gpus=role.gpus_per_worker,
                    is_header=role.name == job.header_role,
                )
            )
    clusters = tuple(dict.fromkeys(w.cluster for w in workers))
    layout = Layout(
        LayoutKind.NAMED,
        clusters,
        job.domains[0] if job.domains else None,
        tuple((role.name, (role.cluster,)) for role in job.rank_order()),
    )
    return Placement(job.job_id, tuple(workers), layout)


# --------------------------------------------------------------------------------- clusters by need


class _AnyDomain:
    """As if a domain joined every cluster: what a reason says a domain would change."""


ANY_DOMAIN = _AnyDomain()

_Domains = tuple[str, ...] | _AnyDomain | None
"""The domains a search may span through: these, as if one joined every cluster, or any domain (None)."""


@dataclass(frozen=True, slots=True)
class _Choice:
    """A layout in terms of the job's roles by index (request order), so jobs asking alike share it."""

    kind: LayoutKind
    nodes: tuple[tuple[NodeKey, ...], ...]
    domain: str | None = None
    rtt_ms: float | None = None


def job_shape(job: JobRequest) -> Hashable:
    """What a job's layout depends on, its names aside: jobs of one shape share memoised answers."""
    group = header_group(job)
    roles = tuple(
        (
            r.cluster,
            r.clusters,
            selector_key(r.cluster_selector),
            selector_key(r.selector),
            r.replicas,
            r.gpus_per_worker,
            r.mounts,
            r.name == job.header_role,
            r.name in group,
        )
        for r in job.roles
    )
    return (roles, job.span, job.domains)


def _options(model: CapacityModel, job: JobRequest) -> list[tuple[str, ...]]:
    return [role_clusters(model, role) for role in job.roles]


def _choices(
    model: CapacityModel,
    job: JobRequest,
    hypothetical: bool,
    span: SpanClusters,
    domains: _Domains,
) -> Iterator[_Choice]:
    """Every acceptable layout, best first: one cluster, then (when ``span`` allows) spanning ones."""
    options = _options(model, job)
    roles = job.roles
    common = set(options[0]).intersection(*options[1:])
    gpus = sum(role.replicas * role.gpus_per_worker for role in roles)
    ranked: list[tuple[tuple[int, int], str]] = []
    for cluster in common:
        # What the cluster has free at most rules most clusters out before any node is matched.
        room = (0, 0) if hypothetical else model.room(cluster)
        if hypothetical or (room[0] >= gpus and room[1] >= job.worker_count):
            ranked.append((room, cluster))
    everyone = tuple(range(len(roles)))
    for _, cluster in sorted(ranked):
        if any(len(_candidates(model, cluster, role, hypothetical)) < role.replicas for role in roles):
            continue
        chosen = _fit_in(model, cluster, job, everyone, hypothetical)
        if chosen is not None:
            nodes = tuple(tuple((cluster, name) for name in got) for got in chosen)
            yield _Choice(LayoutKind.ONE, nodes)
    if span is SpanClusters.WHEN_NEEDED:
        yield from _spans(model, job, options, hypothetical, domains)


def _candidates(model: CapacityModel, cluster: str, role: RoleRequest, hypothetical: bool) -> tuple[str, ...]:
    return model.survey(cluster, role.selector, role.gpus_per_worker, hypothetical=hypothetical).candidates


def _fit_in(
    model: CapacityModel, cluster: str, job: JobRequest, members: tuple[int, ...], hypothetical: bool
) -> tuple[tuple[str, ...], ...] | None:
    """The nodes of ``cluster`` each of the roles ``members`` gets when they all go there; None when they do
    not fit together. Memoised per cluster version by what the roles ask."""
    asks = tuple(
        (selector_key(job.roles[i].selector), job.roles[i].gpus_per_worker, job.roles[i].replicas)
        for i in members
    )

    def fit() -> tuple[tuple[str, ...], ...] | None:
        demands = [
            Demand(replicas, _candidates(model, cluster, job.roles[i], hypothetical))
            for i, (_, _, replicas) in zip(members, asks, strict=True)
        ]
        matching = match_workers(demands)
        return None if matching.short else matching.chosen

    return model.remember_in(cluster, ("fit", asks, hypothetical), fit)


def _usable_domains(
    model: CapacityModel, allowed: _Domains
) -> list[tuple[str | None, frozenset[str] | None]]:
    """The domains a job may span through, by name, with the clusters each joins (None: every cluster)."""
    if isinstance(allowed, _AnyDomain):
        return [(None, None)]
    known = model.domains()
    names = sorted(known) if allowed is None else [name for name in allowed if name in known]
    return [(name, known[name]) for name in names]


def _spans(
    model: CapacityModel,
    job: JobRequest,
    options: Sequence[tuple[str, ...]],
    hypothetical: bool,
    allowed: _Domains,
) -> Iterator[_Choice]:
    """Spanning layouts: for 2, 3, ... clusters, every set a usable domain joins that holds the job, best
    first within a size (see the module docstring)."""
    domains = _usable_domains(model, allowed)
    if not domains:
        return
    roles = job.roles
    group = header_group(job)
    found: dict[tuple[int, str], tuple[str, ...]] = {}
    for i, role in enumerate(roles):
        for cluster in options[i]:
            free_gpus, free_nodes = model.room(cluster)
            if not hypothetical and (free_nodes == 0 or free_gpus < role.gpus_per_worker):
                continue  # no node of it has room: no survey needed
            found[(i, cluster)] = _candidates(model, cluster, role, hypothetical)
    reach: dict[str, int] = {}
    for (_, cluster), names in found.items():
        reach[cluster] = reach.get(cluster, 0) + len(names)
    useful = sorted(c for c, n in reach.items() if n)
    fixed = {role.cluster for role in roles if role.cluster}
    workers = job.worker_count
    examined = 0
    for size in range(max(2, len(fixed)), len(useful) + 1):
        # Every set of this size a usable domain joins that passes the counts, ordered by what its layout
        # could score at best; the layouts themselves are worked out in that order (see _best_on).
        bounded: list[tuple[tuple[object, ...], tuple[str, ...], str | None]] = []
        seen: set[tuple[str, ...]] = set()
        for domain, joined in domains:
            pool = [c for c in useful if joined is None or c in joined]
            if not fixed <= set(pool) or len(pool) < size:
                continue
            if not _could_hold(roles, options, found, pool, size, workers):
                continue
            rest = [c for c in pool if c not in fixed]
            for extra in combinations(rest, size - len(fixed)):
                clusters = tuple(sorted((*fixed, *extra)))
                if clusters in seen:
                    continue
                seen.add(clusters)
                examined += 1
                if examined > MAX_SUBSETS:
                    break
                if not _counts_hold(roles, options, found, clusters, workers):
                    continue
                rtt = _slowest(model, clusters)
                split = 0 if _whole_possible(roles, options, found, clusters) else 1
                bounded.append(
                    ((split, 0, inf if rtt is None else rtt, clusters, domain or ""), clusters, domain)
                )
        ranked: list[tuple[tuple[object, ...], _Choice]] = []
        for bound, clusters, domain in sorted(bounded, key=lambda item: item[0]):
            if ranked and (len(ranked) >= MAX_RANKED or min(key for key, _ in ranked) <= bound):
                break  # no set further on can do better (or enough were weighed)
            best = _best_on(model, job, clusters, options, found, group, hypothetical)
            if best is None:
                continue
            score, nodes = best
            rtt = _slowest(model, clusters)
            choice = _Choice(LayoutKind.SPAN, nodes, domain, rtt)
            ranked.append(((*score, *bound[2:]), choice))
        for _, choice in sorted(ranked, key=lambda item: item[0]):
            yield choice
        if examined > MAX_SUBSETS:
            return


def _whole_possible(
    roles: Sequence[RoleRequest],
    options: Sequence[tuple[str, ...]],
    found: Mapping[tuple[int, str], tuple[str, ...]],
    clusters: tuple[str, ...],
) -> bool:
    """Whether the counts allow every role whole on one of ``clusters`` (necessary for a layout splitting none)."""
    return all(
        any(len(found.get((i, c), ())) >= role.replicas for c in clusters if c in options[i])
        for i, role in enumerate(roles)
    )


def _could_hold(
    roles: Sequence[RoleRequest],
    options: Sequence[tuple[str, ...]],
    found: Mapping[tuple[int, str], tuple[str, ...]],
    pool: Sequence[str],
    size: int,
    workers: int,
) -> bool:
    """Whether any ``size`` clusters of ``pool`` might hold the job: each role's and the job's best ``size``
    clusters together offer enough candidate nodes (a necessary condition, checked before enumerating)."""
    for i, role in enumerate(roles):
        offered = sorted((len(found.get((i, c), ())) for c in pool if c in options[i]), reverse=True)
        if sum(offered[:size]) < role.replicas:
            return False
    nodes = sorted(
        (len({n for i in range(len(roles)) for n in found.get((i, c), ())}) for c in pool), reverse=True
    )
    return sum(nodes[:size]) >= workers


def _counts_hold(
    roles: Sequence[RoleRequest],
    options: Sequence[tuple[str, ...]],
    found: Mapping[tuple[int, str], tuple[str, ...]],
    clusters: tuple[str, ...],
    workers: int,
) -> bool:
    """Cheap necessary conditions for ``clusters``: every cluster offers a role a node, each role has enough
    candidates among them, and they have as many distinct candidate nodes as the job has workers."""
    distinct = 0
    for cluster in clusters:
        here = {n for i in range(len(roles)) for n in found.get((i, cluster), ())}
        if not here:
            return False
        distinct += len(here)
    if distinct < workers:
        return False
    return all(
        sum(len(found.get((i, c), ())) for c in clusters if c in options[i]) >= role.replicas
        for i, role in enumerate(roles)
    )


def _best_on(
    model: CapacityModel,
    job: JobRequest,
    clusters: tuple[str, ...],
    options: Sequence[tuple[str, ...]],
    found: Mapping[tuple[int, str], tuple[str, ...]],
    group: frozenset[str],
    hypothetical: bool,
) -> tuple[tuple[int, int], tuple[tuple[NodeKey, ...], ...]] | None:
    """The preferred layout of the job on exactly ``clusters``: (its score — roles split, workers of the
    Header's group away from it — and each role's nodes), or None when they cannot hold it."""
    roles = job.roles
    where = [tuple(c for c in clusters if c in options[i]) for i in range(len(roles))]
    if any(not w for w in where):
        return None
    # One exact matching over every node of the set decides whether it can hold the job at all.
    every = _joint(roles, where, found)
    if every is None:
        return None
    header = next(i for i, role in enumerate(roles) if role.name == job.header_role)
    best: tuple[tuple[int, int], tuple[tuple[NodeKey, ...], ...]] | None = None

    def consider(nodes: tuple[tuple[NodeKey, ...], ...]) -> None:
        nonlocal best
        used = {key[0] for got in nodes for key in got}
        if used != set(clusters):
            return  # fewer clusters would do: not this set's layout
        score = _score(roles, nodes, header, group)
        if best is None or score < best[0]:
            best = (score, nodes)

    tried = 0
    for assignment in product(*where):  # each role whole
        tried += 1
        if tried > MAX_ASSIGNMENTS:
            break
        if set(assignment) != set(clusters):
            continue
        nodes = _whole(model, job, assignment, hypothetical)
        if nodes is not None:
            consider(nodes)
    if best is not None:
        return best
    # One role split (outside the Header's group first, then the largest), the others whole.
    order = sorted(
        (i for i in range(len(roles)) if i != header),
        key=lambda i: (roles[i].name in group, -roles[i].replicas, i),
    )
    tried = 0
    for split in order:
        others = [where[i] if i != split else ("",) for i in range(len(roles))]
        for assignment in product(*others):
            tried += 1
            if tried > MAX_ASSIGNMENTS:
                break
            narrowed = [where[i] if i == split else (assignment[i],) for i in range(len(roles))]
            nodes = _joint(roles, narrowed, found)
            if nodes is not None:
                consider(nodes)
        if best is not None:
            return best
    consider(every)
    return best


def _whole(
    model: CapacityModel, job: JobRequest, assignment: Sequence[str], hypothetical: bool
) -> tuple[tuple[NodeKey, ...], ...] | None:
    """Each role's nodes when role i goes wholly to ``assignment[i]``; None when some cluster cannot hold
    the roles sent to it."""
    by_cluster: dict[str, list[int]] = {}
    for i, cluster in enumerate(assignment):
        by_cluster.setdefault(cluster, []).append(i)
    nodes: list[tuple[NodeKey, ...]] = [() for _ in assignment]
    for cluster, members in by_cluster.items():
        chosen = _fit_in(model, cluster, job, tuple(members), hypothetical)
        if chosen is None:
            return None
        for i, got in zip(members, chosen, strict=True):
            nodes[i] = tuple((cluster, name) for name in got)
    return tuple(nodes)


def _joint(
    roles: Sequence[RoleRequest],
    where: Sequence[tuple[str, ...]],
    found: Mapping[tuple[int, str], tuple[str, ...]],
) -> tuple[tuple[NodeKey, ...], ...] | None:
    """One exact matching of every role over the nodes of its clusters in ``where`` (in that order): each
    role's nodes, or None when they cannot all be served."""
    demands = [
        Demand(role.replicas, tuple(f"{c}{_SEP}{n}" for c in where[i] for n in found.get((i, c), ())))
        for i, role in enumerate(roles)
    ]
    matching = match_workers(demands)
    if matching.short:
        return None
    return tuple(tuple(_node_key(name) for name in got) for got in matching.chosen)


def _node_key(joined: str) -> NodeKey:
    cluster, _, node = joined.partition(_SEP)
    return (cluster, node)


def _score(
    roles: Sequence[RoleRequest], nodes: Sequence[tuple[NodeKey, ...]], header: int, group: frozenset[str]
) -> tuple[int, int]:
    """(roles split across clusters, workers of the Header's group outside the Header's cluster)."""
    home = nodes[header][0][0]
    split = sum(1 for got in nodes if len({key[0] for key in got}) > 1)
    apart = sum(
        sum(1 for key in got if key[0] != home)
        for role, got in zip(roles, nodes, strict=True)
        if role.name in group
    )
    return (split, apart)


def _slowest(model: CapacityModel, clusters: Sequence[str]) -> float | None:
    """The slowest round trip measured between two of ``clusters``; None when one pair was never measured."""
    slowest = 0.0
    for a, b in combinations(clusters, 2):
        rtt = model.round_trip(a, b)
        if rtt is None:
            return None
        slowest = max(slowest, rtt)
    return slowest


def _placement(model: CapacityModel, job: JobRequest, choice: _Choice) -> Placement:
    """The job's placement for ``choice``: workers in rank order (each role's by cluster of the layout, then
    node), its layout."""
    group = header_group(job)
    index = {role.name: i for i, role in enumerate(job.roles)}
    header_nodes = choice.nodes[index[job.header_role]]
    home = header_nodes[0][0]
    cluster_order: dict[str, int] = {home: 0}
    for role in job.rank_order():
        for key in sorted(choice.nodes[index[role.name]]):
            cluster_order.setdefault(key[0], len(cluster_order))
    workers: list[WorkerPlacement] = []
    roles_out: list[tuple[str, tuple[str, ...]]] = []
    for role in job.rank_order():
        got = sorted(choice.nodes[index[role.name]], key=lambda key: (cluster_order[key[0]], key[1]))
        roles_out.append((role.name, tuple(dict.fromkeys(key[0] for key in got))))
        for position, (cluster, node) in enumerate(got):
            workers.append(
                WorkerPlacement(
                    role=role.name,
                    index=position,
                    rank=len(workers),
                    cluster=cluster,
                    node=node,
                    gpus=role.gpus_per_worker,
                    is_header=role.name == job.header_role,
                )
            )
    split = tuple(name for name, clusters in roles_out if len(clusters) > 1)
    apart = tuple(
        name
        for name, clusters in roles_out
        if name in group and name != job.header_role and clusters != (home,)
    )
    layout = Layout(
        choice.kind,
        tuple(cluster_order),
        choice.domain,
        tuple(roles_out),
        choice.rtt_ms,
        split,
        apart,
    )
    return Placement(job.job_id, tuple(workers), layout)


def _unplaceable(model: CapacityModel, job: JobRequest, hypothetical: bool) -> Unplaceable:
    """The verdict for a job the placer places nowhere: the roles that fit alone on none of their clusters."""

    def short() -> tuple[int, ...]:
        return tuple(
            i
            for i, (role, options) in enumerate(zip(job.roles, _options(model, job), strict=True))
            if not any(len(_candidates(model, c, role, hypothetical)) >= role.replicas for c in options)
        )

    found = model.remember(("short", job.shape, hypothetical), short)
    return Unplaceable(job.job_id, tuple(job.roles[i].name for i in found), ())
