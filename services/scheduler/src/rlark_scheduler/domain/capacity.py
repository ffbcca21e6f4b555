"""The scheduler's capacity model: every node of every cluster, and what the scheduler holds on them.

Role: the in-memory picture the placement loop decides on. It is fed incrementally — node
observations (from inventory's node events), cluster online flags (from cluster heartbeats) and
the scheduler's own allocations (its placements, rebuilt from its database at start) — and answers
"which nodes of cluster C match selector S and can take a worker with G GPUs now" quickly.

Contract:
- A node is identified by ``NodeKey = (cluster, name)``. ``upsert_node`` replaces a node's state;
  re-sending an identical state is a no-op (heartbeats do not invalidate anything).
- Free GPUs of a node = allocatable − used by others − held by the scheduler's own allocations,
  never below 0. ``gpu_used_external`` must therefore exclude the scheduler's own workers: the
  adapter that reads inventory's "allocated" figure subtracts them (``gpus_used_by_others``).
- Allocations are recorded facts, not requests: ``allocate`` does not check capacity (at restart
  the database is the truth even if a node shrank meanwhile) and may name nodes not seen yet.
  ``place`` (placement.py) is what guarantees a fresh allocation fits.
- A cluster is online until told otherwise: node events and cluster events travel on different
  topics, and a cluster whose nodes report in is very likely up.
- Every change bumps the *version* of the clusters it touches. Versions come from one monotonic
  clock, so a (cluster, version) pair never repeats; the queue uses them as cheap "has anything
  this job depends on changed?" signatures.

Why indexes: at 20 clusters × 500 nodes, scanning all nodes per role per job would make a round
over 1,000 queued jobs too slow. Nodes are indexed per cluster and per (cluster, label key, value);
a selector's matching nodes are the intersection of its pairs' sets, smallest first. Surveys
(the funnel of counts plus the best-fit candidate list) are memoised per cluster and dropped when
that cluster's version changes, so many queued jobs asking the same thing cost one computation.

Clusters and the network between them (ADR 0026): for roles that name no cluster the placer chooses,
so the model also holds each cluster's facts (:class:`ClusterFacts`: its labels — inventory's, plus its
region and category as ``rlark.io/region`` and ``rlark.io/category`` — its runtime and hostPath policy),
the network domains with the clusters each joins, and the round trip last measured between two clusters'
agents (their tunnel probes). Cluster facts and domains change what a job may be placed on, so they move
the model's *epoch* (and a cluster's facts its version); a new round trip only changes which layout is
preferred, so it drops the memoised choices and nothing else.

Not thread-safe: one placement loop owns one model.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias, TypeVar

from rlark_scheduler.domain.selectors import LabelSelector, SelectorKey, matches, selector_key

NodeKey: TypeAlias = tuple[str, str]
"""(cluster, node name)."""

Allocation: TypeAlias = tuple[NodeKey, int]
"""One worker's hold: (node, GPUs)."""

T = TypeVar("T")

REGION_LABEL = "rlark.io/region"
CATEGORY_LABEL = "rlark.io/category"


