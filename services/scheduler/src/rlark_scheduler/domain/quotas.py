"""Projects' GPU quotas as values, GPU usage in pools, and the bound check (issue 20 item 1).

Role: say what a project may hold and whether holding more would break it. Quotas are stored and
served (``repository.projects``, ``api.projects``), but the placement loop does not ask this module
yet (ADR 0020); ``fairness`` is its one admission caller.

The model:

- GPUs are counted in *pools*, ``(cluster, GPU model)``: every GPU a worker holds lies in the pool
  of its node's cluster and model (``NodeState.gpu_model``; "" when unknown).
- A :class:`ProjectQuota` bounds a project in *scopes*: ``gpus`` overall (every pool), optionally
  ``clusters[c]`` (the pools of cluster c) and ``models[m]`` (the pools of model m, across all
  clusters). A cluster or model not listed is bounded only by the overall quota.
- ``borrowing_limit`` is how many GPUs beyond its quota a project may use when they are idle; it
  widens every scope by the same amount. The *ceiling* of a scope is quota + borrowing limit, and
  nothing is ever admitted beyond a ceiling.

Validation collects every problem and raises one :class:`QuotaError`, each problem naming its
field (``clusters["gpu-a"]``, ``borrowing_limit``) in the path style of job documents
(``document.fields.child_path``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NewType, TypeAlias

from rlark_scheduler.domain.capacity import Allocation, CapacityModel
from rlark_scheduler.domain.document.fields import child_path

ProjectId = NewType("ProjectId", str)

Pool: TypeAlias = tuple[str, str]
"""(cluster, GPU model): where a held GPU is counted."""

MAX_GPUS = 1_000_000
"""Upper bound of any quota figure: far above any fleet, low enough to catch a pasted byte count."""

_PROJECT_ID = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class ScopeKind(StrEnum):
    OVERALL = "overall"
    CLUSTER = "cluster"
    MODEL = "model"


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """A set of pools a quota bounds: all of them, one cluster's or one GPU model's."""

    kind: ScopeKind
    name: str = ""

    def covers(self, pool: Pool) -> bool:
        if self.kind is ScopeKind.OVERALL:
            return True
        return pool[0 if self.kind is ScopeKind.CLUSTER else 1] == self.name

    def __str__(self) -> str:
        return "overall" if self.kind is ScopeKind.OVERALL else f"{self.kind.value} {self.name}"


OVERALL = Scope(ScopeKind.OVERALL)


@dataclass(frozen=True, slots=True)
class QuotaProblem:
    field: str
    message: str


class QuotaError(ValueError):
    """A quota that cannot be accepted; ``problems`` names every offending field."""

    def __init__(self, project: str, problems: Iterable[QuotaProblem]) -> None:
        self.project = project
        self.problems: tuple[QuotaProblem, ...] = tuple(problems)
        listed = "; ".join(f"{p.field}: {p.message}" for p in self.problems)
        super().__init__(f'quota of project "{project}": {listed}')


@dataclass(frozen=True, slots=True)
class ProjectQuota:
    """What a project may hold: GPU quotas overall, per cluster and per GPU model, and how many GPUs
    beyond them it may borrow while they are idle (see the module docstring)."""

    project: ProjectId
    gpus: int
    clusters: Mapping[str, int] = field(default_factory=dict)
    models: Mapping[str, int] = field(default_factory=dict)
    borrowing_limit: int = 0

    def __post_init__(self) -> None:
        problems: list[QuotaProblem] = []
        if not isinstance(self.project, str) or not _PROJECT_ID.fullmatch(self.project):
            problems.append(
                QuotaProblem(
                    "project",
                    "must be 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit",
                )
            )
        _check_count(problems, "gpus", self.gpus)
        _check_count(problems, "borrowing_limit", self.borrowing_limit)
        overall = self.gpus if _is_count(self.gpus) else None
        for name, bounds in (("clusters", self.clusters), ("models", self.models)):
            for key, value in bounds.items():
                path = child_path(name, key)
                if not isinstance(key, str) or not key:
                    problems.append(QuotaProblem(path, "the name must be a non-empty string"))
                    continue
                if _check_count(problems, path, value) and overall is not None and value > overall:
                    problems.append(QuotaProblem(path, f"{value} is more than the overall quota ({overall})"))
        if problems:
            raise QuotaError(str(self.project), problems)
        object.__setattr__(self, "clusters", MappingProxyType(dict(self.clusters)))
        object.__setattr__(self, "models", MappingProxyType(dict(self.models)))

    def scopes(self) -> Iterator[tuple[Scope, int]]:
        """Every bounded scope with its quota: overall first, then clusters, then models, by name."""
        yield OVERALL, self.gpus
        for cluster in sorted(self.clusters):
            yield Scope(ScopeKind.CLUSTER, cluster), self.clusters[cluster]
        for model in sorted(self.models):
            yield Scope(ScopeKind.MODEL, model), self.models[model]


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_GPUS


def _check_count(problems: list[QuotaProblem], path: str, value: object) -> bool:
    if _is_count(value):
        return True
    problems.append(
        QuotaProblem(path, f"must be a whole number of GPUs from 0 to {MAX_GPUS} (got {value!r})")
    )
    return False


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """GPUs held, per pool (pools holding 0 are left out, so equal usages compare equal)."""

    pools: Mapping[Pool, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(gpus < 0 for gpus in self.pools.values()):
            raise ValueError("GPU usage must be >= 0 in every pool")
        kept = {pool: gpus for pool, gpus in sorted(self.pools.items()) if gpus}
        object.__setattr__(self, "pools", MappingProxyType(kept))

    @classmethod
    def of_allocations(cls, model: CapacityModel, allocations: Iterable[Allocation]) -> GpuUsage:
        """What these holds count as: each node's GPUs in its cluster's pool of its model (a node the
        model does not know counts as model "")."""
        pools: dict[Pool, int] = {}
        for (cluster, name), gpus in allocations:
            node = model.node(cluster, name)
            pool = (cluster, node.gpu_model if node is not None else "")
            pools[pool] = pools.get(pool, 0) + gpus
        return cls(pools)

    def __add__(self, other: GpuUsage) -> GpuUsage:
        pools = dict(self.pools)
        for pool, gpus in other.pools.items():
            pools[pool] = pools.get(pool, 0) + gpus
        return GpuUsage(pools)

    def within(self, scope: Scope) -> int:
        """GPUs held in the pools of ``scope``."""
        return sum(gpus for pool, gpus in self.pools.items() if scope.covers(pool))

    @property
    def total(self) -> int:
        return sum(self.pools.values())


NO_USAGE = GpuUsage()


@dataclass(frozen=True, slots=True)
class Breach:
    """Why adding a job's GPUs would break a bound: in ``scope`` the project holds ``used``, the job
    asks ``requested`` more and the bound (quota, or quota + borrowing limit) is ``limit``."""

    scope: Scope
    used: int
    requested: int
    limit: int


def first_breach(
    quota: ProjectQuota, used: GpuUsage, requested: GpuUsage, *, borrowing: bool
) -> Breach | None:
    """The first scope (in ``quota.scopes()`` order) where ``used + requested`` would exceed the quota
    (``borrowing=False``) or the ceiling, quota + borrowing limit (``borrowing=True``); None when none.

    A scope the job asks nothing of is never breached by it: a project already over a bound (a quota
    lowered under running work) can still run jobs elsewhere.
    """
    extra = quota.borrowing_limit if borrowing else 0
    for scope, bound in quota.scopes():
        asked = requested.within(scope)
        if not asked:
            continue
        held = used.within(scope)
        if held + asked > bound + extra:
            return Breach(scope, held, asked, bound + extra)
    return None
