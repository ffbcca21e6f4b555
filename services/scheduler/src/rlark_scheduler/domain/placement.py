"""Gang placement: put every worker of a job on a node at once, or none.

Role: decide, for one job and the current capacity model, which node each worker goes to. The
model is only read; committing the answer (``model.allocate``) is the caller's move, so a failed
attempt leaves no trace and two jobs can never both hold half a gang.

Rules (ARCHITECTURE §5): a role's workers go only to its own cluster (which must be online), onto
nodes that are not gone, ready, schedulable, match the role's selector and have at least the
role's GPUs free; one worker of a job per node, across all of the job's roles.

Because each node takes at most one worker of the job, "does the job fit" is a bipartite matching
between worker slots and nodes, solved per cluster (roles in different clusters never compete).
First a fast greedy: roles with the fewest candidates first, each taking its best-fit nodes (fewest
free GPUs that suffice, then by name) to keep big nodes for big asks. When greedy leaves a role
short, augmenting paths (Ford–Fulkerson over roles, starting from greedy's partial answer) finish
the job exactly; so "cannot place" is always true, never a greedy artefact. Every tie is broken by
a stable order, so equal inputs give equal placements.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from rlark_scheduler.domain.capacity import Allocation, CapacityModel, NodeKey
from rlark_scheduler.domain.selectors import LabelSelector


@dataclass(frozen=True, slots=True)
class RoleRequest:
    """One role of a job as the placer sees it: where, which nodes, how many, how big."""

    name: str
    cluster: str
    selector: LabelSelector
    replicas: int
    gpus_per_worker: int

    def __post_init__(self) -> None:
        if not self.name or not self.cluster:
            raise ValueError("a role needs a name and a cluster")
        if self.replicas < 1:
            raise ValueError(f'role "{self.name}": replicas must be >= 1')
        if self.gpus_per_worker < 0:
            raise ValueError(f'role "{self.name}": gpus_per_worker must be >= 0')
        object.__setattr__(self, "selector", MappingProxyType(dict(self.selector)))


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A job waiting for placement. Queue order is (-priority, submitted_seq)."""

    job_id: str
    priority: int
    submitted_seq: int
    roles: tuple[RoleRequest, ...]
    header_role: str
    project: str
    """The project the job is charged to (its quota, ADR 0020); "" for none."""

    def __init__(
        self,
        job_id: str,
        priority: int,
        submitted_seq: int,
        roles: Sequence[RoleRequest],
        header_role: str,
        project: str = "",
    ) -> None:
        object.__setattr__(self, "job_id", job_id)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "submitted_seq", submitted_seq)
        object.__setattr__(self, "roles", tuple(roles))
        object.__setattr__(self, "header_role", header_role)
        object.__setattr__(self, "project", project)
        names = [role.name for role in self.roles]
        if not names:
            raise ValueError(f"job {job_id}: at least one role is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"job {job_id}: role names must be unique")
        if header_role not in names:
            raise ValueError(f'job {job_id}: header role "{header_role}" is not one of its roles')

    @property
    def queue_key(self) -> tuple[int, int, str]:
        """Where rounds try it: higher priority first, then first submitted (the job id breaks ties)."""
        return (-self.priority, self.submitted_seq, self.job_id)

    @property
    def clusters(self) -> tuple[str, ...]:
        """The clusters the job's roles ask for, sorted, without repeats."""
        return tuple(sorted({role.cluster for role in self.roles}))

    @property
    def worker_count(self) -> int:
        return sum(role.replicas for role in self.roles)

    def rank_order(self) -> tuple[RoleRequest, ...]:
        """Roles in rank order: the header role first, then the others in request order."""
        header = [role for role in self.roles if role.name == self.header_role]
        return (*header, *(role for role in self.roles if role.name != self.header_role))


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


@dataclass(frozen=True, slots=True)
class Placement:
    """A whole gang: every worker of the job, in rank order."""

    job_id: str
    workers: tuple[WorkerPlacement, ...]

    def allocations(self) -> tuple[Allocation, ...]:
        """What to pass to ``CapacityModel.allocate`` to commit this placement."""
        return tuple((worker.node_key, worker.gpus) for worker in self.workers)


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """The verdict that the job cannot be placed now, with the two kinds of proof.

    ``short_roles``: roles that cannot be placed even alone (too few candidate nodes, or the
    cluster is offline). ``contested_clusters``: clusters where every role fits alone but the
    roles together need more distinct nodes than exist for them. ``reasons.explain_pending``
    turns this into counts and sentences.
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


def place(model: CapacityModel, job: JobRequest) -> Placement | Unplaceable:
    """Place every worker of ``job`` or say why not; ``model`` is never modified."""
    surveys = [model.survey(role.cluster, role.selector, role.gpus_per_worker) for role in job.roles]
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
    return Placement(job.job_id, tuple(workers))