def cluster_labels(labels: Mapping[str, str], *, region: str = "", category: str = "") -> dict[str, str]:
    """A cluster's labels as cluster selectors see them: its own, plus its region and category (inventory's
    fields) as ``rlark.io/region`` and ``rlark.io/category`` unless its labels set those keys themselves —
    so every cluster has labels to be chosen by, even one registered without any."""
    derived = {REGION_LABEL: region, CATEGORY_LABEL: category}
    return {**{k: v for k, v in derived.items() if v}, **labels}


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the placer needs to know of a cluster beyond its nodes: its labels (:func:`cluster_labels`), its
    runtime ("" unknown: not judged), its hostPath policy (normalised prefixes; None: not judged) and the
    mount types its agent is not set up for."""

    labels: Mapping[str, str] = field(default_factory=dict)
    runtime: str = ""
    hostpath_allow: tuple[str, ...] | None = None
    unmountable: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))


NO_FACTS = ClusterFacts()


def gpus_used_by_others(allocated: int, foreign: int, present: int) -> int:
    """GPUs of a node that the scheduler's own allocations do not account for (its ``gpu_used_external``).

    ``allocated`` is what the cluster reports held on the node by everything, RLark's workers
    included; ``present`` the GPUs of this scheduler's workers on the node that the agent reported
    existing (and not ended) no later than that observation; ``foreign`` what the agent reports
    held by anything but RLark workers placed on the node. Each of ``allocated − present`` and
    ``foreign`` is at most the truth, for different reasons, so the larger one is taken:

    - ``allocated − present`` also counts RLark pods of jobs that ended but still terminate (the
      node must not be handed out before they are gone), but under-counts when a worker reported
      present is not yet in the cluster's figure;
    - ``foreign`` never counts an RLark worker of this node and so is exact about others, but knows
      nothing of terminating RLark pods (they are no longer the scheduler's, yet are RLark's).

    Never below 0. Agents that do not report ``foreign`` (0) leave ``allocated − present``.
    """
    return max(foreign, allocated - present, 0)


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the scheduler knows about one node, as last observed.

    ``gpu_used_external`` counts GPUs used by anything the scheduler did not place. ``gone`` marks
    a node deleted from its cluster but still remembered (for example while workers on it are
    being cleaned up); a gone node is never a candidate and is not counted. ``gpu_model`` is the
    model inventory reports ("" when unknown), what per-model quotas count (``fairness``).
    """

    cluster: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    schedulable: bool = True
    gpu_allocatable: int = 0
    gpu_used_external: int = 0
    gone: bool = False
    gpu_model: str = ""

    def __post_init__(self) -> None:
        if not self.cluster or not self.name:
            raise ValueError("a node needs a cluster and a name")
        if self.gpu_allocatable < 0 or self.gpu_used_external < 0:
            raise ValueError(f"node {self.cluster}/{self.name}: GPU counts must be >= 0")
        # Freeze the labels so the indexes can never drift from a node's state.
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    @property
    def key(self) -> NodeKey:
        return (self.cluster, self.name)


@dataclass(frozen=True, slots=True)
class Survey:
    """What one cluster offers one role: a funnel of counts and the usable candidates.

    The counts are cumulative, each a subset of the previous one: nodes in the cluster (not gone),
    matching the selector, of those ready, of those schedulable, of those with at least ``gpus``
    free GPUs. In a *hypothetical* survey (``can_ever_fit``) readiness, cordons and current usage
    are ignored: ``ready`` and ``schedulable`` equal ``matching`` and ``enough`` counts nodes whose
    allocatable GPUs suffice.

    ``candidates`` are the node names that can take a worker now (empty when the cluster is
    offline, unless hypothetical), best fit first: fewest free GPUs that suffice, then by name.

    Over the ``schedulable`` nodes (0 when hypothetical): ``gpus_allocatable`` their allocatable
    GPUs, ``gpus_used_external`` those used by anything the scheduler did not place,
    ``gpus_held`` those the scheduler's own allocations hold — what a reason cites as "in use".
    ``largest_gpus`` is the most allocatable GPUs of one matching node, ready or not (what
    validation cites when no node could ever take a worker that big).
    """

    cluster: str
    gpus: int
    known: bool
    online: bool
    hypothetical: bool
    in_cluster: int
    matching: int
    ready: int
    schedulable: int
    enough: int
    candidates: tuple[str, ...]
    gpus_allocatable: int = 0
    gpus_used_external: int = 0
    gpus_held: int = 0
    largest_gpus: int = 0


