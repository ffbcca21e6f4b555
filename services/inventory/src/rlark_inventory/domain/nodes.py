"""Node state as the inventory keeps it, derived from agent observations, and what counts as a change.

Agents re-send every node on every observation round. Only a change of what a node *is* (readiness,
schedulability, resources, labels, addresses, gone) is news for the compacted ``inventory.nodes`` topic;
``observed_at`` alone is not, so rounds with nothing new publish nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from rlark_contracts.events.agent import NodeObservation
from rlark_contracts.events.inventory import NodeState

NodeStatus = Literal["ready", "not_ready", "cordoned", "gone"]
STATUSES: tuple[str, ...] = ("ready", "not_ready", "cordoned", "gone")

COMPARED_FIELDS: tuple[str, ...] = tuple(f for f in NodeState.model_fields if f != "observed_at")


def state_from_observation(cluster: str, obs: NodeObservation, observed_at: datetime) -> NodeState:
    """The node's state after this observation (clamping negative counts an agent may send to zero)."""
    return NodeState(
        cluster=cluster,
        name=obs.name,
        ready=obs.ready,
        schedulable=obs.schedulable,
        gone=False,
        gpu_count=max(obs.gpu_count, 0),
        gpu_model=obs.gpu_model,
        gpu_allocatable=max(obs.gpu_allocatable, 0),
        gpu_allocated=max(obs.gpu_allocated, 0),
        cpu_millis=max(obs.cpu_millis, 0),
        cpu_allocatable_millis=max(obs.cpu_allocatable_millis, 0),
        cpu_allocated_millis=max(obs.cpu_allocated_millis, 0),
        memory_bytes=max(obs.memory_bytes, 0),
        memory_allocatable_bytes=max(obs.memory_allocatable_bytes, 0),
        memory_allocated_bytes=max(obs.memory_allocated_bytes, 0),
        labels=dict(obs.labels),
        addresses=list(obs.addresses),
        observed_at=observed_at,
    )


def changed(old: NodeState | None, new: NodeState) -> bool:
    """True when ``new`` differs from ``old`` in anything but ``observed_at`` (or ``old`` is unknown)."""
    if old is None:
        return True
    return any(getattr(old, f) != getattr(new, f) for f in COMPARED_FIELDS)


def status_of(ready: bool, schedulable: bool, gone: bool) -> NodeStatus:
    """One word for a node: gone, else not_ready, else cordoned (ready but unschedulable), else ready."""
    if gone:
        return "gone"
    if not ready:
        return "not_ready"
    if not schedulable:
        return "cordoned"
    return "ready"


def free_gpus(gpu_allocatable: int, gpu_allocated: int) -> int:
    return max(gpu_allocatable - gpu_allocated, 0)


def search_text(name: str, addresses: list[str], labels: dict[str, str]) -> str:
    """What the free-text ``q`` filter searches: name, addresses and ``key=value`` labels, lower-cased."""
    parts = [name, *addresses, *(f"{k}={v}" for k, v in labels.items())]
    return " ".join(parts).lower()


@dataclass(frozen=True)
class MatchedNode:
    """A node of a cluster whose labels contain a selector: what placement questions need."""

    name: str
    ready: bool
    schedulable: bool
    gpu_model: str
    gpu_free: int

    def fits(self, gpus: int) -> bool:
        return self.ready and self.schedulable and self.gpu_free >= gpus


@dataclass(frozen=True)
class MatchSummary:
    """The funnel of "which nodes of cluster C match selector S with ≥ G free GPUs"."""

    total: int
    matching: int
    ready: int
    schedulable: int
    with_free_gpus: int


def match_summary(total: int, matched: list[MatchedNode], gpus: int) -> MatchSummary:
    """Each step narrows the previous one: matching ⊇ ready ⊇ ready∧schedulable ⊇ that with the GPUs."""
    ready = [n for n in matched if n.ready]
    schedulable = [n for n in ready if n.schedulable]
    return MatchSummary(
        total=total,
        matching=len(matched),
        ready=len(ready),
        schedulable=len(schedulable),
        with_free_gpus=sum(1 for n in schedulable if n.gpu_free >= gpus),
    )
