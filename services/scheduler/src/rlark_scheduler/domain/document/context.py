"""What a job document is validated against (:class:`ValidationContext`, gathered by the caller) and the
outcome (:class:`ValidationReport`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.document.errors import SpecError


@dataclass(frozen=True)
class ValidationContext:
    """Everything outside the document that validation depends on, gathered by the caller.

    ``capacity`` answers every question about nodes: the :class:`CapacityModel` the placement loop
    decides on, built once per check (the job's clusters: nodes, offline flags, the scheduler's
    allocations). ``clusters`` are the known clusters (registered, or seen through their nodes),
    each with its hostPath policy (normalised prefixes; empty allows none). ``runtimes`` says what
    runs each cluster's workers (``ClusterState.runtime``); a cluster missing from it is not judged.
    ``unmountable`` names the mount types a cluster's agent is not set up for (``ClusterState.unmountable``).
    """

    capacity: CapacityModel = field(default_factory=CapacityModel)
    clusters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ssh_key_names: frozenset[str] = frozenset()
    network_domains: frozenset[str] = frozenset()
    runtimes: Mapping[str, str] = field(default_factory=dict)
    unmountable: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    secrets: Mapping[str, tuple[str, str]] | None = None
    """The secrets the job's owner may name: name → (scope, owner) — theirs, then their project's; None: not
    judged (the document alone)."""

    @classmethod
    def build(
        cls,
        capacity: CapacityModel | None = None,
        clusters: Mapping[str, Sequence[str]] | Iterable[str] = (),
        ssh_key_names: Iterable[str] = (),
        network_domains: Iterable[str] = (),
        runtimes: Mapping[str, str] | None = None,
        secrets: Mapping[str, tuple[str, str]] | None = None,
        unmountable: Mapping[str, Sequence[str]] | None = None,
    ) -> ValidationContext:
        """``clusters``: names (allowing no hostPath) or name → hostPath allow-list; ``runtimes``:
        cluster name → its runtime."""
        policies = (
            {name: tuple(allow) for name, allow in clusters.items()}
            if isinstance(clusters, Mapping)
            else dict.fromkeys(clusters, ())
        )
        return cls(
            capacity=capacity if capacity is not None else CapacityModel(),
            clusters=MappingProxyType(policies),
            ssh_key_names=frozenset(ssh_key_names),
            network_domains=frozenset(network_domains),
            runtimes=MappingProxyType(dict(runtimes or {})),
            unmountable=MappingProxyType({name: tuple(types) for name, types in (unmountable or {}).items()}),
            secrets=MappingProxyType(dict(secrets)) if secrets is not None else None,
        )

    def knows(self, cluster: str) -> bool:
        return cluster in self.clusters

    def is_online(self, cluster: str) -> bool:
        """A known cluster whose agent answers (the capacity model's flag)."""
        return cluster in self.clusters and self.capacity.is_online(cluster)


@dataclass(frozen=True)
class ValidationReport:
    """The outcome: the job is acceptable when there are no errors.

    ``secrets`` holds the text of every secret found (as written in the document): the issues here are
    already redacted, and whatever else a response shows from the document (a preview's plan, an issue
    the caller adds) goes through :func:`redact` with it. It is never sent or logged itself."""

    errors: tuple[SpecError, ...]
    warnings: tuple[SpecError, ...]
    secrets: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return not self.errors

    def codes(self) -> set[str]:
        return {issue.code for issue in (*self.errors, *self.warnings)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": [e.to_dict() for e in self.errors],
            "warnings": [w.to_dict() for w in self.warnings],
        }