class CapacityModel:
    """All nodes of all clusters, the scheduler's own allocations and the clusters' online flags."""

    def __init__(self) -> None:
        self._nodes: dict[NodeKey, NodeState] = {}
        # Indexes hold names of nodes that are not gone.
        self._by_cluster: dict[str, set[str]] = {}
        self._by_label: dict[tuple[str, str, str], set[str]] = {}
        self._offline: set[str] = set()
        self._allocations: dict[str, tuple[Allocation, ...]] = {}
        self._held: dict[NodeKey, int] = {}
        self._clock = 0
        self._versions: dict[str, int] = {}
        self._surveys: dict[str, dict[tuple[SelectorKey, int, bool], Survey]] = {}
        self._facts: dict[str, ClusterFacts] = {}
        self._domains: dict[str, frozenset[str] | None] = {}
        self._rtt: dict[frozenset[str], float] = {}
        self._epoch = 0
        self._per_cluster: dict[str, dict[Hashable, object]] = {}
        self._memo: dict[Hashable, object] = {}
        self._room: dict[str, list[int]] = {}
        """Per cluster, [free GPUs, nodes] over its ready, schedulable nodes: kept in step with every change."""

    @classmethod
    def from_nodes(cls, nodes: Iterable[NodeState], *, offline: Iterable[str] = ()) -> CapacityModel:
        """A model holding ``nodes``, with the clusters in ``offline`` marked offline."""
        model = cls()
        for node in nodes:
            model.upsert_node(node)
        for cluster in offline:
            model.set_cluster_online(cluster, False)
        return model

    # -- changes -------------------------------------------------------------------------------

    def upsert_node(self, node: NodeState) -> None:
        """Insert or replace a node's state. An identical state changes nothing."""
        key = node.key
        old = self._nodes.get(key)
        if old == node:
            return
        self._count_room(key, -1)
        if old is not None:
            self._unindex(old)
        self._nodes[key] = node
        self._index(node)
        self._count_room(key, 1)
        self._bump(node.cluster)

    def remove_node(self, cluster: str, name: str) -> bool:
        """Forget a node; allocations on it stay until released. False when it was unknown."""
        self._count_room((cluster, name), -1)
        old = self._nodes.pop((cluster, name), None)
        if old is None:
            return False
        self._unindex(old)
        self._bump(cluster)
        return True

    def set_cluster_online(self, cluster: str, online: bool) -> None:
        """Mark a cluster online or offline; offline clusters offer no candidates."""
        if online == (cluster not in self._offline):
            return
        if online:
            self._offline.discard(cluster)
        else:
            self._offline.add(cluster)
        self._epoch += 1  # an offline cluster is listed even without nodes
        self._bump(cluster)

    def allocate(self, job_id: str, placements: Iterable[Allocation]) -> None:
        """Record that ``job_id`` holds these GPUs. A job holds at most one allocation.

        Capacity is not checked (see the module docstring); negative GPU counts are refused.
        """
        if job_id in self._allocations:
            raise ValueError(f"job {job_id} already holds an allocation")
        held = tuple(placements)
        for key, gpus in held:
            if gpus < 0:
                raise ValueError(f"job {job_id}: negative GPU count on {key[0]}/{key[1]}")
        self._allocations[job_id] = held
        for key, gpus in held:
            if gpus:  # _held keeps positive totals only: a CPU-only worker holds nothing to free
                self._count_room(key, -1)
                self._held[key] = self._held.get(key, 0) + gpus
                self._count_room(key, 1)
        for cluster in {key[0] for key, _ in held}:
            self._bump(cluster)

    def release(self, job_id: str) -> tuple[Allocation, ...]:
        """Free what ``job_id`` holds and return it; releasing an unknown job returns nothing."""
        held = self._allocations.pop(job_id, ())
        for key, gpus in held:
            if not gpus:
                continue
            self._count_room(key, -1)
            left = self._held[key] - gpus
            if left:
                self._held[key] = left
            else:
                del self._held[key]
            self._count_room(key, 1)
        for cluster in {key[0] for key, _ in held}:
            self._bump(cluster)
        return held

    def set_cluster_facts(self, cluster: str, facts: ClusterFacts) -> None:
        """A cluster's labels, runtime and hostPath policy (what roles that name no cluster are matched by)."""
        if self._facts.get(cluster, NO_FACTS) == facts:
            return
        self._facts[cluster] = facts
        self._epoch += 1
        self._bump(cluster)

    def set_domains(self, domains: Mapping[str, Iterable[str] | None]) -> None:
        """The network domains and the clusters each joins (None or empty: every cluster), all at once."""
        joined = {
            name: (frozenset(clusters) or None) if clusters is not None else None
            for name, clusters in domains.items()
        }
        if joined == self._domains:
            return
        self._domains = joined
        self._epoch += 1
        self._memo.clear()

    def set_round_trip(self, a: str, b: str, rtt_ms: float | None) -> None:
        """The round trip last measured between clusters ``a`` and ``b`` (None: forget it). It changes which
        layout is preferred, not what fits."""
        pair = frozenset((a, b))
        if len(pair) != 2 or self._rtt.get(pair) == rtt_ms:
            return
        if rtt_ms is None:
            del self._rtt[pair]
        else:
            self._rtt[pair] = rtt_ms
        self._memo.clear()

    def copy(self) -> CapacityModel:
        """An independent model with the same nodes, allocations, online flags, cluster facts, domains and round
        trips (for trials that must not touch this one, e.g. ``forecast.estimate_start``). Node states are
        immutable and shared."""
        twin = CapacityModel.from_nodes(self._nodes.values(), offline=self._offline)
        for job_id, held in self._allocations.items():
            twin.allocate(job_id, held)
        for cluster, facts in self._facts.items():
            twin.set_cluster_facts(cluster, facts)
        twin._domains = dict(self._domains)
        twin._rtt = dict(self._rtt)
        return twin

    def clear_cache(self) -> None:
        """Drop memoised surveys and choices (benchmarks use it to measure cold work; never needed for truth)."""
        self._surveys.clear()
        self._per_cluster.clear()
        self._memo.clear()

    # -- reads ---------------------------------------------------------------------------------

    def node(self, cluster: str, name: str) -> NodeState | None:
        return self._nodes.get((cluster, name))

    def nodes(self, cluster: str | None = None) -> Iterator[NodeState]:
        """Known nodes (gone ones included), of one cluster or of all, in no particular order."""
        if cluster is None:
            yield from self._nodes.values()
            return
        for key, node in self._nodes.items():
            if key[0] == cluster:
                yield node

    def clusters(self) -> list[str]:
        """Clusters with at least one node that is not gone, plus clusters marked offline."""
        return sorted({c for c, names in self._by_cluster.items() if names} | self._offline)

    def is_online(self, cluster: str) -> bool:
        return cluster not in self._offline

    def is_known(self, cluster: str) -> bool:
        return bool(self._by_cluster.get(cluster))

    def free_gpus(self, key: NodeKey) -> int:
        """GPUs a new worker could use on this node now; 0 for unknown or gone nodes."""
        node = self._nodes.get(key)
        if node is None or node.gone:
            return 0
        free = node.gpu_allocatable - node.gpu_used_external - self._held.get(key, 0)
        return max(free, 0)

    def held(self, job_id: str) -> tuple[Allocation, ...]:
        """What ``job_id`` holds (empty when nothing)."""
        return self._allocations.get(job_id, ())

    def allocated_jobs(self) -> list[str]:
        return sorted(self._allocations)

    def version(self, cluster: str) -> int:
        """Changes whenever anything about ``cluster`` changes; 0 for a cluster never seen."""
        return self._versions.get(cluster, 0)

    @property
    def epoch(self) -> int:
        """Changes whenever the set of clusters, a cluster's facts or the domains change: what decides which
        clusters a role that names none may go to, and which of them a job may span."""
        return self._epoch

    def facts(self, cluster: str) -> ClusterFacts:
        return self._facts.get(cluster, NO_FACTS)

    def domains(self) -> Mapping[str, frozenset[str] | None]:
        """Network domain name → the clusters it joins (None: every cluster)."""
        return MappingProxyType(self._domains)

    def round_trip(self, a: str, b: str) -> float | None:
        """The round trip last measured between the agents of ``a`` and ``b``, in ms; None when never."""
        return self._rtt.get(frozenset((a, b)))

    def clusters_matching(self, names: Sequence[str], selector: LabelSelector) -> tuple[str, ...]:
        """Clusters with nodes (offline ones included) among ``names`` (all when empty) whose labels match
        ``selector``, sorted."""
        key = ("clusters", tuple(sorted(names)), selector_key(selector))
        return self.remember(key, lambda: self._clusters_matching(names, selector))

    def _clusters_matching(self, names: Sequence[str], selector: LabelSelector) -> tuple[str, ...]:
        wanted = set(names)
        return tuple(
            cluster
            for cluster in self.clusters()
            if (not wanted or cluster in wanted) and matches(selector, self.facts(cluster).labels)
        )

    def room(self, cluster: str) -> tuple[int, int]:
        """(free GPUs, nodes) over the cluster's ready, schedulable nodes ((0, 0) offline): what a job could
        get there at most, and a layout's best-fit measure. Kept up to date with every change: no scan."""
        if cluster in self._offline:
            return (0, 0)
        room = self._room.get(cluster)
        return (room[0], room[1]) if room else (0, 0)

    def _count_room(self, key: NodeKey, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) a node's share of its cluster's :meth:`room`, as it is now."""
        node = self._nodes.get(key)
        if node is None or node.gone or not node.ready or not node.schedulable:
            return
        room = self._room.setdefault(node.cluster, [0, 0])
        room[0] += sign * self.free_gpus(key)
        room[1] += sign

    def remember(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, memoised until anything in the model changes (any cluster's version, the epoch, a
        round trip): for answers that depend on the whole model, such as a job's layout."""
        if key in self._memo:
            return self._memo[key]  # type: ignore[return-value]  # stored by the same key's compute
        value = compute()
        self._memo[key] = value
        return value

    def remember_in(self, cluster: str, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, memoised until ``cluster``'s version changes: for answers about that cluster alone."""
        per_cluster = self._per_cluster.setdefault(cluster, {})
        if key in per_cluster:
            return per_cluster[key]  # type: ignore[return-value]  # stored by the same key's compute
        value = compute()
        per_cluster[key] = value
        return value

    def matching_names(self, cluster: str, selector: LabelSelector) -> set[str]:
        """Names of the cluster's nodes (not gone) that match ``selector``: a fresh set."""
        everyone = self._by_cluster.get(cluster)
        if not everyone:
            return set()
        if not selector:
            return set(everyone)
        sets: list[set[str]] = []
        for key, value in selector.items():
            names = self._by_label.get((cluster, key, value))
            if not names:
                return set()
            sets.append(names)
        sets.sort(key=len)
        result = set(sets[0])
        for other in sets[1:]:
            result &= other
            if not result:
                break
        return result

    def survey(
        self, cluster: str, selector: LabelSelector, gpus: int, *, hypothetical: bool = False
    ) -> Survey:
        """The funnel and candidates of ``cluster`` for workers matching ``selector`` with ``gpus``.

        Memoised until the cluster's version changes.
        """
        memo_key = (selector_key(selector), gpus, hypothetical)
        per_cluster = self._surveys.setdefault(cluster, {})
        cached = per_cluster.get(memo_key)
        if cached is not None:
            return cached
        result = self._compute_survey(cluster, selector, gpus, hypothetical)
        per_cluster[memo_key] = result
        return result

    # -- internals -----------------------------------------------------------------------------

    def _compute_survey(self, cluster: str, selector: LabelSelector, gpus: int, hypothetical: bool) -> Survey:
        online = cluster not in self._offline
        names = self.matching_names(cluster, selector)
        ready = schedulable = 0
        allocatable = external = held_here = largest = 0
        usable: list[tuple[int, str]] = []
        nodes = self._nodes
        held = self._held
        for name in names:
            node = nodes[(cluster, name)]
            largest = max(largest, node.gpu_allocatable)
            if hypothetical:
                if node.gpu_allocatable >= gpus:
                    usable.append((node.gpu_allocatable, name))
                continue
            if not node.ready:
                continue
            ready += 1
            if not node.schedulable:
                continue
            schedulable += 1
            mine = held.get((cluster, name), 0)
            allocatable += node.gpu_allocatable
            external += node.gpu_used_external
            held_here += mine
            free = max(node.gpu_allocatable - node.gpu_used_external - mine, 0)
            if free >= gpus:
                usable.append((free, name))
        if hypothetical:
            ready = schedulable = len(names)
        usable.sort()
        candidates = tuple(name for _, name in usable) if (online or hypothetical) else ()
        return Survey(
            cluster=cluster,
            gpus=gpus,
            known=self.is_known(cluster),
            online=online,
            hypothetical=hypothetical,
            in_cluster=len(self._by_cluster.get(cluster, ())),
            matching=len(names),
            ready=ready,
            schedulable=schedulable,
            enough=len(usable),
            candidates=candidates,
            gpus_allocatable=allocatable,
            gpus_used_external=external,
            gpus_held=held_here,
            largest_gpus=largest,
        )

    def _bump(self, cluster: str) -> None:
        self._clock += 1
        self._versions[cluster] = self._clock
        self._surveys.pop(cluster, None)
        self._per_cluster.pop(cluster, None)
        self._memo.clear()

    def _index(self, node: NodeState) -> None:
        if node.gone:
            return
        names = self._by_cluster.setdefault(node.cluster, set())
        if not names:
            self._epoch += 1  # a cluster appears
        names.add(node.name)
        for key, value in node.labels.items():
            self._by_label.setdefault((node.cluster, key, value), set()).add(node.name)

    def _unindex(self, node: NodeState) -> None:
        if node.gone:
            return
        names = self._by_cluster.get(node.cluster)
        if names is not None:
            names.discard(node.name)
            if not names:
                self._epoch += 1  # a cluster leaves
        for key, value in node.labels.items():
            label_key = (node.cluster, key, value)
            indexed = self._by_label.get(label_key)
            if indexed is not None:
                indexed.discard(node.name)
                if not indexed:
                    del self._by_label[label_key]
